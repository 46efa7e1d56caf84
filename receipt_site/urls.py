from django.contrib import admin
from django.urls import include, path

from jobs import metrics
from jobs.api.schema import ApiDocsView, ApiSchemaView
from receipt_site import health

admin.site.site_header = "Receipt operations"
admin.site.site_title = "Receipt"
admin.site.index_title = "Jobs, streams and objectives"

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/schema/", ApiSchemaView.as_view(), name="schema"),
    path("api/docs/", ApiDocsView.as_view(url_name="schema"), name="api-docs"),
    path("factory/api/", include("objectives.api.urls")),
    path("", include("jobs.live.urls")),
    path("", include("jobs.api.urls")),
]

# JSON errors outside DRF views; the admin keeps its HTML pages (receipt_site.api_errors).
handler404 = "receipt_site.api_errors.handler404"
handler500 = "receipt_site.api_errors.handler500"
