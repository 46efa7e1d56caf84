"""Issue 34 item 5: pausing a queue (a worker group). Each pause and resume is a receipt
with `by` on `queues/<group>`; a paused group's cluster takes none of its execute
promises (the database broker's take), a Redis task of a paused group leaves its promise
unclaimed, the driver hop still runs, and diagnosis names who paused it and when."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs import diagnosis, queue, queues
from jobs.core.contracts import routed_group
from jobs.core.names import worker_cluster
from jobs.models import DeliveryPromise, Queue
from jobs.runtime import dispatch, driver, tasks
from jobs.runtime.promisebroker import PromiseBroker
from receipts import store
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db(transaction=True)  # the PostgreSQL take has its own connection

AGENT = "test-queue-pause"
GROUP = routed_group(AGENT, "factory.run", None)
T = 1_900_000_000_000


def test_pause_and_resume_are_receipts_with_by_and_repeat_as_no_ops():
    state = queues.pause(GROUP, by="alice", now_ms=T)
    assert (state.paused, state.paused_by, state.paused_at) == (True, "alice", T)
    assert queues.pause(GROUP, by="bob", now_ms=T + 1).paused_by == "alice"  # already paused
    row = Queue.objects.get(pk=GROUP)
    assert (row.paused, row.paused_by, row.paused_at) == (True, "alice", T)
    listed = {q["group"]: q for q in queues.listing()}
    assert listed[GROUP] == {
        "group": GROUP,
        "paused": True,
        "pausedBy": "alice",
        "pausedAt": T,
        "stream": f"queues/{GROUP}",
    }
    assert not any(q["paused"] for g, q in listed.items() if g != GROUP)

    assert queues.resume(GROUP, by="carol", now_ms=T + 2).paused is False
    assert queues.resume(GROUP, by="carol", now_ms=T + 3).paused is False
    receipts = store.read(f"queues/{GROUP}")
    assert [(r.type, r.body["by"]) for r in receipts] == [
        ("queue.paused", "alice"),
        ("queue.resumed", "carol"),
    ]
    assert store.verify(f"queues/{GROUP}").ok
    assert not Queue.objects.get(pk=GROUP).paused


def test_an_unknown_group_or_a_blank_by_writes_nothing():
    with pytest.raises(queues.QueueNotFound):
        queues.pause("no-such-group", by="alice")
    with pytest.raises(Exception, match="by"):
        queues.pause(GROUP, by="")
    assert not Queue.objects.exists()


def _dispatched() -> Any:
    """A job of GROUP with its execute promise opened: the driver hop ran."""
    result = queue.enqueue(AGENT, payload("factory.run"))
    if not result.dispatched:
        dispatch.dispatch_batch([result.job])
    assert driver.drive(result.job.job_id)["status"] == "dispatched"
    return result.job


def test_a_paused_groups_cluster_takes_nothing_and_takes_again_once_resumed():
    queues.pause(GROUP, by="alice")
    job = _dispatched()  # the driver hop runs while the group is paused
    execute = DeliveryPromise.objects.get(job_id=job.job_id, function="execute")
    broker = PromiseBroker(list_key=worker_cluster(GROUP))
    other = PromiseBroker(list_key=worker_cluster("chat" if GROUP != "chat" else "codex"))
    try:
        assert broker._take() == []
        assert other._take() == []  # (nothing of its own either)
        assert queue.get(job.job_id).status == "queued"
        queues.resume(GROUP, by="alice")
        assert [row[0] for row in broker._take()] == [execute.id]
    finally:
        broker._close()
        other._close()


def test_a_redis_task_of_a_paused_group_leaves_its_promise_unclaimed(monkeypatch):
    job = _dispatched()
    execute = DeliveryPromise.objects.get(job_id=job.job_id, function="execute")
    queues.pause(GROUP, by="alice")
    redis_cluster = {k: v for k, v in settings.Q_CLUSTER.items() if k != "orm"}
    monkeypatch.setattr(settings, "Q_CLUSTER", {**redis_cluster, "redis": "redis://unused"})
    outcome = tasks.execute(
        execute.id,
        job_id=job.job_id,
        attempt=execute.attempt,
        dispatch_key=execute.dispatch_key,
        target_group=GROUP,
    )
    assert outcome["status"] == "paused", outcome
    execute.refresh_from_db()
    assert (execute.worker_id, execute.state) == (None, "pending")
    assert queue.get(job.job_id).status == "queued"


def test_diagnosis_says_who_paused_the_queue_and_when():
    job = _dispatched()
    queues.pause(GROUP, by="alice", now_ms=T)
    blockers = {b["code"]: b["detail"] for b in diagnosis.diagnosis(job.job_id)["blockers"]}
    assert blockers["queue_paused"].startswith(
        "queue paused by alice at 2030-03-17 17:46:40 UTC"
    ), blockers
    queues.resume(GROUP, by="alice")
    codes = {b["code"] for b in diagnosis.diagnosis(job.job_id)["blockers"]}
    assert "queue_paused" not in codes


def _cli(*args: str) -> str:
    out = StringIO()
    call_command("jobs", "queues", *args, stdout=out)
    return out.getvalue()


def test_the_cli_lists_pauses_and_resumes_a_group():
    assert f"{GROUP:<24} paused by ops" in _cli("pause", GROUP, "--by", "ops")
    assert Queue.objects.get(pk=GROUP).paused
    listed = _cli("list")
    assert f"{GROUP:<24} paused by ops at " in listed and "running" in listed
    assert f"{GROUP:<24} running" in _cli("resume", GROUP, "--by", "ops")
    assert [r.body["by"] for r in store.read(f"queues/{GROUP}")] == ["ops", "ops"]
    with pytest.raises(CommandError, match="queue_not_found"):
        _cli("pause", "nope")
    with pytest.raises(CommandError, match="needs the worker group"):
        _cli("pause")
