"""O-8 / L-3 outbox redrive, L-4 watchdog reasons, L-5 resume, watchdog schedule."""

from __future__ import annotations

import logging

import pytest
from django_q.models import Schedule

from jobs import queue
from jobs.models import Job
from objectives import outbox, schedules, selectors, services
from objectives.core import vocabulary as v
from objectives.handlers import watchdog
from objectives.models import ObjectiveSummary
from receipt_site import config as site_config
from receipts import store
from receipts.clock import now_ms
from tests.conftest import run_in_threads
from tests.integration.objectives.conftest import create, diamond, drain, objective, work

pytestmark = pytest.mark.django_db(transaction=True)


def record_without_enqueue(objective_id: str) -> str:
    """A control request recorded by a process that died before enqueueing it."""

    def decide(state):
        events, _ = services.control_request_events(state, "reconcile", force=True)
        return services.Mutation(events)

    services.mutate(objective_id, decide)
    request = objective(objective_id).unenqueued_requests[-1]
    assert queue.get(request.job_id) is None
    return request.job_id


def test_redrive_enqueues_a_recorded_but_never_enqueued_request_exactly_once(factory):
    oid = create(title="Outbox", tasks=diamond())
    job_id = record_without_enqueue(oid)
    assert ObjectiveSummary.objects.get(pk=oid).control_outbox_pending
    results = run_in_threads(2, lambda i: outbox.redrive(now_ms=now_ms()))
    assert sum(r.acted for r in results) >= 1
    assert queue.get(job_id).status == "queued"
    assert Job.objects.filter(pk=job_id).count() == 1
    enqueued = [
        r
        for r in store.read(v.objective_stream(oid))
        if r.type == v.CONTROL_ENQUEUED and r.body["jobId"] == job_id
    ]
    assert len(enqueued) == 1
    assert not ObjectiveSummary.objects.get(pk=oid).control_outbox_pending
    assert outbox.redrive(now_ms=now_ms()).acted == 0


def test_the_redrive_is_single_flight_and_logs_a_slow_pass(caplog):
    import threading

    release, entered = threading.Event(), threading.Event()

    def slow(now_ms):
        entered.set()
        release.wait(5)
        return outbox.Report("control_outbox_redrive", acted=1)

    runner = outbox.Redrive(timeout_ms=100, run=slow)
    caplog.set_level(logging.WARNING, logger="receipt.factory")
    first = threading.Thread(target=runner, args=(0,))
    first.start()
    entered.wait(5)
    assert runner(0).acted == 0  # coalesced: the first pass still owns it
    import time

    time.sleep(0.3)
    release.set()
    first.join(5)
    assert any(
        getattr(r, "event", None) == "factory.control_outbox_redrive_slow" for r in caplog.records
    )


def _lose_control_job(objective_id: str) -> None:
    """The pending control job dies for good (canceled before it ran)."""
    for request in objective(objective_id).pending_requests:
        job = queue.get(request.job_id)
        if job and job.is_active:
            queue.abort(request.job_id, reason="lost")


def test_watchdog_no_active_objective_work_after_a_lost_control_job(factory, caplog):
    oid = create(title="Lost control", tasks=diamond())
    _lose_control_job(oid)
    state = objective(oid)
    assert watchdog.scan(now_ms=state.updated_at + 1_000)["reconciled"] == []  # still quiet
    caplog.set_level(logging.INFO, logger="receipt.factory")
    result = watchdog.scan(now_ms=state.updated_at + 91_000)
    assert result["reconciled"] == [
        {
            "objectiveId": oid,
            "reason": "no_active_objective_work",
            "jobId": v.control_job_id(oid, 2),
        }
    ]
    assert any(getattr(r, "event", None) == "factory.watchdog_reconcile" for r in caplog.records)
    request = objective(oid).pending_requests[-1]
    assert (request.reason, request.source) == ("reconcile", "no_active_objective_work")
    drain()
    assert objective(oid).status == "completed"


def _running_task(oid: str) -> str:
    work(queue_first_control(oid))
    job_id = v.task_job_id(oid, "a", 1)
    assert queue.lease(job_id, worker_id="dead:1").applied  # a worker took it, then died
    return job_id


def queue_first_control(oid: str) -> str:
    return objective(oid).pending_requests[0].job_id


def test_watchdog_active_objective_work_stalled(factory):
    """L-4: a codex task job (lease 900 s, a beat every 200 s) silent for 430 s."""
    oid = create(title="Stalled", tasks=diamond())
    job_id = _running_task(oid)
    job = queue.get(job_id)
    assert watchdog.scan(now_ms=job.updated_at + 400_000)["reconciled"] == []  # between beats
    result = watchdog.scan(now_ms=job.updated_at + 431_000)
    assert [(r["objectiveId"], r["reason"]) for r in result["reconciled"]] == [
        (oid, "active_objective_work_stalled")
    ]
    work(objective(oid).pending_requests[-1].job_id)  # the reconcile pass (real clock)
    assert not queue.get(job_id).abort_requested  # not stale by the wall clock yet


def test_watchdog_phase_supersession_has_active_stale_job(factory):
    oid = create(
        title="Superseded",
        tasks=[{"id": "a", "title": "A", "command": "true"}],
        policy={"autoPromote": False},
    )
    work(queue_first_control(oid))
    monitor = v.monitor_job_id(oid, "a", 1)
    assert queue.lease(monitor, worker_id="dead:2").applied  # its monitor hangs on
    drain()  # the task runs and is validated: the objective waits for promotion
    state = objective(oid)
    assert state.phase != v.PHASE_EXECUTE and queue.get(monitor).status == "leased"
    silent_since = queue.get(monitor).updated_at  # a monitor beats every 100 s (lease 300 s)
    assert watchdog.scan(now_ms=silent_since + 150_000)["reconciled"] == []
    result = watchdog.scan(now_ms=silent_since + 231_000)
    assert [r["reason"] for r in result["reconciled"]] == [
        "phase_supersession_has_active_stale_job"
    ]


def test_the_watchdog_scan_limit_is_clamped(settings):
    assert watchdog.scan_limit(0) == 1 and watchdog.scan_limit(5000) == 2000
    assert watchdog.scan_limit() == settings.RECEIPT.watchdog_scan_limit


def test_resume_requests_control_for_active_objectives_without_work(factory):
    oid = create(title="Resume me", tasks=diamond())
    _lose_control_job(oid)
    report = outbox.resume(now_ms=now_ms())
    assert report.acted == 1
    assert objective(oid).pending_requests[-1].reason == "startup_resume"
    assert outbox.resume(now_ms=now_ms()).acted == 0  # its control job is queued now


def test_watchdog_schedule_is_seeded_idempotently_and_can_be_disabled(db):
    config = site_config.load({})
    schedules.seed(config)
    schedules.seed(config)
    rows = Schedule.objects.filter(name=schedules.NAME)
    assert rows.count() == 1
    row = rows.get()
    assert (row.func, row.cluster, row.cron, row.repeats) == (
        schedules.FUNC,
        "worker-control",
        "* * * * *",
        -1,
    )
    schedules.seed(
        site_config.load(
            {
                "RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_ENABLED": "0",
                "RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_CRON": "*/5 * * * *",
            }
        )
    )
    row.refresh_from_db()
    assert (row.repeats, row.cron) == (0, "*/5 * * * *")


def test_the_scheduled_function_enqueues_one_watchdog_job_per_minute(factory):
    first = schedules.enqueue_watchdog(now_ms=120_000)
    assert schedules.enqueue_watchdog(now_ms=150_000) == first
    job = queue.get(first)
    assert (job.agent_id, job.kind) == ("factory-control", "factory.objective.watchdog")
    assert schedules.enqueue_watchdog(now_ms=180_000) != first
    work(first)
    assert queue.get(first).status == "completed"
    assert selectors.get("nothing") is None
