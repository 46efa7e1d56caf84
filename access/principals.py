"""Who is calling (A-10, Q-1, Q-2): a bearer token or a staff admin session.

`Principal.organization_id` is None for callers that may act for any organization;
every query path filters by it through `visible_to`.

Token cache (T-2): a valid token's principal is kept per process for `TOKEN_CACHE_S`
(2 s), keyed by the token's digest, so a busy client costs one token read per process
every two seconds instead of one per request. Revocation stays prompt: saving or deleting
an ApiToken (admin, `ApiToken.save()`) empties this process's cache at once, and every
other process (another uvicorn worker, a runworker) rereads the token at most
`TOKEN_CACHE_S` later; a revocation written with `QuerySet.update()` or SQL, which sends
no signal, also takes effect within that bound. Unknown and revoked tokens are never
cached: they are looked up on every request, as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import import_module

from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.http import HttpRequest
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from access import failures, tokens
from access.models import ApiToken

LAST_USED_RESOLUTION = timedelta(minutes=1)  # avoid a write per request
TOKEN_CACHE_S = 2.0  # the longest a revoked token still works in another process
TOKEN_CACHE_MAX = 1024  # entries; the cache is emptied when full
MAX_SECRET = 200  # longer is no token of ours: refused before hashing
clock = time.monotonic  # the cache's clock (tests move it)


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
    """Credentials were presented but are not valid. `reason` is one of
    `failures.REASONS`; `prefix` and `name` identify the token where that is safe."""

    def __init__(
        self,
        message: str,
        *,
        reason: str = "malformed",
        detail: str = "",
        prefix: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(message)
        self.reason, self.detail, self.prefix, self.name = reason, detail or message, prefix, name


def bearer_secret(request: HttpRequest) -> str | None:
    # META, not `request.headers`: that builds a dict of every header, once a request.
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return None
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise BadCredentials("Authorization must be 'Bearer <token>'", detail="not a Bearer header")
    return secret.strip()


@dataclass(frozen=True)
class _Cached:
    principal: Principal
    token_pk: int
    last_used_at: datetime | None
    read_at: float  # clock() when the row was read


_tokens: dict[str, _Cached] = {}  # digest -> a valid token's principal (this process)


def forget_tokens() -> None:
    """Empty this process's token cache (an ApiToken was saved or deleted)."""
    _tokens.clear()


def forget_token(digest: str) -> None:
    """Drop one token from this process's cache (a re-check found it changed)."""
    _tokens.pop(digest, None)


def principal_for_token(secret: str) -> Principal:
    if not secret.startswith(tokens.TOKEN_PREFIX):
        raise BadCredentials("unknown or revoked token", detail="not a Receipt token")
    if len(secret) > MAX_SECRET:
        raise BadCredentials("unknown or revoked token", detail="longer than any token")
    digest = tokens.digest(secret)
    cached = _tokens.get(digest)
    if cached is None or clock() - cached.read_at > TOKEN_CACHE_S:
        cached = _read_token(secret, digest)
    now = timezone.now()
    if cached.last_used_at is None or now - cached.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=cached.token_pk).update(last_used_at=now)
        _tokens[digest] = cached = _Cached(cached.principal, cached.token_pk, now, cached.read_at)
    return cached.principal


def _read_token(secret: str, digest: str) -> _Cached:
    read_at = clock()
    # Revoked rows too, to tell a revoked token (worth an alert: a client still uses it)
    # from an unknown one; the same single index lookup.
    token = ApiToken.objects.filter(digest=digest).first()
    # The digest lookup is an exact index match on a sha256 of a 256-bit secret; the
    # constant-time compare below guards the final equality check all the same.
    if token is None or not tokens.matches(secret, token.digest):
        _tokens.pop(digest, None)
        raise BadCredentials(
            "unknown or revoked token",
            reason="unknown",
            detail="no such token",
            prefix=secret[: tokens.PUBLIC_PREFIX],
        )
    if token.revoked_at is not None:
        _tokens.pop(digest, None)
        raise BadCredentials(
            "unknown or revoked token",
            reason="revoked",
            detail=f"revoked at {token.revoked_at.isoformat()}",
            prefix=token.prefix,
            name=token.name,
        )
    principal = Principal(
        name=f"token:{token.name}",
        organization_id=token.organization_id,
        scopes=frozenset(token.scopes or []),
        via="token",
    )
    if len(_tokens) >= TOKEN_CACHE_MAX:
        _tokens.clear()
    cached = _tokens[digest] = _Cached(principal, token.pk, token.last_used_at, read_at)
    return cached


# The Django permissions that grant each API scope to a staff session (docs/api.md). A
# scope needs every permission listed. Creating work in an organization's name is more
# than the admin ever lets an operator do, so `jobs:write` also needs the explicit
# `access.enqueue_for_any_organization`. A superuser holds every scope, including those
# listed nowhere here: a scope this table does not name (`factory:commands`) is for
# superusers only.
SCOPE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "jobs:read": ("jobs.view_job",),
    "jobs:write": ("jobs.add_job", "access.enqueue_for_any_organization"),
    "jobs:control": ("jobs.change_job",),
    "objectives:read": ("objectives.view_objectivesummary",),
}


def session_scopes(user) -> frozenset[str]:
    """The API scopes a staff user's permissions grant (read per request: a permission
    taken away in the admin counts from the next request on)."""
    if user.is_superuser:
        return frozenset(tokens.SCOPES)
    granted = user.get_all_permissions()
    return frozenset(
        scope for scope, needs in SCOPE_PERMISSIONS.items() if granted.issuperset(needs)
    )


def principal_for_user(user) -> Principal | None:
    """A staff session acts as its operator: with the scopes its permissions grant, for
    every organization, as the admin does (docs/decisions.md, HTTP API)."""
    if user is None or not user.is_authenticated or not user.is_active or not user.is_staff:
        return None
    return Principal(
        name=user.get_username(),
        organization_id=None,
        scopes=session_scopes(user),
        via="session",
    )


def principal_for_request(request: HttpRequest) -> Principal | None:
    """Token first, then a staff session; None when the request carries neither.

    Raises BadCredentials when a token was presented but is not valid.
    """
    try:
        secret = bearer_secret(request)
        if secret is not None:
            return principal_for_token(secret)
    except BadCredentials as error:
        failures.report(request, error.reason, error.detail, prefix=error.prefix, name=error.name)
        raise
    return principal_for_user(getattr(request, "user", None))


# ---- re-checks of open live responses (issue 31) -----------------------------------------
# A stream or long poll authenticates once, then stays open for minutes. These read the
# credential again, past the token cache, so a revocation ends it within a second or so
# (jobs.live.credentials). Reads only: nothing here writes a session or a token.


def valid_tokens(digests: Iterable[str]) -> dict[str, Principal]:
    """The principals of the still-valid tokens among `digests`, in one query."""
    rows = ApiToken.objects.filter(digest__in=list(digests), revoked_at__isnull=True)
    return {
        digest: Principal(
            name=f"token:{name}",
            organization_id=organization_id,
            scopes=frozenset(scopes or []),
            via="token",
        )
        for digest, name, organization_id, scopes in rows.values_list(
            "digest", "name", "organization_id", "scopes"
        )
    }


def session_principal(session_key: str) -> Principal | None:
    """What the session with this key is now: None once it has ended (logout, expiry, a
    changed password) or its user is no longer active staff. Like
    `django.contrib.auth.get_user`, without its writes (it may flush or re-key a session)."""
    if not session_key:
        return None
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user_id, backend_path = store.get(SESSION_KEY), store.get(BACKEND_SESSION_KEY)
    if user_id is None or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = load_backend(backend_path).get_user(get_user_model()._meta.pk.to_python(user_id))
    if user is None:
        return None
    session_hash = store.get(HASH_SESSION_KEY) or ""
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    if not session_hash or not any(constant_time_compare(session_hash, h) for h in hashes):
        return None
    return principal_for_user(user)
