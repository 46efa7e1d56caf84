"""Who is calling (A-10, Q-1, Q-2): a bearer token or a staff admin session.

`Principal.organization_id` is None for callers that may act for any organization;
every query path filters by it through `visible_to`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.http import HttpRequest
from django.utils import timezone

from access import tokens
from access.models import ApiToken

LAST_USED_RESOLUTION = timedelta(minutes=1)  # avoid a write per request


@dataclass(frozen=True)
class Principal:
    name: str  # recorded as `by` on receipts
    organization_id: str | None
    scopes: frozenset[str]
    via: str  # "token" | "session"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def may_see(self, organization_id: str | None) -> bool:
        return self.organization_id is None or self.organization_id == organization_id


class BadCredentials(Exception):
    """Credentials were presented but are not valid (unknown, revoked, malformed)."""


def bearer_secret(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    if not header:
        return None
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise BadCredentials("Authorization must be 'Bearer <token>'")
    return secret.strip()


def principal_for_token(secret: str) -> Principal:
    if not secret.startswith(tokens.TOKEN_PREFIX) or len(secret) > 200:
        raise BadCredentials("unknown or revoked token")
    token = ApiToken.objects.filter(digest=tokens.digest(secret), revoked_at__isnull=True).first()
    # The digest lookup is an exact index match on a sha256 of a 256-bit secret; the
    # constant-time compare below guards the final equality check all the same.
    if token is None or not tokens.matches(secret, token.digest):
        raise BadCredentials("unknown or revoked token")
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return Principal(
        name=f"token:{token.name}",
        organization_id=token.organization_id,
        scopes=frozenset(token.scopes or []),
        via="token",
    )


def principal_for_user(user) -> Principal | None:
    """Staff sessions act as operators: every scope, every organization (U-7)."""
    if user is None or not user.is_authenticated or not user.is_active or not user.is_staff:
        return None
    return Principal(
        name=user.get_username(),
        organization_id=None,
        scopes=frozenset(tokens.SCOPES),
        via="session",
    )


def principal_for_request(request: HttpRequest) -> Principal | None:
    """Token first, then a staff session; None when the request carries neither.

    Raises BadCredentials when a token was presented but is not valid.
    """
    secret = bearer_secret(request)
    if secret is not None:
        return principal_for_token(secret)
    return principal_for_user(getattr(request, "user", None))
