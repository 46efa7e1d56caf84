"""The ASGI handler: Django's, except that long-lived live requests get no thread of their own.

Django runs every ASGI request inside its own `ThreadSensitiveContext`, which gives the
request a private worker thread for its synchronous parts (signals, sync middleware) and
keeps it until the response ends. For an SSE stream or a long poll that is one idle
thread per client for minutes (E-3, T-6). Live paths keep that context only while the
response is being produced (middleware, the view's checks), so connecting clients are
still served in parallel; the thread ends before the first byte is streamed. Their
database reads run on the live pool (`jobs.live.db`). Every other request is handled
exactly as Django does.
"""

from __future__ import annotations

import re
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler as DjangoASGIHandler
from django.http import HttpRequest, HttpResponseBase

from jobs.live import db

LIVE_PATHS = re.compile(r"/jobs/[^/]+/(?:events|wait)$|/receipt/stream$")


class ASGIHandler(DjangoASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        db.use_pool()  # a long-lived process: share bounded threads and connections

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and LIVE_PATHS.search(scope.get("path", "")):
            await self.handle(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def run_get_response(self, request: HttpRequest) -> HttpResponseBase:
        if not LIVE_PATHS.search(request.path):
            return await super().run_get_response(request)  # already inside its context
        async with ThreadSensitiveContext():
            return await super().run_get_response(request)


def get_asgi_application() -> ASGIHandler:
    """Like django.core.asgi.get_asgi_application, with the handler above."""
    django.setup(set_prefix=False)
    return ASGIHandler()
