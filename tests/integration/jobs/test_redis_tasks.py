"""The Redis broker's execute task (D-3, D-4): the driver sends what the worker needs (job,
attempt, dispatch key, target group) under names django-q2 hands to the task untouched
(it takes a `group` keyword for its own), so the worker starts the attempt without
reading its promise back. Packed by `transport` as django-q2's `async_task` packs a task and
unpacked by django-q2's own `SignedPackage`, as a Redis cluster's pusher does."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.signing import SignedPackage
from django_q.utils import get_func_repr

from jobs import handlers, queue
from jobs.core.wire import job_from_wire
from jobs.handler_contract import JobResult
from jobs.models import DeliveryPromise
from jobs.runtime import driver, tasks, transport
from jobs.runtime.dispatch import start_driver
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db

AGENT = "test-redis-task"


class _Broker:
    """Stands in for one cluster's Redis list and its client: keeps what is pushed, and
    how many RPUSH commands carried it."""

    list_key = "worker-test"

    def __init__(self) -> None:
        self.pushed: list[str] = []
        self.commands = 0
        self.connection = self

    def rpush(self, key: str, *packages: str) -> int:
        assert key == self.list_key
        self.commands += 1
        self.pushed += packages
        return len(self.pushed)


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
    assert get_func_repr(task["func"]) == driver.EXECUTE_TASK and "group" not in task
    promise = DeliveryPromise.objects.get(pk=task["args"][0])
    known = dict(task["kwargs"])
    state = known.pop("state", None)  # on PostgreSQL: the job as the driver's statement saw it
    assert known == {
        "job_id": job.job_id,
        "attempt": 1,
        "dispatch_key": promise.dispatch_key,
        "target_group": promise.target_group,
    }
    if connection.vendor == "postgresql":
        seen = json.loads(state) if isinstance(state, str) else state
        assert job_from_wire(seen) == queue.get(job.job_id)
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


def test_a_driver_pass_pushes_only_what_it_opened_and_says_so_on_each_promise(
    monkeypatch, django_capture_on_commit_callbacks
):
    """D-4 with Redis: a pass over several driver promises opens the execute promises that
    do not exist yet and settles every driver promise with what happened to its own
    (on PostgreSQL one statement sent with the commit); a task is pushed, after the
    commit, for each promise this pass opened and for no other."""
    broker = _Broker()
    redis_cluster = {k: v for k, v in settings.Q_CLUSTER.items() if k != "orm"}
    monkeypatch.setattr(settings, "Q_CLUSTER", {**redis_cluster, "redis": "redis://unused"})
    monkeypatch.setattr(transport, "_broker", lambda cluster: broker)
    jobs = [queue.enqueue(AGENT, payload("factory.run", i=i)).job for i in range(3)]
    for job in jobs:
        start_driver(job)
    # the first job's execute promise exists already (another pass opened it)
    taken = driver.execute_promise_id(jobs[0].job_id, 1, jobs[0].job_id)
    DeliveryPromise.objects.create(
        id=taken,
        function="execute",
        job_id=jobs[0].job_id,
        attempt=1,
        target_group="chat",
        dispatch_key=jobs[0].job_id,
        timeout_at=10**13,
        created_at=1,
    )

    with django_capture_on_commit_callbacks(execute=True) as hooks:
        results = driver.drive_many([job.job_id for job in jobs])
        assert broker.pushed == []  # nothing reaches Redis before the commit
    assert hooks
    by_job = {r["jobId"]: r["status"] for r in results}
    assert by_job == {
        jobs[0].job_id: "already_dispatched",
        jobs[1].job_id: "dispatched",
        jobs[2].job_id: "dispatched",
    }
    pushed = sorted(SignedPackage.loads(p)["args"][0] for p in broker.pushed)
    expected = sorted(driver.execute_promise_id(j.job_id, 1, j.job_id) for j in jobs[1:])
    assert pushed == expected
    for job in jobs:
        promise = DeliveryPromise.objects.get(pk=job.job_id)
        execute = driver.execute_promise_id(job.job_id, 1, job.job_id)
        assert (promise.state, promise.result) == (
            "resolved",
            {"status": by_job[job.job_id], "execute": execute},
        )
    assert DeliveryPromise.objects.filter(function="execute").count() == 3


def test_tasks_of_committed_promises_go_to_redis_in_one_command_per_chunk(monkeypatch):
    """A batch enqueue's driver tasks are appended to the cluster's list a chunk per RPUSH,
    not a command per job; each is a django-q2 task its pusher accepts (signed, with the
    fields its worker reads)."""
    broker = _Broker()
    redis_cluster = {k: v for k, v in settings.Q_CLUSTER.items() if k != "orm"}
    monkeypatch.setattr(settings, "Q_CLUSTER", {**redis_cluster, "redis": "redis://unused"})
    monkeypatch.setattr(transport, "_broker", lambda cluster: broker)
    monkeypatch.setattr(transport, "PUSH_CHUNK", 4)

    transport.push_committed_many(
        "driver", "jobs.runtime.tasks.drive", [(f"j{i}",) for i in range(10)]
    )

    assert broker.commands == 3  # 4 + 4 + 2
    tasks = [SignedPackage.loads(package) for package in broker.pushed]
    assert [task["args"] for task in tasks] == [(f"j{i}",) for i in range(10)]
    assert len({task["id"] for task in tasks}) == 10
    for i, task in enumerate(tasks):
        assert get_func_repr(task["func"]) == "jobs.runtime.tasks.drive" and task["kwargs"] == {}
        assert task["name"] == f"j{i}" and task["cluster"] == "driver"
        assert task["ack_failure"] is True  # django-q2 never retries: the receipts do


def test_the_database_broker_pushes_nothing(monkeypatch):
    broker = _Broker()
    monkeypatch.setattr(transport, "_broker", lambda cluster: broker)
    assert settings.Q_CLUSTER.get("orm")
    transport.push_committed_many("driver", "jobs.runtime.tasks.drive", [("j1",)])
    assert broker.pushed == [] and broker.commands == 0
