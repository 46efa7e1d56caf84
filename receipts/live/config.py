"""Tuning of live events: the live settings of the running configuration
(`settings.RECEIPT`, receipt_site.config, which validates them), read once.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class LiveConfig:
    keepalive_ms: int  # E-1: `event: ping` after this much silence
    poll_ms: int  # SQLite: how often the feed reads the global sequence (S-9)
    db_threads: int  # threads (and so database connections) shared by every live client
    ring_size: int  # recent receipts kept in memory for clients that are up to date


def load() -> LiveConfig:
    config = settings.RECEIPT
    return LiveConfig(
        keepalive_ms=config.sse_keepalive_ms,
        poll_ms=config.sse_poll_ms,
        db_threads=config.live_db_threads,
        ring_size=config.live_ring_size,
    )


CONFIG = load()
