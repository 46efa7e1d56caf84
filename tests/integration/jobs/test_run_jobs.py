"""Queued jobs run to completion in the test's process on the real attempt machine
(issue 33 item 6: `jobs.testing.run_jobs` and the `receipt_worker` fixture), on both
databases: the driver's and the worker's own receipts, promises and retries; with a
Redis broker configured, nothing reaches it."""

from __future__ import annotations

import os

import pytest
from django.conf import settings

from jobs import handlers, queue
from jobs.handler_contract import JobResult
from jobs.models import DeliveryPromise
from jobs.runtime import dispatch, transport
from jobs.tasks.framework import TaskResultStatus, default_task_backend
from jobs.testing import StillRunnable, in_process, run_jobs
from receipts import store
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload
from tests.integration.tasks import defs

pytestmark = pytest.mark.django_db

AGENT = "test-run-jobs"
REDIS_URL = os.environ.get("RECEIPT_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")


@pytest.fixture
def flaky(monkeypatch):
    """A handler of agent AGENT that fails the attempts its payload names."""
    calls: list[int] = []

    def handler(job, ctx):
        calls.append(ctx.attempt)
        if ctx.attempt in job.payload.get("failOn", []):
            raise RuntimeError(f"attempt {ctx.attempt} fails")
        return JobResult.success({"attempt": ctx.attempt})

    monkeypatch.setitem(handlers._HANDLERS, AGENT, handler)
    return calls


@pytest.fixture
def redis_broker(monkeypatch):
    """This process on the Redis broker at REDIS_URL, as a host's `RECEIPT = {"broker":
    "redis://..."}` puts it (skipped without a Redis server, failed on CI): the server's
    client, no django-q2 queue key on it."""
    import redis
    from django_q.conf import Conf

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis is not reachable at {REDIS_URL}")
        pytest.skip(f"Redis is not reachable at {REDIS_URL}")
    cluster = {k: v for k, v in settings.Q_CLUSTER.items() if k not in ("orm", "broker_class")}
    monkeypatch.setattr(settings, "Q_CLUSTER", {**cluster, "redis": REDIS_URL})
    monkeypatch.setattr(Conf, "REDIS", REDIS_URL)
    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "BROKER_CLASS", None)
    transport._broker.cache_clear()
    _clear(client)
    yield client
    _clear(client)
    transport._broker.cache_clear()


def _clear(client) -> None:
    for key in client.keys("django_q:*"):
        client.delete(key)


def _queues(client) -> dict[str, int]:
    """The django-q2 queues on the Redis server, by key: the tasks pushed to it."""
    return {key.decode(): client.llen(key) for key in client.keys("django_q:*")}


def types(job_id: str) -> list[str]:
    return [r.type for r in store.read(f"jobs/{job_id}")]


def test_a_job_runs_through_the_driver_and_the_worker_with_their_receipts(flaky):
    job = queue.enqueue(AGENT, payload()).job
    drained = run_jobs()
    assert drained.attempts == 1 and drained.left == ()
    done = drained.job(job.job_id)
    assert done.status == "completed" and done.result == {"attempt": 1}
    assert types(job.job_id) == ["job.enqueued", "job.leased", "job.heartbeat", "job.completed"]
    promises = dict(
        DeliveryPromise.objects.filter(job_id=job.job_id).values_list("function", "state")
    )
    assert promises == {"driver": "resolved", "execute": "resolved"}
    assert done.worker_id.startswith("chat:")
    assert_read_model_matches_receipts(job.job_id)


def test_a_failed_attempt_is_retried_until_the_jobs_attempts_are_used(flaky):
    recovers = queue.enqueue(AGENT, payload(failOn=[1, 2]), max_attempts=3).job
    gives_up = queue.enqueue(AGENT, payload(failOn=[1, 2, 3]), max_attempts=3).job
    drained = run_jobs()
    assert drained.attempts == 6 and sorted(flaky) == [1, 1, 2, 2, 3, 3]
    assert drained.job(recovers.job_id).result == {"attempt": 3}
    failed = drained.job(gives_up.job_id)
    assert failed.status == "failed" and failed.attempt == 3
    assert failed.last_error == "RuntimeError: attempt 3 fails"
    assert types(gives_up.job_id).count("job.failed") == 3
    for job_id in (recovers.job_id, gives_up.job_id):
        assert_read_model_matches_receipts(job_id)


def test_a_job_without_a_handler_fails_as_a_worker_fails_it():
    job = queue.enqueue("nobody-handles-this", payload()).job
    done = run_jobs().job(job.job_id)
    assert done.status == "failed" and done.attempt == 1
    assert done.last_error == "No handler for agent 'nobody-handles-this'"


def test_jobs_enqueued_by_running_jobs_run_in_the_same_call(receipt_worker):
    parent = defs.fan_out.enqueue(3)
    drained = receipt_worker.run()
    assert drained.attempts == 4 and receipt_worker.runs == [drained]
    children = default_task_backend.get_result(parent.id).return_value
    assert [default_task_backend.get_result(i).return_value for i in children] == [0, 2, 4]


def test_a_job_that_keeps_enqueuing_stops_at_the_bound(receipt_worker):
    defs.forever.enqueue()
    with pytest.raises(StillRunnable, match="ran 5 attempts and jobs are still queued"):
        receipt_worker.run(max_attempts=5)


def test_only_the_jobs_asked_for_run(flaky):
    chosen = queue.enqueue(AGENT, payload()).job
    other = queue.enqueue(AGENT, payload()).job
    drained = run_jobs(job_ids=[chosen.job_id])
    assert [job.job_id for job in drained.jobs] == [chosen.job_id]
    assert queue.get(other.job_id).status == "queued"


def test_nothing_queued_nothing_run():
    assert run_jobs().attempts == 0


def test_a_task_result_after_a_run_is_the_workers(receipt_worker):
    result = defs.attempt_number.enqueue(fail_until=1)
    receipt_worker.run()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.attempts == 2


@pytest.mark.django_db(transaction=True)
def test_a_committed_enqueue_in_process_runs_here_and_nothing_reaches_redis(flaky, redis_broker):
    with in_process():
        job = queue.enqueue(AGENT, payload()).job  # committed: its dispatch pass runs
        dispatch.OUTBOX.drain()
        assert _queues(redis_broker) == {}  # no drive task
        drained = run_jobs()
    assert drained.attempts == 1 and drained.job(job.job_id).status == "completed"
    assert _queues(redis_broker) == {}  # no execute task either
    promises = dict(
        DeliveryPromise.objects.filter(job_id=job.job_id).values_list("function", "state")
    )
    assert promises == {"driver": "resolved", "execute": "resolved"}
    # the broker is live: outside the hold a task reaches it
    assert transport.push_committed("driver", dispatch.DRIVE_TASK, "probe") == 1
    assert _queues(redis_broker) == {"django_q:driver:q": 1}


@pytest.mark.django_db(transaction=True)
def test_run_jobs_holds_what_it_sends_and_what_the_jobs_it_runs_enqueue(redis_broker):
    with in_process():
        parent = defs.fan_out.enqueue(3)
    drained = run_jobs()  # the children's enqueues commit in it, and their drives and executes
    assert drained.attempts == 4 and len(drained.jobs) == 4
    assert default_task_backend.get_result(parent.id).status == TaskResultStatus.SUCCESSFUL
    assert _queues(redis_broker) == {}


@pytest.mark.django_db(transaction=True)
def test_the_fixture_holds_an_enqueue_committed_before_it_runs(redis_broker, receipt_worker):
    result = defs.add.enqueue(2, 3)
    dispatch.OUTBOX.drain()  # the enqueue's dispatch pass is done, outside `run()`
    assert _queues(redis_broker) == {}
    receipt_worker.run()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert _queues(redis_broker) == {}
