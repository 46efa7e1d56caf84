"""The PostgreSQL listener: one `LISTEN` connection per process, reconnected with backoff.

It only wakes the feed; it never decides what is new. The feed reads receipts by global
sequence from the database, so a notification lost while disconnected costs latency,
never a receipt: on every (re)connect the feed is nudged to re-read from its horizon.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from django.conf import settings

from observability.logs import log_event
from receipts.db import NOTIFY_CHANNEL, notify

logger = logging.getLogger("receipt.live")
INVALIDATE_CHANNEL = "receipt_invalidate"  # A-7 callbacks, fanned out to every API process
MIN_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0
# Django-only OPTIONS that are not libpq connection parameters.
_DJANGO_OPTIONS = {
    "isolation_level",
    "server_side_binding",
    "pool",
    "assume_role",
    "cursor_factory",
    "context",
    "prepare_threshold",
}


def application_name() -> str:
    # Names the listener in pg_stat_activity, per process (T-6: one listener per process).
    return f"receipt-live-listener:{os.getpid()}"


def connection_kwargs() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    kwargs: dict[str, Any] = {
        "dbname": db["NAME"],
        "autocommit": True,
        "application_name": application_name(),
        "connect_timeout": 10,
        # notice a dead peer while idle in LISTEN, not hours later
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
    }
    for key, name in (
        ("USER", "user"),
        ("PASSWORD", "password"),
        ("HOST", "host"),
        ("PORT", "port"),
    ):
        if db.get(key):
            kwargs[name] = db[key]
    kwargs.update({k: v for k, v in (db.get("OPTIONS") or {}).items() if k not in _DJANGO_OPTIONS})
    return kwargs


async def listen(
    *,
    on_receipt: Callable[[], None],
    on_invalidate: Callable[[str], None],
    on_connected: Callable[[], None],
) -> None:
    """Forever: LISTEN on both channels and report notifications; reconnect on failure."""
    delay = MIN_BACKOFF_S
    while True:
        try:
            channels = (INVALIDATE_CHANNEL, NOTIFY_CHANNEL)
            async with notify.listening(channels, **connection_kwargs()) as notes:
                delay = MIN_BACKOFF_S
                log_event(logger, "live.listener_connected", "live events listener connected")
                on_connected()
                async for note in notes:
                    if note.channel == INVALIDATE_CHANNEL:
                        on_invalidate(note.payload)
                    else:
                        on_receipt()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # any failure: back off and reconnect, never give up
            log_event(
                logger,
                "live.listener_lost",
                f"live events listener lost: {error}; reconnecting in {delay:.1f}s",
                level=logging.WARNING,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)
