"""The operator admin site: the order of the index and its admin-styled "not found" page.

This module owns how the admin presents itself as a whole: what an operator sees first
on the index (the dashboard and jobs, then objectives), which tables are the runtime's
internals (django-q's task tables, the durable ledger) and so go below a plain heading,
and the HTML 404 inside /admin/. It must not decide what a user may see: every row still
comes from Django's permission-filtered app list.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse

# App order on the index and in the sidebar; an app not named here comes after these.
APP_ORDER = ("jobs", "objectives", "receipts", "access", "auth")
# Models that are the runtime's own bookkeeping: shown under "Internal tables".
INTERNAL_MODELS = {
    "objectives": ("Workflow", "Signal", "Activity", "ActivityAttempt"),
}
INTERNAL_APPS = ("django_q",)
INTERNAL_NAMES = {"objectives": "Objectives ledger", "django_q": "Task queue (django-q)"}
NOT_FOUND_TEMPLATE = "admin/not_found.html"


def _dashboard_row(request: HttpRequest) -> dict[str, Any] | None:
    if not request.user.has_perm("jobs.view_job"):
        return None
    try:
        url = reverse("admin:jobs_job_dashboard")
    except NoReverseMatch:
        return None
    return {
        "name": "Dashboard",
        "object_name": "Dashboard",
        "admin_url": url,
        "add_url": None,
        "view_only": True,
        "perms": {"view": True},
    }


def arrange(apps: list[dict[str, Any]], request: HttpRequest) -> list[dict[str, Any]]:
    """Operators' apps first in APP_ORDER, then the internal tables marked `internal`."""
    primary: list[dict[str, Any]] = []
    internal: list[dict[str, Any]] = []
    for app in apps:
        label = app["app_label"]
        if label in INTERNAL_APPS:
            internal.append(
                {**app, "name": INTERNAL_NAMES.get(label, app["name"]), "internal": True}
            )
            continue
        hidden = INTERNAL_MODELS.get(label, ())
        own = [m for m in app["models"] if m["object_name"] not in hidden]
        ledger = [m for m in app["models"] if m["object_name"] in hidden]
        if label == "jobs":
            dashboard = _dashboard_row(request)
            own = ([dashboard] if dashboard else []) + own
        if own:
            primary.append({**app, "models": own})
        if ledger:  # its own anchor, so the sidebar marks only the operator's half current
            internal.append(
                {
                    **app,
                    "name": INTERNAL_NAMES.get(label, app["name"]),
                    "app_url": f"{app['app_url']}#internal",
                    "models": ledger,
                    "internal": True,
                }
            )

    def rank(app: dict[str, Any]) -> tuple[int, str]:
        label = app["app_label"]
        return (APP_ORDER.index(label) if label in APP_ORDER else len(APP_ORDER), app["name"])

    return sorted(primary, key=rank) + sorted(internal, key=rank)


class ReceiptAdminSite(admin.AdminSite):
    site_header = "Receipt operations"
    site_title = "Receipt"
    index_title = "Jobs, streams and objectives"

    def get_app_list(
        self, request: HttpRequest, app_label: str | None = None
    ) -> list[dict[str, Any]]:
        apps = super().get_app_list(request, app_label)
        return apps if app_label is not None else arrange(apps, request)

    def index(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        apps = self.get_app_list(request)
        context = {
            "arranged_index": True,
            "primary_apps": [a for a in apps if not a.get("internal")],
            "internal_apps": [a for a in apps if a.get("internal")],
            **(extra_context or {}),
        }
        return super().index(request, context)


class ReceiptAdminConfig(AdminConfig):
    """INSTALLED_APPS' admin: Django's, with ReceiptAdminSite as `admin.site`."""

    default_site = "receipt_site.admin_site.ReceiptAdminSite"


def _list_for(path: str) -> tuple[str, str] | None:
    """(changelist url, plural name) of the admin model a path is under, if any."""
    parts = [p for p in path.split("/") if p]
    if len(parts) < 3 or parts[0] != "admin":
        return None
    for model in admin.site._registry:
        opts = model._meta
        if (opts.app_label, opts.model_name) == (parts[1], parts[2]):
            try:
                url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
            except NoReverseMatch:
                return None
            return url, str(opts.verbose_name_plural)
    return None


def not_found(request: HttpRequest, exception: BaseException | None) -> HttpResponse:
    """An admin-styled 404: what was not found, and the way back to its list."""
    detail = exception.args[0] if isinstance(exception, Http404) and exception.args else None
    message = detail if isinstance(detail, str) and detail else "Nothing is at this address."
    back = _list_for(request.path)
    context = {
        **admin.site.each_context(request),
        "title": "Not found",
        "message": message[:1].upper() + message[1:],
        "list_url": back[0] if back else None,
        "list_name": back[1] if back else None,
    }
    response = TemplateResponse(request, NOT_FOUND_TEMPLATE, context, status=404)
    return response.render()
