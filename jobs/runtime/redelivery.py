"""Redis broker: tasks Redis lost are pushed again from their promises (D-1, L-1).

A Redis task exists only in Redis: a restart without persistence forgets every queued
one, a push while Redis is down never arrives (`transport` logs it and goes on), and a
pusher that popped tasks dies with them. Their promises are in the database, pending and
unclaimed. Without this pass they would wait for their timeouts (the lease plus a minute
for a driver promise: six minutes at the defaults) and the queued redrive.

Each runworker re-pushes its own cluster's tasks: pending, unclaimed promises of its
group whose last push is older than REPUSH_AFTER_MS, while the cluster's Redis list is
empty. An empty list means every task pushed before now was popped: a promise still
unclaimed after that long was lost, or waits in a busy cluster's memory (then the copy is
refused by the claim, harmless). While tasks wait in the list, nothing is pushed again:
a backlog is never doubled. The push time is the promise's `available_at`, which the
Redis broker does not otherwise use; a re-push moves it to now, under `FOR UPDATE SKIP
LOCKED` on PostgreSQL, so replicas of a role do not push the same promise twice.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction

from jobs import queues
from jobs.core.names import group_of_cluster
from jobs.runtime import counters, promises, transport
from jobs.runtime.dispatch import DRIVE_TASK
from jobs.runtime.loops import Loop, Report
from jobs.runtime.promisebroker import EXECUTE as EXECUTE_TASK
from jobs.runtime.roles import is_cluster
from observability.logs import log_event

logger = logging.getLogger("receipt.delivery")
REPUSH_AFTER_MS = 15_000
REPUSH_INTERVAL_MS = 5_000
BATCH = 500


def loops(config: Any, role: str) -> list[Loop]:
    """A `jobs.runtime.loops.providers` entry: the pass for a role's own cluster, with
    the Redis broker only."""
    if settings.Q_CLUSTER.get("orm") or not is_cluster(role):
        return []
    return [
        Loop(
            "redis_repush",
            REPUSH_INTERVAL_MS,
            config.queued_redrive_startup_delay_ms,
            lambda now: repush_lost(role, now_ms=now),
        )
    ]


def repush_lost(cluster: str, *, now_ms: int, limit: int = BATCH) -> Report:
    report = Report("redis_repush")
    if not transport.drained(cluster):  # tasks wait (or Redis is down): nothing doubles
        return report
    group = group_of_cluster(cluster) or "driver"
    if group != "driver" and queues.is_paused(group):  # pushed again once it is resumed
        return report
    with transaction.atomic():
        rows = promises.take_unclaimed(
            group, now_ms=now_ms, pushed_before_ms=now_ms - REPUSH_AFTER_MS, limit=limit
        )
    report.examined = len(rows)
    drives = [(row[0],) for row in rows if row[1] == "driver"]
    executes = [row for row in rows if row[1] == "execute"]
    pushed = transport.push_committed_many(cluster, DRIVE_TASK, drives) if drives else 0
    for promise_id, _, job_id, attempt, dispatch_key in executes:
        known = {
            "job_id": job_id,
            "attempt": attempt,
            "dispatch_key": dispatch_key,
            "target_group": group,
        }
        pushed += transport.push_committed(cluster, EXECUTE_TASK, promise_id, **known)
    report.acted = pushed
    if pushed:
        counters.incr("receipt_redis_repushed_total", pushed, cluster=cluster)
        log_event(
            logger,
            "delivery.redis_repushed",
            f"pushed {pushed} task(s) of {cluster} again: unclaimed "
            f"{REPUSH_AFTER_MS // 1000} s after their push with the queue empty",
            cluster=cluster,
            tasks=pushed,
        )
    return report
