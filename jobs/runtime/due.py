"""The due loop (G-3): delayed jobs start when their time comes, found by due time alone.

A delayed job's driver promise is opened *scheduled* (`due_at` set, by the enqueue's own
statement or by dispatch): it sits in the scheduled index only, so no take of any broker
ever reads it, however many wait. Each pass of this loop reads that index from its first
entry to the first one still ahead (a LIMIT, earliest first), releases those into the
driver's queue (`due_at` cleared: the deliverable index has them from then on) and sends
them like any other new delivery: a wake-up of the driver cluster on PostgreSQL with the
database broker, the task itself with Redis (after the commit), nothing on SQLite, whose
pushers poll. From there a delayed job is delivered like any other.

It is time-critical (the lease keeper's thread, every pass): a released job starts within
a keeper pass plus a hop of each cluster after its time. Safe in every process at once:
each promise is released by exactly one of them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from jobs.runtime import counters, promises, transport
from jobs.runtime.dispatch import DRIVE_TASK
from jobs.runtime.loops import Report

BATCH = 500  # promises released per pass; a backlog that came due drains a batch a pass
INTERVAL_MS = 200  # below the keeper's pass: the loop runs on every pass


def release_due(*, now_ms: int, limit: int = BATCH) -> Report:
    """Release the scheduled driver promises whose time came and send their tasks."""
    with transaction.atomic():
        released = promises.release_due(now_ms=now_ms, limit=limit)
        if released and settings.Q_CLUSTER.get("orm"):
            transport.send("driver", DRIVE_TASK, released[0])  # one wake-up for them all
    transport.push_committed_many("driver", DRIVE_TASK, [(pid,) for pid in released])  # Redis
    if released:
        counters.incr("receipt_scheduled_released_total", len(released))
    return Report("due", examined=len(released), acted=len(released))
