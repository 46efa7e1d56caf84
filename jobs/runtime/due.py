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

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from jobs import limits
from jobs.runtime import counters, promises, transport
from jobs.runtime.dispatch import DRIVE_TASK
from jobs.runtime.loops import Report
from jobs.runtime.promisebroker import EXECUTE as EXECUTE_TASK
from jobs.runtime.roles import cluster_for_group

BATCH = 500  # promises released per pass; a backlog that came due drains a batch a pass
INTERVAL_MS = 200  # below the keeper's pass: the loop runs on every pass


def release_due(*, now_ms: int, limit: int = BATCH) -> Report:
    """Release the scheduled promises whose time came and send their tasks: delayed jobs'
    drivers, and executes a rate limit held (`jobs.limits`)."""
    with transaction.atomic():
        released = promises.release_due(now_ms=now_ms, limit=limit)
        drivers = [(row[0],) for row in released if row[1] == "driver"]
        if drivers and settings.Q_CLUSTER.get("orm"):
            transport.send("driver", DRIVE_TASK, drivers[0][0])  # one wake-up for them all
        send_executes([row for row in released if row[1] == "execute"])
    transport.push_committed_many("driver", DRIVE_TASK, drivers)  # Redis
    if released:
        counters.incr("receipt_scheduled_released_total", len(released))
    return Report("due", examined=len(released), acted=len(released))


def send_executes(rows: Sequence[tuple[Any, ...]]) -> None:
    """In the transaction that made them deliverable again: the tasks of execute promises
    (id, function, group, job id, attempt, dispatch key), a wake-up per cluster with the
    database broker, each task after the commit with Redis."""
    for promise_id, _, group, job_id, attempt, dispatch_key in rows:
        known = {"job_id": job_id, "attempt": attempt, "dispatch_key": dispatch_key}
        cluster = cluster_for_group(group)
        transport.send(cluster, EXECUTE_TASK, promise_id, **known, target_group=group)


def keep_limits(*, now_ms: int) -> Report:
    """Wake held deliveries a raised cap or a removed limit freed (`jobs.limits.keep`)."""
    with transaction.atomic():
        woken = limits.keep(now_ms=now_ms)
    return Report("limits", examined=woken, acted=woken)
