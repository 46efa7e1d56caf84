"""D-12 on the database: facts come from the registry, promises and the read model."""

import pytest

from jobs import queue
from jobs.diagnosis import diagnosis
from jobs.models import DeliveryPromise
from jobs.runtime import dispatch, processes
from tests.integration.jobs.helpers import payload

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]
NOW = 2_000_000_000_000


def codes(job_id, now=NOW):
    return [b["code"] for b in diagnosis(job_id, now_ms=now)["blockers"]]


def test_unknown_agent_and_no_live_process():
    job = queue.enqueue("nobody", payload(), now_ms=NOW).job
    found = codes(job.job_id)
    assert "no_handler" in found and "no_live_process" in found and "no_live_driver" in found


def test_live_processes_clear_the_process_blockers():
    processes.register(role="driver", group=None, concurrency=1, now_ms=NOW)
    job = queue.enqueue("factory", payload(), now_ms=NOW).job
    processes.register(role="worker-chat", group="chat", concurrency=4, now_ms=NOW)
    found = codes(job.job_id, now=NOW + 1000)
    assert "no_live_process" not in found and "no_live_driver" not in found


def test_job_waiting_on_redrive_cooldown():
    job = queue.enqueue("factory", payload(), now_ms=NOW - 60_000).job
    started = dispatch.start_driver(job, now_ms=NOW - 5_000)  # a delivery 5 s ago...
    DeliveryPromise.objects.filter(pk=started.promise_id).update(state="resolved")  # ...ended
    assert "redrive_pending" in codes(job.job_id)


def test_running_job_reports_its_lease():
    job = queue.enqueue("factory", payload(), now_ms=NOW).job
    queue.lease(job.job_id, worker_id="chat:h:1", now_ms=NOW)
    report = diagnosis(job.job_id, now_ms=NOW + 1000)
    assert [b["code"] for b in report["blockers"]][-1] == "running"
    assert report["facts"]["workerId"] == "chat:h:1"


def test_exhausted_delivery_generations_are_named_and_skipped_by_redrive():
    from jobs.runtime import recovery
    from jobs.runtime.dispatch import MAX_GENERATIONS

    job = queue.enqueue("factory", payload(), now_ms=NOW - 600_000).job
    for g in range(MAX_GENERATIONS + 1):  # the key and every generation were used and settled
        started = dispatch.start_driver(job, now_ms=NOW - 300_000 + g)
        DeliveryPromise.objects.filter(pk=started.promise_id).update(state="resolved")
    assert "delivery_exhausted" in codes(job.job_id)
    report = recovery.redrive_queued(now_ms=NOW)
    assert report.examined == 0 and report.errors == []  # skipped, not an error every pass
