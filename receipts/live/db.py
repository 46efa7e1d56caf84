"""Database work of live clients, on a small shared thread pool.

Django's ORM is synchronous. `sync_to_async(thread_sensitive=True)` would run it on each
request's own thread (one idle thread and one open connection per SSE client); this pool
bounds both to `RECEIPT_LIVE_DB_THREADS`, whatever the number of clients (E-3, T-6).
Each pool thread keeps one Django connection, recycled like a request's would be.

The pool exists only under the ASGI server (`jobs.live.asgi` turns it on). Anywhere else
(WSGI, Django's test client) a request and its event loop are short-lived, so the calls
run where Django runs them by default and their connections close with the request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connection

from receipts.live.config import CONFIG

P = ParamSpec("P")
R = TypeVar("R")

CHECK_EVERY_S = 1.0  # CONN_MAX_AGE / health checks, without a `SELECT 1` before every read
_pool: ThreadPoolExecutor | None = None
_checked = threading.local()


def use_pool() -> None:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(
            max_workers=CONFIG.db_threads, thread_name_prefix="receipt-live-db"
        )


def _call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    now = time.monotonic()
    if connection.errors_occurred or now - getattr(_checked, "at", 0.0) > CHECK_EVERY_S:
        close_old_connections()
        _checked.at = now
    return fn(*args, **kwargs)


async def run(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run `fn` on the live pool (or Django's default thread) and await its result."""
    if _pool is None:
        return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)
    return await sync_to_async(_call, thread_sensitive=False, executor=_pool)(fn, *args, **kwargs)
