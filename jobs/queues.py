"""Pausing a queue (a worker group): the only writer of `queues/<group>` receipts, and
their read model `jobs_queue`.

A paused group's jobs stay queued: the driver hop still opens their execute promises,
but the database broker's take of the group's cluster takes none (`promise_sql.TAKE_PG`
reads the group's row by key in the same statement). With the Redis broker the task is
already in the list, so the worker looks before it begins (`is_paused`, read at most
once a second per process) and leaves the promise unclaimed; the redelivery pass pushes
it again once the group is resumed. Running jobs finish. Every pause and resume is a
receipt with `by`; pausing a paused group (or resuming a running one) writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import transaction

from jobs.core import queue_state
from jobs.core.queue_state import PAUSED, RESUMED, QueueState, group_from_stream, stream_of
from jobs.errors import JobsError
from jobs.models import Queue
from jobs.timing_config import current_timing
from jobs.validation import MAX_BY, check_text
from observability.logs import log_event
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from receipts.projection import RowProjector, stored_state

__all__ = ["QueueNotFound", "is_paused", "listing", "pause", "resume", "stream_of"]
logger = logging.getLogger("receipt.queues")
CACHE_KEY = "queue"  # StreamHandle.cache slot: the queue's state as of the stream head
PAUSE_CHECK_S = 1.0  # how stale a worker's view of the pause may be (the Redis broker)


class QueueNotFound(JobsError):
    """A group this deployment does not run (neither built in nor declared)."""

    code, status = "queue_not_found", 404

    def __init__(self, group: str) -> None:
        super().__init__(f"queue {group} not found: not a built-in or declared worker group")


# ---- the read model ----------------------------------------------------------------------


def row_for(state: QueueState) -> dict[str, Any]:
    return {
        "name": state.group,
        "paused": state.paused,
        "paused_by": state.paused_by if state.paused else None,
        "paused_at": state.paused_at if state.paused else None,
        "updated_at": state.updated_at,
        "receipt_count": state.receipt_count,
        "head": state.head,
        "state": queue_state.to_wire(state),
    }


load_state = stored_state(Queue, queue_state.from_wire)
PROJECTOR = RowProjector(
    name="queues",
    model=Queue,
    cache_key=CACHE_KEY,
    noun="a worker group",
    id_from_stream=group_from_stream,
    reduce=queue_state.reduce,
    row_for=row_for,
    load_state=load_state,
)


def register() -> None:
    PROJECTOR.register(queue_state.STREAM_PREFIX, "queue", queue_state.to_wire)


# ---- operators ---------------------------------------------------------------------------


def pause(group: str, *, by: str, now_ms: int | None = None) -> QueueState:
    """Stop starting `group`'s jobs until it is resumed."""
    return _set(group, PAUSED, by=by, now_ms=now_ms)


def resume(group: str, *, by: str, now_ms: int | None = None) -> QueueState:
    """Start `group`'s jobs again (the database broker's pushers are woken at once)."""
    return _set(group, RESUMED, by=by, now_ms=now_ms)


def _set(group: str, kind: str, *, by: str, now_ms: int | None) -> QueueState:
    check_text("invalid_by", "by", by, MAX_BY, required=True)
    if group not in current_timing().group_names():
        raise QueueNotFound(group)
    now = wall_clock_ms() if now_ms is None else now_ms
    pausing = kind == PAUSED
    with transaction.atomic(), store.open_stream(stream_of(group), savepoint=False) as handle:
        state = load_state(group) if handle.existed else None
        handle.cache[CACHE_KEY] = state
        if (state is not None and state.paused) != pausing:
            handle.append(
                {"type": kind, "group": group, "by": by}, now_ms=now, context={"actor": by}
            )
            if not pausing:
                _wake(group)
        result = handle.cache[CACHE_KEY]
    _seen.clear()
    action = "paused" if pausing else "resumed"
    log_event(logger, f"queues.{action}", f"queue {group} {action} by {by}", group=group, by=by)
    return result if result is not None else _running(group, now)


def _wake(group: str) -> None:
    from jobs.core.names import worker_cluster
    from jobs.runtime import transport

    transport.wake(worker_cluster(group))


def _running(group: str, now: int) -> QueueState:
    return QueueState(group, False, None, None, None, None, now, 0, "")


# ---- reads -------------------------------------------------------------------------------


def listing() -> list[dict[str, Any]]:
    """Every group this deployment runs, as declared, with its pause state (one query)."""
    groups = current_timing().group_names()
    rows = {row.name: row for row in Queue.objects.filter(pk__in=groups)}
    return [queue_json(group, rows.get(group)) for group in groups]


def queue_json(group: str, row: Queue | QueueState | None) -> dict[str, Any]:
    """The group as listed, from its row or its fold; a resumed group names no pauser."""
    paused = bool(row and row.paused)
    return {
        "group": group,
        "paused": paused,
        "pausedBy": row.paused_by if row and paused else None,
        "pausedAt": row.paused_at if row and paused else None,
        "stream": stream_of(group),
    }


def paused(group: str) -> Queue | None:
    """The group's row if it is paused (diagnosis, the admin)."""
    return Queue.objects.filter(pk=group, paused=True).first()


def paused_groups() -> list[Queue]:
    return list(Queue.objects.filter(paused=True).order_by("name"))


_seen: dict[str, tuple[float, bool]] = {}
_seen_lock = threading.Lock()


def is_paused(group: str) -> bool:
    """Whether `group` is paused, as read at most PAUSE_CHECK_S ago by this process."""
    now = time.monotonic()
    with _seen_lock:
        known = _seen.get(group)
    if known is not None and now - known[0] < PAUSE_CHECK_S:
        return known[1]
    value = Queue.objects.filter(pk=group, paused=True).exists()
    with _seen_lock:
        _seen[group] = (now, value)
    return value
