"""A host project's URLconf that includes Receipt's URLs under /api/ (test_enqueue)."""

from django.urls import include, path

urlpatterns = [path("api/", include("receipt_site.host_urls"))]
