"""Every API error as `{"ok": false, "error": "<code>", "detail": "<sentence>"}` (SPEC 9).

This module owns the mapping from exceptions to error responses: the DRF exception
handler (`exception_handler`, set in REST_FRAMEWORK), the JSON `handler404`/`handler500`
for URLs outside DRF views, and `error_response` for plain Django views (live events)
that want the same shape. It must not decide *whether* something is an error: services
raise, this renders.

- An app error (any `receipts.core.errors.AppError`: every app's errors derive from it)
  keeps its code, status and message.
- DRF's own exceptions keep their status with a stable code (`not_authenticated`,
  `invalid_token`, `missing_scope`, `method_not_allowed`, `throttled` ...).
- `payload_too_large` is always 413, whether the body was too big to read or the
  parsed payload is over `RECEIPT_MAX_PAYLOAD_BYTES` (docs/decisions.md, HTTP API).
- A database that cannot be reached (`jobs.api.errors.is_database_unavailable`) is a 503
  `database_unavailable` with Retry-After (C-8), logged as `http.database_unavailable`:
  from DRF views here, from every other view through `DatabaseOutageMiddleware`, and from
  middleware through `handler500`; the admin gets a plain page that needs no database.
- Anything else is a 500 `internal_error`: the exception is logged as
  `http.unhandled_error` with an error id, and only that id reaches the client.
"""

from __future__ import annotations

import logging
import secrets
import sys
import traceback
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils.deprecation import MiddlewareMixin
from django.views import defaults
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

from jobs.api.errors import (
    DATABASE_UNAVAILABLE,
    DATABASE_UNAVAILABLE_DETAIL,
    RETRY_AFTER_S,
    database_unavailable_response,
    error_body,
    error_response,
    is_database_unavailable,
)
from observability.logs import log_event
from receipt_site import admin_site
from receipts.core.errors import AppError

logger = logging.getLogger("receipt.http")

PAYLOAD_TOO_LARGE = "payload_too_large"
INTERNAL_ERROR = "internal_error"
# Paths that keep Django's HTML error pages (the operator admin).
HTML_PREFIXES = ("/admin/",)
DATABASE_UNAVAILABLE_TEMPLATE = "admin/database_unavailable.html"

# DRF exception classes -> our code when DRF's own default code is not the one we promise.
_DRF_CODES: dict[type[drf.APIException], str] = {
    drf.ParseError: "malformed_json",
    drf.ValidationError: "invalid_request",
}


def _sentence(detail: Any) -> str:
    """A DRF `detail` (string, list or dict of ErrorDetail) as one human sentence."""
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {_sentence(value)}" for key, value in detail.items())
    if isinstance(detail, list):
        return "; ".join(_sentence(item) for item in detail)
    return str(detail)


def describe(exc: BaseException) -> tuple[int, str, str, dict[str, str]] | None:
    """(status, code, detail, headers) for an exception we expect, None for a bug."""
    if isinstance(exc, AppError):
        # code, status and an id-bearing message (STYLE: Errors)
        code, status = exc.code, exc.status
        return 413 if code == PAYLOAD_TOO_LARGE else status, code, str(exc), {}
    if isinstance(exc, Http404):
        return 404, "not_found", "no such resource", {}
    if isinstance(exc, DjangoPermissionDenied):
        return 403, "permission_denied", str(exc) or "permission denied", {}
    if isinstance(exc, RequestDataTooBig):
        return 413, PAYLOAD_TOO_LARGE, "request body is larger than this server accepts", {}
    if isinstance(exc, SuspiciousOperation):
        return 400, "bad_request", "the request was refused as malformed", {}
    if isinstance(exc, drf.APIException):
        headers: dict[str, str] = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if isinstance(exc, drf.Throttled) and exc.wait is not None:
            headers["Retry-After"] = str(int(exc.wait))
        drf_code = _DRF_CODES.get(type(exc))
        if drf_code is None:
            codes = exc.get_codes()
            drf_code = codes if isinstance(codes, str) else exc.default_code
        return exc.status_code, str(drf_code), _sentence(exc.detail), headers
    if is_database_unavailable(exc):
        headers = {"Retry-After": str(RETRY_AFTER_S)}
        return 503, DATABASE_UNAVAILABLE, DATABASE_UNAVAILABLE_DETAIL, headers
    return None


def _log_unhandled(exc: BaseException, request: Any) -> str:
    error_id = f"err-{secrets.token_hex(6)}"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log_event(
        logger,
        "http.unhandled_error",
        f"unhandled {type(exc).__name__} ({error_id})",
        level=logging.ERROR,
        errorId=error_id,
        errorType=type(exc).__name__,
        method=getattr(request, "method", None),
        path=getattr(request, "path", None),
        traceback=tb[-2000:],
    )
    return error_id


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """REST_FRAMEWORK['EXCEPTION_HANDLER']: every DRF view error in one shape."""
    set_rollback()
    described = describe(exc)
    if described is None:
        error_id = _log_unhandled(exc, context.get("request"))
        detail = f"internal error {error_id}; the server log has the details"
        return Response(error_body(INTERNAL_ERROR, detail), status=500)
    status, code, detail, headers = described
    if code == DATABASE_UNAVAILABLE:
        _log_unavailable(exc, context.get("request"))
    return Response(error_body(code, detail), status=status, headers=headers)


def _log_unavailable(exc: BaseException, request: Any) -> None:
    # A warning, not an error with a traceback: nothing is wrong with the request or the
    # code, and during an outage every request lands here.
    log_event(
        logger,
        "http.database_unavailable",
        f"database unavailable: {type(exc).__name__}: {str(exc)[:300]}",
        level=logging.WARNING,
        errorType=type(exc).__name__,
        method=getattr(request, "method", None),
        path=getattr(request, "path", None),
    )


def database_unavailable(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """The 503 for a request the database could not serve: JSON, or the admin's page."""
    _log_unavailable(exc, request)
    if not _wants_html(request):
        return database_unavailable_response()
    page = render_to_string(DATABASE_UNAVAILABLE_TEMPLATE, {"retry_after": RETRY_AFTER_S})
    response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


class DatabaseOutageMiddleware(MiddlewareMixin):
    """Views outside DRF (the admin, live events, health, metrics) answer a database
    that cannot be reached with the 503 above instead of a 500 (C-8)."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_database_unavailable(exception):
            return database_unavailable(request, exception)
        return None


def _wants_html(request: HttpRequest) -> bool:
    return request.path.startswith(HTML_PREFIXES)


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """JSON 404 for every URL outside the admin; the admin's own styled HTML page inside."""
    if _wants_html(request):
        if not hasattr(request, "user"):  # failed before the auth middleware ran
            return defaults.page_not_found(request, exception or Http404())
        return admin_site.not_found(request, exception)
    return error_response("not_found", f"no resource at {request.path}", 404)


def handler500(request: HttpRequest) -> HttpResponse:
    """JSON 500 outside the admin; Django has already logged the exception.

    Also the last resort for a database outage raised where no view's handler sees it
    (a middleware, such as the session save after the view): Django calls this inside its
    `except` block, on the thread it handles the exception on, so the exception is at hand.
    """
    exc = sys.exc_info()[1]
    if exc is not None and is_database_unavailable(exc):
        return database_unavailable(request, exc)
    if _wants_html(request):
        return defaults.server_error(request)
    return error_response(INTERNAL_ERROR, "internal error; the server log has the details", 500)
