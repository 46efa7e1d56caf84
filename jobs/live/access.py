"""Who may follow what: the live views' guard (A-10, Q-1, Q-2).

The same rules and error codes as the DRF API, for plain async views: a missing
credential is 401 `not_authenticated`, a bad one 401 `invalid_token`, a missing scope 403
`missing_scope`, and a job of another organization 404 `job_not_found`, like a missing one.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from access import tokens
from access.principals import BadCredentials, Principal, bearer_secret, principal_for_request
from jobs import selectors
from jobs.api.errors import error_response
from jobs.core.state import JobState
from jobs.errors import JobNotFound
from jobs.live import credentials
from receipts.live import db

READ_SCOPE = "jobs:read"
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="receipt"'}


class Refused(Exception):
    """A request the guard answers itself; `response` is the JSON error to send."""

    def __init__(self, response: JsonResponse) -> None:
        super().__init__(response.status_code)
        self.response = response


def refuse(code: str, detail: str, status: int, headers: dict[str, str] | None = None) -> Refused:
    return Refused(error_response(code, detail, status, headers))


async def principal(request: HttpRequest, scope: str) -> Principal:
    try:
        found = await db.run(principal_for_request, request)
    except BadCredentials as error:
        raise refuse("invalid_token", str(error), 401, CHALLENGE) from None
    if found is None:
        raise refuse(
            "not_authenticated",
            "credentials are required: send Authorization: Bearer <token>",
            401,
            CHALLENGE,
        )
    if not found.has_scope(scope):
        raise refuse("missing_scope", f"this credential lacks the {scope} scope", 403)
    return found


async def visible_job(request: HttpRequest, job_id: str) -> tuple[Principal, JobState]:
    """The caller and the job it may read, or Refused."""
    who = await principal(request, READ_SCOPE)
    try:
        job = await db.run(selectors.visible_job_or_404, who, job_id)
    except JobNotFound as error:
        raise refuse(error.code, str(error), error.status) from None
    return who, job


def hold(request: HttpRequest, who: Principal, scope: str = READ_SCOPE) -> credentials.Hold:
    """The credential `who` was authenticated with, re-checked while the response is open
    (`credentials.watch` it, and `release` it when the response ends)."""
    if who.via == "token":
        secret = bearer_secret(request) or ""
        return credentials.Hold("token", tokens.digest(secret), scope, who.organization_id)
    session = getattr(request, "session", None)
    key = getattr(session, "session_key", None) or ""
    return credentials.Hold("session", key, scope, who.organization_id)


def lost(held: credentials.Hold) -> Refused:
    code, detail, status = held.lost or ("invalid_token", "unknown or revoked token", 401)
    return refuse(code, detail, status, CHALLENGE if status == 401 else None)
