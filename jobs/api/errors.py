"""The API's error shape, `{"ok": false, "error": "<code>", "detail": "<sentence>"}`, for
every HTTP path: DRF views get it from `receipt_site.api_errors`' exception handler, plain
Django views (live events) build it here.

It also says which database errors mean the database cannot be reached (C-8): those are
answered 503 `database_unavailable` with Retry-After wherever they surface, since the
request was fine and the same request succeeds once the database is back.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import JsonResponse

DATABASE_UNAVAILABLE = "database_unavailable"
DATABASE_UNAVAILABLE_DETAIL = "the database cannot be reached; try again shortly"
RETRY_AFTER_S = 5  # about how long a PostgreSQL restart takes; clients back off from here

# SQLSTATEs of a server that is gone or not taking connections: the connection exception
# class (08), a shutdown or crash restart (57P01, 57P02), a server still starting (57P03),
# and no connection slot left (53300).
_UNAVAILABLE_SQLSTATES = ("57P01", "57P02", "57P03", "53300")
# What the driver says when it has no server to ask (no SQLSTATE then): refused or lost
# connections, and the pool's wait for a connection running out. SQLite's own: a database
# still locked by another writer after its 20 s busy timeout, or a file it cannot open.
_UNAVAILABLE_TEXT = (
    "connection failed",
    "connection refused",
    "could not connect",
    "server closed the connection",
    "consuming input failed",
    "the connection is lost",
    "the connection is closed",
    "terminating connection",
    "no connection to the server",
    "couldn't get a connection",
    "connection timeout expired",
    "database is locked",
    "database table is locked",
    "unable to open database file",
)


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


def is_database_unavailable(error: BaseException) -> bool:
    """True for a database error that means no database could be reached: stopped,
    restarting, refusing connections, or (SQLite) locked or unopenable. Not for a query
    the database refused (a missing table, a conflict, a timeout of the statement)."""
    if isinstance(error, InterfaceError):  # Django's: the connection is already closed
        return True
    if not isinstance(error, DatabaseError):
        return False
    cause = error.__cause__
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate:
        return sqlstate.startswith("08") or sqlstate in _UNAVAILABLE_SQLSTATES
    if not isinstance(error, OperationalError):
        return False
    text = str(error).lower()
    return any(marker in text for marker in _UNAVAILABLE_TEXT)


def database_unavailable_response() -> JsonResponse:
    return error_response(
        DATABASE_UNAVAILABLE,
        DATABASE_UNAVAILABLE_DETAIL,
        503,
        {"Retry-After": str(RETRY_AFTER_S)},
    )
