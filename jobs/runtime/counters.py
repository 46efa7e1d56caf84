"""Process-local counters, flushed to the `jobs_counter` table at most every few seconds
(X-2). Incrementing is a dict update; the flush is one upsert per changed series."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import defaultdict

FLUSH_EVERY_S = 5.0
_values: dict[tuple[str, str], float] = defaultdict(float)
_dirty: set[tuple[str, str]] = set()
_lock = threading.Lock()
_last_flush = 0.0


def _labels(labels: dict[str, object]) -> str:
    return ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))


def incr(name: str, amount: float = 1.0, **labels: object) -> None:
    key = (name, _labels(labels))
    with _lock:
        _values[key] += amount
        _dirty.add(key)


def value(name: str, **labels: object) -> float:
    with _lock:
        return _values.get((name, _labels(labels)), 0.0)


def process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def flush(*, force: bool = False) -> int:
    """Write changed series; cheap no-op unless FLUSH_EVERY_S passed (or `force`)."""
    global _last_flush
    now = time.monotonic()
    if not force and now - _last_flush < FLUSH_EVERY_S:
        return 0
    with _lock:
        pending = {key: _values[key] for key in _dirty}
        _dirty.clear()
        _last_flush = now
    if not pending:
        return 0
    from jobs.models import Counter
    from receipts.clock import now_ms

    try:
        stamp = now_ms()
        pid = process_id()
        for (name, labels), total in pending.items():
            Counter.objects.update_or_create(name=name, labels=labels, process_id=pid,
                                             defaults={"value": total, "updated_at": stamp})
    except Exception:  # counters must never break the work they count: retry next flush
        with _lock:
            _dirty.update(pending)
        return 0
    return len(pending)
