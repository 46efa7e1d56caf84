"""Issue 34 item 1: exactly one job per tick however many processes run.

Three real runworkers run the scheduler loop over a schedule declared in their settings
(RECEIPT_SCHEDULES) that ticks every 2 seconds, so three ticks pass in seconds rather
than minutes (the one-minute cron case, with the clock passed in, is in
tests/integration/jobs/test_schedules.py). Each tick fired is one job, run once."""

from __future__ import annotations

import json

import pytest

from jobs.core.schedules import tick_job_id
from jobs.models import Job, WorkerProcess
from receipts import store
from tests.conftest import wait_for
from tests.integration.jobs.helpers import payload
from tests.runtime.helpers import wait_status

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]

SCHEDULES = json.dumps(
    [{"name": "pulse", "agentId": "test-echo", "payload": payload(message="tick"), "every": 2}]
)
TICKS = 3


def receipts(kind: str) -> list[dict]:
    return [r.body for r in store.read("schedules/pulse") if r.type == kind]


def test_three_runworkers_make_exactly_one_job_per_tick(stack):
    # every runworker runs the scheduler: the driver and two chat workers are three
    procs = [
        stack.start(role, wait=False, RECEIPT_SCHEDULES=SCHEDULES)
        for role in ("driver", "chat", "chat")
    ]
    wait_for(
        lambda: WorkerProcess.objects.filter(
            pid__in=[p.pid for p in procs], stopped_at__isnull=True
        ).count()
        == 3,
        timeout=60,
        message="three runworkers to register",
    )
    wait_for(
        lambda: len(receipts("schedule.fired")) >= TICKS,
        timeout=60,
        message=f"{TICKS} ticks to fire",
    )
    for tick in [body["tick"] for body in receipts("schedule.fired")][:TICKS]:
        job = wait_status(tick_job_id("pulse", tick), "completed")
        assert job.attempt == 1 and len(stack.marks("start", job.job_id)) == 1  # ran once
    stack.stop_all()  # no tick fires while the outcome is read
    fired = receipts("schedule.fired")
    ticks = [body["tick"] for body in fired]
    assert len(ticks) >= TICKS and ticks == sorted(set(ticks))  # each tick once, in order
    assert all(tick % 2_000 == 0 for tick in ticks)
    jobs = sorted(Job.objects.filter(id__startswith="sched-pulse-").values_list("id", flat=True))
    assert jobs == sorted(tick_job_id("pulse", tick) for tick in ticks)
    assert all(body["created"] for body in fired)  # no process enqueued a tick another had
    assert len(receipts("schedule.declared")) == 1  # three startups, one declaration
