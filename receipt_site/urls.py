from django.contrib import admin
from django.urls import include, path

from receipt_site import health

admin.site.site_header = "Receipt operations"
admin.site.site_title = "Receipt"
admin.site.index_title = "Jobs, streams and objectives"

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("", include("jobs.live.urls")),
    path("", include("jobs.api.urls")),
]
