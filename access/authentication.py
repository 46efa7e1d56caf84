"""DRF authentication for the API (A-10, Q-1): a bearer token or a staff admin session.

`PrincipalAuthentication` wraps `access.principals`; a successful authentication sets
`request.user` to the `Principal` (never a Django user), so views and permissions see
one type whatever the credential. Sessions are checked for CSRF on unsafe methods,
exactly as DRF's SessionAuthentication does; bearer requests need no CSRF token
because a browser never attaches one by itself.
"""

from __future__ import annotations

from typing import Any

from django.middleware.csrf import CsrfViewMiddleware
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from access.principals import BadCredentials, Principal, principal_for_request

REALM = "receipt"


class InvalidToken(exceptions.AuthenticationFailed):
    default_detail = "unknown or revoked token"
    default_code = "invalid_token"


class CsrfFailed(exceptions.PermissionDenied):
    default_detail = "CSRF check failed"
    default_code = "csrf_failed"


class _CSRFCheck(CsrfViewMiddleware):
    def _reject(self, request: Any, reason: str) -> str:
        return reason  # return the reason instead of an HTML 403


def _enforce_csrf(request: Request) -> None:
    check = _CSRFCheck(lambda _request: None)
    check.process_request(request._request)
    reason = check.process_view(request._request, None, (), {})
    if reason:
        raise CsrfFailed(f"CSRF check failed for the admin session: {reason}")


class PrincipalAuthentication(BaseAuthentication):
    """`Authorization: Bearer <token>` first, else a staff session (with CSRF)."""

    def authenticate(self, request: Request) -> tuple[Principal, None] | None:
        try:
            principal = principal_for_request(request._request)
        except BadCredentials as error:
            raise InvalidToken(str(error)) from None
        if principal is None:
            return None
        if principal.via == "session":
            _enforce_csrf(request)
        return principal, None

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) with WWW-Authenticate when credentials are missing.
        return f'Bearer realm="{REALM}"'


class PrincipalAuthenticationScheme(OpenApiAuthenticationExtension):
    """Declares the bearer scheme in the OpenAPI schema (A-11). The staff session also
    works but is a browser convenience, described in the text rather than as a scheme."""

    target_class = PrincipalAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "rcpt_<token>",
            "description": "An API token from `manage.py createtoken` or the admin; "
            "a staff admin session works too (with X-CSRFToken on POST).",
        }
