"""The admin kit: what the jobs, receipts and objectives admins do alike (U-7). Their
base model admins (staff only, no add or delete; own change pages; read-only tables), the
plumbing of our own pages and the formatting they share. No page, model or write here.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

NONE_HTML = mark_safe('<span class="rcpt-none">—</span>')


def utc(ms: int | None) -> str:
    """Milliseconds since the epoch as `2026-11-30 12:25:01.123 UTC`."""
    if ms is None:
        return "—"
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=jsonable)


def jsonable(value: Any) -> Any:
    """Reducer states are often frozen dataclasses; anything else shows as its repr."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return repr(value)


def titled(text: Any, title: Any, *, css: str | None = None) -> str:
    """`text` in a span whose tooltip is `title` (the whole value behind a cut or a summary)."""
    if css is None:
        return format_html('<span title="{}">{}</span>', title, text)
    return format_html('<span class="{}" title="{}">{}</span>', css, title, text)


def stream_url(name: str) -> str:
    """The admin page of the stream `name`."""
    return reverse("admin:receipts_stream_change", args=(quote(name),))


def parse_json_text(text: str, *, missing: str, invalid: str) -> tuple[Any, str | None]:
    """A textarea's JSON, or a sentence saying what is wrong: `missing` when it is empty,
    `invalid` and where the parser stopped when it is not JSON."""
    if not text.strip():
        return None, missing
    try:
        return json.loads(text), None
    except json.JSONDecodeError as error:
        return None, f"{invalid}: {error.msg} (line {error.lineno}, column {error.colno})."


def is_staff(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_staff)


def require(permitted: bool) -> None:
    """Refuse the request (403) unless the user may do what it asks (U-7)."""
    if not permitted:
        raise PermissionDenied


class OperatorAdmin(admin.ModelAdmin):
    """Staff only; nothing is added or deleted from the admin: receipts are written by
    their services and never deleted, and the rows shown are their projections."""

    show_full_result_count = False

    class Media:
        css = {"all": ("receipt/admin.css",)}

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return is_staff(request) and super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def render_page(
        self,
        request: HttpRequest,
        template: str,
        context: dict[str, Any],
        extra_context: dict[str, Any] | None = None,
    ) -> TemplateResponse:
        """One of our own templates inside the admin: the site's context and this model's
        `opts`, then the page's context, then the caller's `extra_context`."""
        page = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            **context,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, template, page)


class OwnChangePage(OperatorAdmin):
    """The change view is a page of our own: the subclass's `object_page(request,
    object_id, extra_context)`, for whoever may view the model, with the id unquoted from
    the URL; it answers 404 itself."""

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        require(self.has_view_permission(request))
        return self.object_page(request, unquote(object_id), extra_context)


class ReadOnlyAdmin(OperatorAdmin):
    """No add, change, delete or bulk action: a table to look at."""

    actions = None

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
