"""The Redis broker's execute task (D-3, D-4): the driver sends what the worker needs (job,
attempt, dispatch key, target group) under names django-q2 hands to the task untouched
(it takes a `group` keyword for its own), so the worker starts the attempt without
reading its promise back. Packed and unpacked by django-q2's own `async_task` and
`SignedPackage`, as a Redis cluster would."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.signing import SignedPackage

from jobs import handlers, queue
from jobs.models import DeliveryPromise
from jobs.runtime import driver, tasks, transport
from jobs.runtime.context import JobResult
from jobs.runtime.dispatch import start_driver
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db

AGENT = "test-redis-task"


class _Broker:
    """Stands in for one cluster's Redis list: keeps what django-q2 would push."""

    list_key = "worker-test"

    def __init__(self) -> None:
        self.pushed: list[str] = []

    def enqueue(self, package: str) -> str:
        self.pushed.append(package)
        return str(len(self.pushed))


def test_the_execute_task_carries_what_the_worker_needs_and_runs_without_reading_the_promise(
    monkeypatch, tmp_path, django_capture_on_commit_callbacks
):
    broker = _Broker()
    redis_cluster = {k: v for k, v in settings.Q_CLUSTER.items() if k != "orm"}
    monkeypatch.setattr(settings, "Q_CLUSTER", {**redis_cluster, "redis": "redis://unused"})
    monkeypatch.setattr(transport, "_broker", lambda cluster: broker)
    monkeypatch.setitem(handlers._HANDLERS, AGENT, lambda job, ctx: JobResult.success("ran"))
    monkeypatch.setenv("RECEIPT_KEEPER_DIR", str(tmp_path))  # no keeper thread in the test
    job = queue.enqueue(AGENT, payload("factory.run"), max_attempts=1).job
    start_driver(job)

    with django_capture_on_commit_callbacks(execute=True):
        assert driver.drive(job.job_id)["status"] == "dispatched"
    [package] = broker.pushed
    task = SignedPackage.loads(package)
    assert task["func"] == driver.EXECUTE_TASK and "group" not in task
    promise = DeliveryPromise.objects.get(pk=task["args"][0])
    assert task["kwargs"] == {
        "job_id": job.job_id,
        "attempt": 1,
        "dispatch_key": promise.dispatch_key,
        "target_group": promise.target_group,
    }
    assert promise.job_id == job.job_id and promise.attempt == 1

    with CaptureQueriesContext(connection) as queries:
        outcome = tasks.execute(*task["args"], **task["kwargs"])
    assert outcome["status"] == "completed", outcome
    assert queue.get(job.job_id).status == "completed"
    promise_reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith("SELECT") and "jobs_delivery_promise" in q["sql"]
    ]
    assert promise_reads == []
