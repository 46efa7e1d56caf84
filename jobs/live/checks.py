"""Checks every live view shares: method, server kind, Last-Event-ID, a feed that is up."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest

from jobs.api.errors import DATABASE_UNAVAILABLE
from jobs.live.access import refuse
from receipts.live import feed
from receipts.live.config import CONFIG

_SEQ = re.compile(r"\d{1,19}")


def keepalive_s() -> float:
    return CONFIG.keepalive_ms / 1000


def allow(request: HttpRequest, method: str) -> None:
    if request.method != method:
        raise refuse(
            "method_not_allowed",
            f"{request.method} is not allowed here; use {method}",
            405,
            {"Allow": method},
        )


def asgi_only(request: HttpRequest) -> None:
    # Under WSGI Django would buffer an endless stream into memory before sending it.
    if not isinstance(request, ASGIRequest):
        raise refuse(
            "asgi_required", f"live event streams need an ASGI server ({_asgi_server()})", 501
        )


def _asgi_server() -> str:
    """The project's own ASGI app (the standalone site's, or a host project's as
    startproject lays it out), as a command to serve it."""
    wsgi = getattr(settings, "WSGI_APPLICATION", None) or ""
    app = getattr(settings, "ASGI_APPLICATION", None) or wsgi.replace(".wsgi.", ".asgi.")
    module, _, name = app.rpartition(".")
    return f"python -m uvicorn {module}:{name}" if module else "uvicorn, daphne or hypercorn"


def single(request: HttpRequest, *names: str) -> None:
    """A query parameter the view reads may be given once (as in the DRF API)."""
    for name in names:
        if len(request.GET.getlist(name)) > 1:
            raise refuse(
                "repeated_parameter", f"{name} is given more than once; give it at most once", 400
            )


def last_event_id(request: HttpRequest) -> int | None:
    """E-2: the `Last-Event-ID` header, or `?lastEventId=` for EventSource polyfills."""
    raw = request.headers.get("Last-Event-ID") or request.GET.get("lastEventId") or ""
    raw = raw.strip()
    if not raw:
        return None
    if not _SEQ.fullmatch(raw):
        raise refuse(
            "invalid_last_event_id",
            f"Last-Event-ID must be a global sequence number, got {raw[:40]!r}",
            400,
        )
    return int(raw)


async def running_feed() -> feed.Feed:
    """The running feed, caught up with everything committed before this request."""
    try:
        live = await feed.running()
        await live.catch_up()
        return live
    except feed.FeedUnavailable as error:
        # the database cannot be read in time: the same answer as the whole API's (C-8)
        raise refuse(DATABASE_UNAVAILABLE, str(error), 503, {"Retry-After": "2"}) from None
