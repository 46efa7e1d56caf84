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
from jobs.runtime import driver, promises
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
    from django_q.signing import SignedPackage

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
    task = SignedPackage.loads(package)
    assert task["args"] == (execute_id,)
    assert job_from_wire(json.loads(task["kwargs"]["state"])) == job  # the stored text
