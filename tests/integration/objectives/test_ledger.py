"""W-1 .. W-3: the durable ledger follows queue mutations, after commit, best-effort."""

from __future__ import annotations

import logging

import pytest
from django.db import connection

from jobs import queue
from objectives import ledger
from objectives.core import vocabulary as v
from objectives.models import Activity, ActivityAttempt, Signal, Workflow
from tests.integration.objectives.conftest import AUTH, create, diamond, drain, queued, work

pytestmark = pytest.mark.django_db(transaction=True)


def test_keys_follow_w2():
    assert ledger.control_key("obj-1") == "factory/objective/obj-1/control"
    assert ledger.run_key("agents/factory/runs/r-1", "r-1") == (
        "factory/run/agents%2Ffactory%2Fruns%2Fr-1/r-1"
    )
    assert ledger.activity_key("task-1") == "factory/codex/task-1"


def test_control_workflow_and_task_activities_follow_the_jobs(factory):
    oid = create(title="Ledger", tasks=diamond())
    drain()
    workflow = Workflow.objects.get(key=ledger.control_key(oid))
    assert (workflow.name, workflow.status, workflow.objective_id) == (
        "objective-control",
        "completed",
        oid,
    )
    assert workflow.revision >= 4  # one revision per control job
    assert workflow.metadata["kind"] == v.KIND_CONTROL and workflow.output["objectiveId"] == oid
    activities = Activity.objects.filter(objective_id=oid).order_by("key")
    assert [a.key for a in activities] == sorted(
        ledger.activity_key(v.task_job_id(oid, t, 1)) for t in "abcd"
    )
    for activity in activities:
        assert (activity.status, activity.attempts, activity.active_owner) == ("completed", 1, None)
        assert activity.last_heartbeat is not None
        attempt = ActivityAttempt.objects.get(activity_key=activity.key)
        assert (attempt.attempt, attempt.status, attempt.owner) == (1, "completed", "test:worker")


def test_a_run_workflow_and_signals_for_queue_commands(factory):
    payload = {
        "kind": v.KIND_RUN,
        "authContext": dict(AUTH),
        "runId": "r-7",
        "prompt": "x",
        "tasks": [{"title": "t", "command": "true"}],
    }
    job = queue.enqueue(v.FACTORY_AGENT, payload).job
    key = ledger.run_key(v.run_stream("r-7"), "r-7")
    assert Workflow.objects.get(key=key).status == "pending"
    queue.lease(job.job_id, worker_id="w:1")
    queue.steer(job.job_id, {"say": "hi"}, by="op")
    assert Workflow.objects.get(key=key).status == "running"
    signal = Signal.objects.get(workflow_key=key)
    assert (signal.name, signal.job_id, signal.payload) == ("steer", job.job_id, {"say": "hi"})


@pytest.mark.postgres_only
def test_ledger_rows_skip_the_disk_wait_but_receipts_never_do(factory):
    """Ledger writes relax their own commit only: the connection's next transaction, which
    may append a receipt, waits for the disk again."""
    payload = {"kind": v.KIND_RUN, "authContext": dict(AUTH), "runId": "r-8", "prompt": "x"}
    job = queue.enqueue(v.FACTORY_AGENT, payload).job
    queue.lease(job.job_id, worker_id="w:1")
    assert Workflow.objects.get(key=ledger.run_key(v.run_stream("r-8"), "r-8")).status == "running"
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"


def test_a_ledger_failure_is_logged_and_never_fails_the_receipt_write(factory, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("ledger database is gone")

    monkeypatch.setattr(ledger, "_activity", broken)
    caplog.set_level(logging.WARNING, logger="receipt.durable")
    oid = create(title="Broken ledger", tasks=diamond())
    work(queued()[0])
    job = queue.get(v.task_job_id(oid, "a", 1))
    assert job.status == "queued"  # the enqueue committed all the same
    messages = [r.getMessage() for r in caplog.records]
    assert "[durable codex] ledger database is gone" in messages
    assert not Activity.objects.exists()


def test_a_late_listener_of_an_older_mutation_never_moves_the_row_back(factory):
    payload = {"kind": v.KIND_RUN, "authContext": dict(AUTH), "runId": "r-late", "prompt": "x"}
    queued_job = queue.enqueue(v.FACTORY_AGENT, payload).job
    leased = queue.lease(queued_job.job_id, worker_id="w:1").job
    key = ledger.run_key(v.run_stream("r-late"), "r-late")
    assert Workflow.objects.get(key=key).status == "running"
    ledger.on_job_mutation("job.enqueued", queued_job, {"type": "job.enqueued"})
    row = Workflow.objects.get(key=key)
    assert (row.status, row.position, row.revision) == ("running", leased.receipt_count, 1)
