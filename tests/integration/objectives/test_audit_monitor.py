"""O-9 monitors, O-10 audit (including a superseded one), S-8 replay of objective streams."""

from __future__ import annotations

import pytest

from jobs import queue
from objectives import services
from objectives.core import vocabulary as v
from objectives.handlers import audit
from objectives.models import ObjectiveSummary
from receipts import store
from tests.integration.objectives.conftest import (
    create,
    diamond,
    dispatch,
    drain,
    objective,
    queued,
    work,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_audit_summarizes_and_verifies_every_chain(factory):
    oid = create(
        title="Audited",
        tasks=[{"id": "t", "title": "T", "command": "exit 1"}],
        policy={"maxCandidatePassesPerTask": 2},
    )
    drain()
    dispatch("cancel", objectiveId=oid)
    drain()
    state = objective(oid)
    summary = state.audit.summary
    assert summary["status"] == "canceled" and summary["verified"]["ok"]
    assert summary["durations"]["tasks"]["t"]["passes"] == 2
    assert summary["failures"]["taskPasses"] == 2 and summary["retries"]["taskPasses"] == 1
    assert summary["jobs"]["byKind"][v.KIND_TASK_RUN] == 2
    artifact = state.audit.artifact
    assert artifact.startswith(f"audits/{oid}/")  # relative to the data directory
    assert '"verified"' in (factory / "data" / artifact).read_text()


def test_an_audit_whose_head_moved_is_superseded_and_requested_again(factory, monkeypatch):
    oid = create(title="Busy", tasks=diamond())
    dispatch("cancel", objectiveId=oid)
    work(queued()[0])  # the control pass requests the audit
    assert objective(oid).audit.status == "requested"
    real_verify = audit.verify_all

    def verify_while_someone_writes(objective_id, jobs):
        services.note(objective_id, "a late note", by="op")  # moves the head
        return real_verify(objective_id, jobs)

    monkeypatch.setattr(audit, "verify_all", verify_while_someone_writes)
    settled = work(v.audit_job_id(oid, 1))
    assert settled.result == {"status": "superseded"}
    state = objective(oid)
    assert state.audit.status == "superseded"
    monkeypatch.setattr(audit, "verify_all", real_verify)
    drain()
    state = objective(oid)
    assert (state.audit.status, state.audit.job_id) == ("recorded", v.audit_job_id(oid, 2))


def test_a_monitor_records_checkpoints_until_its_task_settles(factory):
    oid = create(title="Watched", tasks=diamond())
    work(queued()[0])
    task_job = v.task_job_id(oid, "a", 1)
    queue.lease(task_job, worker_id="w:1")
    from jobs.core.state import Fence

    queue.progress(task_job, {"stdoutTail": "compiling", "stderrTail": ""}, fence=Fence("w:1", 1))
    queue.complete(task_job, {"outcome": "approved"}, fence=Fence("w:1", 1))
    monitor = work(v.monitor_job_id(oid, "a", 1))
    assert monitor.result["status"] == "settled" and monitor.result["checkpoints"] == 1
    point = objective(oid).task("a").last_checkpoint
    assert (point.liveness, point.job_status, point.stdout_tail) == (
        "settled",
        "completed",
        "compiling",
    )


def test_objective_streams_replay_without_drift(factory):
    oid = create(title="Replay", tasks=diamond())
    drain()
    report = store.replay(v.objective_stream(oid), dry_run=True)
    assert report.checked == 1 and report.drift == []
    ObjectiveSummary.objects.filter(pk=oid).update(status="failed")
    report = store.replay(v.objective_stream(oid))
    assert [d.fields for d in report.drift] == [["status"]]
    assert ObjectiveSummary.objects.get(pk=oid).status == "completed"


def test_a_monitor_records_nothing_while_its_task_job_waits_in_the_queue(factory):
    """O-9: no checkpoint every interval for a task that has not started; the monitor
    watches, then hands over near its own deadline with nothing written."""
    oid = create(title="Waiting", tasks=diamond())
    work(queued()[0])
    task_job = v.task_job_id(oid, "a", 1)
    assert queue.get(task_job).status == "queued"
    monitor = work(v.monitor_job_id(oid, "a", 1), deadline_s=1.0)
    assert monitor.result["status"] == "handed_over" and monitor.result["checkpoints"] == 0
    assert not [r for r in store.read(v.objective_stream(oid)) if r.type == v.MONITOR_CHECKPOINT]
    assert objective(oid).task("a").last_checkpoint is None
