"""Process-local counters, flushed to the `jobs_counter` table at most every few seconds
(X-2). Incrementing is a dict update; the flush is one upsert statement for the changed series."""

from __future__ import annotations

import os
import socket
import threading
import time
from bisect import bisect_left
from collections import defaultdict
from functools import cache

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


# Upper bounds (seconds) of the append-latency histogram's buckets; +Inf is the count.
APPEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
APPEND_SECONDS = "receipt_append_seconds"
HISTOGRAMS = frozenset({APPEND_SECONDS})


def observe(name: str, seconds: float, buckets: tuple[float, ...], **labels: object) -> None:
    """One observation of a Prometheus histogram, kept as cumulative counter series
    (`<name>_bucket{le=...}`, `<name>_sum`, `<name>_count`), flushed like every counter."""
    bucket_keys, sum_key, count_key = _histogram_keys(name, buckets, tuple(labels.items()))
    first = bisect_left(buckets, seconds)  # the buckets from here on hold the observation
    with _lock:
        # every bucket is written, zero or not: a histogram lists all its bounds
        for index, key in enumerate(bucket_keys):
            if index >= first:
                _values[key] += 1.0
            else:
                _values[key] += 0.0
        _values[sum_key] += seconds
        _values[count_key] += 1.0
        _dirty.update(bucket_keys)
        _dirty.add(sum_key)
        _dirty.add(count_key)


@cache
def _histogram_keys(
    name: str, buckets: tuple[float, ...], items: tuple[tuple[str, object], ...]
) -> tuple[tuple[tuple[str, str], ...], tuple[str, str], tuple[str, str]]:
    """The series keys of one histogram (bucket keys in bound order, +Inf last), built
    once per label set: an observation is on every append."""
    labels = dict(items)
    bounds = [_le(bound) for bound in buckets] + ["+Inf"]
    bucket_keys = tuple((f"{name}_bucket", _labels({**labels, "le": le})) for le in bounds)
    return bucket_keys, (f"{name}_sum", _labels(labels)), (f"{name}_count", _labels(labels))


def _le(bound: float) -> str:
    return f"{bound:g}"


def observe_append(stream: str, seconds: float, receipts: int) -> None:
    """receipts.store's append observer: latency per append call, by stream family."""
    family = stream.split("/", 1)[0] if "/" in stream else stream
    observe(APPEND_SECONDS, seconds, APPEND_BUCKETS, family=family)


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
        # one upsert statement for every series (a histogram alone is 15 of them)
        Counter.objects.bulk_create(
            [
                Counter(name=name, labels=labels, process_id=pid, value=total, updated_at=stamp)
                for (name, labels), total in pending.items()
            ],
            update_conflicts=True,
            unique_fields=["name", "labels", "process_id"],
            update_fields=["value", "updated_at"],
        )
    except Exception:  # counters must never break the work they count: retry next flush
        with _lock:
            _dirty.update(pending)
        return 0
    return len(pending)
