"""The API's error shape, `{"ok": false, "error": "<code>", "detail": "<sentence>"}`, for
every HTTP path: DRF views get it from `receipt_site.api_errors`' exception handler, plain
Django views (live events) build it here."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse


def error_body(code: str, detail: str) -> dict[str, Any]:
    return {"ok": False, "error": code, "detail": detail}


def error_response(
    code: str, detail: str, status: int, headers: dict[str, str] | None = None
) -> JsonResponse:
    """The error shape as a plain Django response (for views outside DRF)."""
    response = JsonResponse(error_body(code, detail), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response
