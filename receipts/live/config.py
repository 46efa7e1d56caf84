"""Tuning of live events, read once from the environment.

Kept here rather than in receipt_site.config while only live events read it; an
invalid value stops startup naming the variable, like every other setting (SPEC 13).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class LiveConfig:
    keepalive_ms: int  # E-1: `event: ping` after this much silence
    poll_ms: int  # SQLite: how often the feed reads the global sequence (S-9)
    db_threads: int  # threads (and so database connections) shared by every live client
    ring_size: int  # recent receipts kept in memory for clients that are up to date


def _int(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(
            f"invalid configuration: {name} must be an integer, got {raw!r}"
        ) from None
    if not low <= value <= high:
        raise ImproperlyConfigured(
            f"invalid configuration: {name} must be in {low}..{high}, got {value}"
        )
    return value


def load() -> LiveConfig:
    return LiveConfig(
        keepalive_ms=_int("RECEIPT_SSE_KEEPALIVE_MS", 5000, 50, 600_000),
        poll_ms=_int("RECEIPT_SSE_POLL_MS", 250, 10, 10_000),
        db_threads=_int("RECEIPT_LIVE_DB_THREADS", 4, 1, 64),
        ring_size=_int("RECEIPT_LIVE_RING_SIZE", 10_000, 100, 1_000_000),
    )


CONFIG = load()
