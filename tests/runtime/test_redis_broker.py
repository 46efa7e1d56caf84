"""The runtime with `RECEIPT_BROKER=redis://...` (D-2, D-4, D-5, C-3): the happy path and
recovery from a SIGKILLed worker, on real runworkers whose django-q2 clusters pop Redis
lists. Needs a Redis server (RECEIPT_TEST_REDIS_URL, default redis://127.0.0.1:6379/11);
CI always has one, so there it is required, elsewhere skipped without one.
"""

from __future__ import annotations

import os

import pytest
from django.conf import settings

from jobs.models import DeliveryPromise
from jobs.runtime import transport
from tests.conftest import wait_for
from tests.runtime.helpers import assert_settled_once, enqueue, receipt_types, wait_status

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]
REDIS_URL = os.environ.get("RECEIPT_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")


def _reachable() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping())
    except redis.RedisError:
        return False


@pytest.fixture
def redis_stack(stack, monkeypatch):
    if not _reachable():
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis is not reachable at {REDIS_URL}; CI runs the Redis broker leg")
        pytest.skip(f"Redis is not reachable at {REDIS_URL}")
    import redis
    from django_q.conf import Conf

    redis.Redis.from_url(REDIS_URL).flushdb()
    # This process sends tasks too (the dispatch after an enqueue): the same broker.
    cluster = {k: v for k, v in settings.Q_CLUSTER.items() if k not in ("orm", "broker_class")}
    monkeypatch.setattr(settings, "Q_CLUSTER", {**cluster, "redis": REDIS_URL})
    monkeypatch.setattr(Conf, "REDIS", REDIS_URL)
    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "BROKER_CLASS", None)
    transport._broker.cache_clear()
    stack.env["RECEIPT_BROKER"] = REDIS_URL
    yield stack
    transport._broker.cache_clear()


def test_happy_path_over_redis_writes_every_receipt(redis_stack):
    redis_stack.start("driver")
    redis_stack.start("chat")
    job = enqueue("test-echo", message="over redis")
    done = wait_status(job.job_id, "completed")
    assert done.result["echo"] == "over redis" and done.result["group"] == "chat"
    assert receipt_types(job.job_id) == ["job.enqueued", "job.leased", "job.heartbeat",
                                         "job.completed"]
    states = dict(DeliveryPromise.objects.filter(job_id=job.job_id).values_list("function", "state"))
    assert states == {"driver": "resolved", "execute": "resolved"}
    assert len(redis_stack.marks("start", job.job_id)) == 1
    assert_settled_once(job.job_id)


def test_worker_sigkilled_over_redis_is_recovered_on_the_next_attempt(redis_stack):
    redis_stack.start("driver")
    redis_stack.start("chat", name="chat-doomed")
    job = enqueue("test-sleep", sleepMs=60_000, laterSleepMs=10, max_attempts=2)
    wait_for(lambda: redis_stack.marks("start", job.job_id), message="first attempt to start")
    redis_stack.kill("chat-doomed")  # Redis has no ack: the popped task is gone with it
    redis_stack.start("chat", name="chat-fresh")
    done = wait_status(job.job_id, "completed", timeout=60)
    assert done.attempt == 2
    assert "job.lease_expired" in receipt_types(job.job_id)
    assert [m["attempt"] for m in redis_stack.marks("start", job.job_id)] == [1, 2]
    assert_settled_once(job.job_id)
