"""D-5 on what the delivery saw: a worker's task carries the job's state as the broker's
take or the driver read it, and the begin assumes it (claim, lock, lease and COMMIT in
one round trip). When the assumption is wrong (the stream moved, the claim is refused)
that transaction keeps nothing and the begin reads and decides as it always did."""

from __future__ import annotations

import json

import pytest

from jobs import handlers, queue
from jobs.handler_contract import JobResult
from jobs.models import DeliveryPromise
from jobs.runtime import attempt as attempts
from jobs.runtime import driver, promises, pusher
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

AGENT = "test-begin-seen"


@pytest.fixture(autouse=True)
def _handler(monkeypatch):
    monkeypatch.setitem(handlers._HANDLERS, AGENT, lambda job, ctx: JobResult.success("ran"))


def _delivered() -> tuple[str, str]:
    job = queue.enqueue(AGENT, payload("factory.dispatch")).job
    assert driver.drive(job.job_id)["status"] == "dispatched"
    return job.job_id, driver.execute_promise_id(job.job_id, 1, job.job_id)


def _begin(job_id: str, execute_id: str, seen, worker: str = "chat:seen:1"):
    return attempts.begin(
        execute_id, job_id=job_id, attempt=1, worker_id=worker, now_ms=wall_clock_ms(), seen=seen
    )


def test_a_stream_that_moved_since_is_read_and_decided_again(caplog):
    job_id, execute_id = _delivered()
    seen = queue.get(job_id)
    queue.command(job_id, "steer", {"text": "look left"})  # appended after the take

    running = _begin(job_id, execute_id, seen)

    assert isinstance(running, attempts.Running)
    job = queue.get(job_id)
    assert (job.status, job.attempt, job.worker_id) == ("running", 1, "chat:seen:1")
    assert [r.type for r in store.read(f"jobs/{job_id}")] == [
        "job.enqueued",
        "queue.command",
        "job.leased",
        "job.heartbeat",
    ]
    assert_read_model_matches_receipts(job_id)
    assert DeliveryPromise.objects.get(pk=execute_id).worker_id == "chat:seen:1"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_refused_claim_keeps_nothing_of_the_assumed_begin():
    job_id, execute_id = _delivered()
    seen = queue.get(job_id)
    assert promises.claim(execute_id, "chat:other:7")  # the same delivery, taken elsewhere

    ended = _begin(job_id, execute_id, seen)

    assert isinstance(ended, attempts.Ended) and ended.status == "stale_attempt"
    assert queue.get(job_id) == seen  # no lease, no receipt
    assert [r.type for r in store.read(f"jobs/{job_id}")] == ["job.enqueued"]
    assert DeliveryPromise.objects.get(pk=execute_id).worker_id == "chat:other:7"


def test_an_abort_since_the_take_is_honoured():
    job_id, execute_id = _delivered()
    seen = queue.get(job_id)
    queue.command(job_id, "abort", reason="operator")  # a queued job: canceled at once

    ended = _begin(job_id, execute_id, seen)

    assert isinstance(ended, attempts.Ended) and ended.status == "terminal_state"
    assert queue.get(job_id).status == "canceled"
    assert_read_model_matches_receipts(job_id)


def test_the_database_brokers_take_hands_each_worker_task_its_jobs_state():
    from jobs.core.contracts import routed_group
    from jobs.core.wire import job_from_wire
    from jobs.runtime.promisebroker import PromiseBroker

    job_id, execute_id = _delivered()
    job = queue.get(job_id)
    broker = PromiseBroker(list_key=f"worker-{routed_group(job.agent_id, job.kind)}")
    try:
        [(_, package)] = broker._tasks(broker._take())
    finally:
        broker._close()
    task = pusher.unpacked(package)  # built in the pusher's process: handed over unsigned
    assert task is not None and task["args"] == (execute_id,)
    assert job_from_wire(json.loads(task["kwargs"]["state"])) == job  # the stored text


# ---- the settlement on the state the worker holds (one statement) ------------------------


def _running(job_id: str, execute_id: str) -> attempts.Running:
    running = _begin(job_id, execute_id, queue.get(job_id))
    assert isinstance(running, attempts.Running)
    return running


def test_a_settlement_after_the_stream_moved_reads_and_settles_once(caplog):
    job_id, execute_id = _delivered()
    running = _running(job_id, execute_id)
    queue.command(job_id, "steer", {"text": "faster"})  # written since the worker's state

    ended = attempts.settle(running, "completed", now_ms=wall_clock_ms, result={"ok": True})

    assert ended.status == "completed"
    assert [r.type for r in store.read(f"jobs/{job_id}")] == [
        "job.enqueued",
        "job.leased",
        "job.heartbeat",
        "queue.command",
        "job.completed",
    ]
    assert queue.get(job_id).result == {"ok": True}
    assert store.verify(f"jobs/{job_id}").ok
    assert_read_model_matches_receipts(job_id)
    assert DeliveryPromise.objects.get(pk=execute_id).state == "resolved"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_settlement_whose_lease_was_lost_meanwhile_writes_nothing_of_the_job():
    job_id, execute_id = _delivered()
    running = _running(job_id, execute_id)
    fence = running.fence
    assert queue.release_lease(job_id, holder=fence, reason="test: holder gone").applied
    before = [r.type for r in store.read(f"jobs/{job_id}")]

    ended = attempts.settle(running, "completed", now_ms=wall_clock_ms, result={"ok": True})

    # the worker's state still names its fence; the stream says otherwise and wins
    assert ended.status == "settlement_conflict"
    assert [r.type for r in store.read(f"jobs/{job_id}")] == before
    assert queue.get(job_id).status == "queued"
    assert DeliveryPromise.objects.get(pk=execute_id).state == "rejected"


def test_a_failed_attempt_on_known_state_is_retried_from_one_statement():
    job_id, execute_id = _delivered()
    running = _running(job_id, execute_id)

    ended = attempts.settle(running, "failed", now_ms=wall_clock_ms, error="boom")

    job = queue.get(job_id)
    assert ended.status == "failed" and job.status == "queued" and job.last_error == "boom"
    assert [r.type for r in store.read(f"jobs/{job_id}")][-1] == "job.failed"
    assert store.verify(f"jobs/{job_id}").ok
    assert_read_model_matches_receipts(job_id)
