"""The ASGI handler: Django's, except that long-lived live requests get no thread of their own.

Django runs every ASGI request inside its own `ThreadSensitiveContext`, which gives the
request a private worker thread for its synchronous parts (signals, sync middleware) and
keeps it until the response ends. For an SSE stream or a long poll that is one idle
thread per client for minutes (E-3, T-6). Live paths keep that context only while the
response is being produced (middleware, the view's checks), so connecting clients are
still served in parallel; the thread ends before the first byte is streamed. Their
database reads run on the live pool (`receipts.live.db`).

Every other request is handled as Django does, except where its thread comes from (T-2):
Django starts a fresh single-thread executor per request and joins it afterwards, a
thread start and join per request that cost about a fifth of the server's CPU under
load. Here each request borrows an idle single-thread executor (`ThreadSensitiveContext`
with an `executor`) and returns it when the response has ended, so a request still has a
thread of its own for its synchronous parts, and concurrent requests still run in
parallel. Nothing is carried over between requests: Django's connections and other
request state live in context variables, not in the thread. At most `IDLE_THREADS`
executors are kept; the rest are shut down when returned.

And those requests go through the middleware chain built in sync mode, in one hop to
their thread, exactly as under WSGI: the async chain Django builds for ASGI runs each
`MiddlewareMixin`'s process_request and process_response through `sync_to_async`, two
thread hops per middleware per request, which cost more CPU than the enqueue itself. Same
middleware, same order, same view: only the thread switching is gone. Live paths keep the
async chain, so their streams hold no thread.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler as DjangoASGIHandler
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest, HttpResponseBase

from receipts.live import db

LIVE_PATHS = re.compile(r"/jobs/[^/]+/(?:events|wait)$|/receipt/stream$")
IDLE_THREADS = 64  # request threads kept for reuse; more are started under a burst


class _RequestThreads:
    """Idle single-thread executors; used from the event loop's thread only."""

    def __init__(self, *, keep: int) -> None:
        self.keep = keep
        self.idle: list[ThreadPoolExecutor] = []

    def take(self) -> ThreadPoolExecutor:
        if self.idle:
            return self.idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="receipt-request")

    def give(self, executor: ThreadPoolExecutor) -> None:
        if len(self.idle) < self.keep:
            self.idle.append(executor)
        else:
            executor.shutdown(wait=False)


class ASGIHandler(DjangoASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        db.use_pool()  # a long-lived process: share bounded threads and connections
        self.threads = _RequestThreads(keep=IDLE_THREADS)
        self.sync_chain = BaseHandler()  # the same middleware in sync mode, as under WSGI
        self.sync_chain.load_middleware(is_async=False)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)  # Django refuses it
            return
        if LIVE_PATHS.search(scope.get("path", "")):
            await self.handle(scope, receive, send)
            return
        executor = self.threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give(executor)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        if LIVE_PATHS.search(request.path):
            return await super().get_response_async(request)
        # one hop to the request's own thread (thread-sensitive: its pooled executor)
        return await sync_to_async(self.sync_chain.get_response)(request)

    async def run_get_response(self, request: HttpRequest) -> HttpResponseBase:
        if not LIVE_PATHS.search(request.path):
            return await super().run_get_response(request)  # already inside its context
        async with ThreadSensitiveContext():
            return await super().run_get_response(request)


def get_asgi_application() -> ASGIHandler:
    """Like django.core.asgi.get_asgi_application, with the handler above."""
    django.setup(set_prefix=False)
    return ASGIHandler()
