"""Receipt's URLs, for any prefix: `path("receipt/", include("receipt_site.host_urls"))`
in a host project's URLconf (the standalone site includes them at its root).

The jobs API, the live events, health and metrics; the Factory API when `objectives` is
installed. Receipt's pages reverse these names, so they resolve under any prefix.
"""

from django.apps import apps
from django.urls import include, path

from jobs import metrics
from receipt_site import health

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("", include("jobs.live.urls")),
    path("", include("jobs.api.urls")),
]
if apps.is_installed("objectives"):
    urlpatterns.append(path("factory/api/", include("objectives.api.urls")))
