"""queue.mutation_listeners: every job write is heard after its commit, best-effort."""

from __future__ import annotations

import logging

import pytest
from django.db import transaction

from jobs import queue
from jobs.core.state import Fence
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def heard(monkeypatch):
    calls: list[tuple[str, str, str]] = []

    def listener(kind, job, body):
        calls.append((kind, job.status, body["type"]))

    monkeypatch.setattr(queue, "mutation_listeners", [listener])
    return calls


def test_listeners_hear_each_write_with_the_job_after_it(heard):
    job = queue.enqueue("test-agent", payload()).job
    queue.lease(job.job_id, worker_id="w:1")
    fence = Fence("w:1", 1)
    queue.heartbeat(job.job_id, fence=fence)
    queue.complete(job.job_id, {"ok": 1}, fence=fence)
    assert heard == [
        ("job.enqueued", "queued", "job.enqueued"),
        ("job.leased", "leased", "job.leased"),
        ("job.heartbeat", "running", "job.heartbeat"),
        ("job.completed", "completed", "job.completed"),
    ]


def test_listeners_run_after_commit_and_not_on_rollback(heard):
    with pytest.raises(RuntimeError), transaction.atomic():
        queue.enqueue("test-agent", payload())
        assert heard == []  # not before the commit
        raise RuntimeError("roll back")
    assert heard == []
    with transaction.atomic():
        queue.enqueue("test-agent", payload())
        assert heard == []
    assert [h[0] for h in heard] == ["job.enqueued"]


def test_a_failing_listener_is_logged_and_the_write_stands(monkeypatch, caplog):
    def broken(kind, job, body):
        raise RuntimeError("listener down")

    monkeypatch.setattr(queue, "mutation_listeners", [broken])
    caplog.set_level(logging.WARNING, logger="receipt.queue")
    job = queue.enqueue("test-agent", payload()).job
    assert queue.get(job.job_id).status == "queued"
    assert any("listener down" in r.getMessage() for r in caplog.records)


def test_writes_that_append_nothing_are_not_heard(heard):
    job = queue.enqueue("test-agent", payload()).job
    heard.clear()
    assert queue.heartbeat(job.job_id, fence=Fence("w:9", 1)).outcome.value == "fence_lost"
    queue.enqueue("test-agent", payload(), job_id=job.job_id)  # J-6: returned unchanged
    assert heard == []
