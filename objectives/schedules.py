"""L-4: the objective watchdog as a django-q2 schedule on the worker-control cluster.

`seed` (run by `runworker --role control` at startup) creates or updates the schedule
idempotently with update_or_create; with RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_ENABLED=0 the
schedule is kept but set to never repeat. The scheduled function only enqueues a
`factory.objective.watchdog` job, under a job id per minute, so a schedule that fires
twice in one minute still makes one job.
"""

from __future__ import annotations

from typing import Any

from django_q.models import Schedule

from jobs import queue
from jobs.runtime.loops import Report
from objectives.core import vocabulary as v
from receipts.clock import now_ms as wall_clock_ms

NAME = "factory.objective.watchdog"
FUNC = "objectives.schedules.enqueue_watchdog"
CLUSTER = "worker-control"


def seed(config: Any) -> Schedule:
    schedule, _ = Schedule.objects.update_or_create(
        name=NAME,
        defaults={
            "func": FUNC,
            "schedule_type": Schedule.CRON,
            "cron": config.watchdog_cron,
            "cluster": CLUSTER,
            "repeats": -1 if config.watchdog_enabled else 0,
        },
    )
    return schedule


def seed_report(config: Any) -> Report:
    schedule = seed(config)
    return Report("watchdog_schedule", examined=1, acted=1 if schedule.repeats else 0)


def enqueue_watchdog(now_ms: int | None = None) -> str:
    now = wall_clock_ms() if now_ms is None else now_ms
    job_id = f"watchdog-{now // 60_000}"
    result = queue.enqueue(
        v.CONTROL_AGENT, {"kind": v.KIND_WATCHDOG}, job_id=job_id, lane="collect", max_attempts=1
    )
    return result.job.job_id
