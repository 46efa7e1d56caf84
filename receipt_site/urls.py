from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.generic import RedirectView

from jobs.api.schema import ApiDocsView, ApiSchemaView

# A receipt-slip mark, so browsers stop asking for a missing /favicon.ico on every page.
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<path d="M3 1h10v14l-2-1.5L9 15l-1-1.5L7 15l-2-1.5L3 15z" fill="#264b5d"/>'
    '<path d="M5 5h6M5 8h6M5 11h4" stroke="#fff" stroke-width="1.2"/></svg>'
)


def favicon(request: HttpRequest) -> HttpResponse:
    response = HttpResponse(FAVICON, content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response


urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False), name="root"),
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("api/schema/", ApiSchemaView.as_view(), name="schema"),
    path("api/docs/", ApiDocsView.as_view(url_name="schema"), name="api-docs"),
    path("", include("receipt_site.host_urls")),  # what a host project includes too
]

# JSON errors outside DRF views; the admin keeps its HTML pages (receipt_site.api_errors).
handler404 = "receipt_site.api_errors.handler404"
handler500 = "receipt_site.api_errors.handler500"
