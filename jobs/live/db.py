"""Database work of live clients, on a small shared thread pool.

Django's ORM is synchronous. `sync_to_async(thread_sensitive=True)` would run it on each
request's own thread (one idle thread and one open connection per SSE client); this pool
bounds both to `RECEIPT_LIVE_DB_THREADS`, whatever the number of clients (E-3, T-6).
Each pool thread keeps one Django connection, recycled like a request's would be.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connection

from jobs.live.config import CONFIG

P = ParamSpec("P")
R = TypeVar("R")

_POOL = ThreadPoolExecutor(max_workers=CONFIG.db_threads, thread_name_prefix="receipt-live-db")
_checked = threading.local()
CHECK_EVERY_S = 1.0  # CONN_MAX_AGE / health checks, without a `SELECT 1` before every read


def _call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    now = time.monotonic()
    if connection.errors_occurred or now - getattr(_checked, "at", 0.0) > CHECK_EVERY_S:
        close_old_connections()
        _checked.at = now
    return fn(*args, **kwargs)


async def run(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run `fn` on the live pool and await its result."""
    return await sync_to_async(_call, thread_sensitive=False, executor=_POOL)(fn, *args, **kwargs)
