"""The Redis broker when Redis fails (D-1, D-2, L-1): a push that cannot reach Redis is
logged and dropped (the caller's commit stands), and each runworker pushes its own
cluster's lost tasks again from their promises once Redis answers with an empty list.
The runtime test (tests/runtime/test_redis_outage.py) does it with a real Redis."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import redis
from django.conf import settings
from django_q.signing import SignedPackage
from django_q.utils import get_func_repr

from jobs import queue
from jobs.models import DeliveryPromise
from jobs.runtime import redelivery, transport
from jobs.runtime.redelivery import REPUSH_AFTER_MS, repush_lost
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db


class _Redis:
    """One cluster's Redis list and its client: down, or failing its next commands."""

    list_key = "django_q:test:q"

    def __init__(self) -> None:
        self.pushed: list[str] = []
        self.waiting = 0  # what LLEN answers
        self.down = False
        self.failing = 0  # the next pushes that fail as on a connection Redis closed
        self.connection = self

    def rpush(self, key: str, *packages: str) -> int:
        if self.down or self.failing:
            self.failing = max(0, self.failing - 1)
            raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379")
        self.pushed += packages
        return len(self.pushed)

    def llen(self, key: str) -> int:
        if self.down:
            raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379")
        return self.waiting


@pytest.fixture
def broker(monkeypatch):
    fake = _Redis()
    redis_cluster = {k: v for k, v in settings.Q_CLUSTER.items() if k != "orm"}
    monkeypatch.setattr(settings, "Q_CLUSTER", {**redis_cluster, "redis": "redis://unused"})
    monkeypatch.setattr(transport, "_broker", lambda cluster: fake)
    # dispatch in the commit's own callback on SQLite too (no outbox thread)
    monkeypatch.setattr(
        settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, dispatch_mode="inline")
    )
    return fake


def _promise(promise_id: str, **fields) -> DeliveryPromise:
    values = {
        "function": "execute",
        "job_id": promise_id,
        "attempt": 1,
        "target_group": "chat",
        "dispatch_key": promise_id,
        "state": "pending",
        "timeout_at": 10**13,
        "created_at": 1_000,
        "available_at": 1_000,
        **fields,
    }
    return DeliveryPromise.objects.create(id=promise_id, **values)


def _pushed(broker: _Redis) -> list[dict]:
    return [SignedPackage.loads(package) for package in broker.pushed]


def test_an_enqueue_while_redis_is_down_answers_and_its_task_is_pushed_once_redis_is_back(
    broker, caplog, django_capture_on_commit_callbacks
):
    broker.down = True
    with (
        caplog.at_level(logging.WARNING, logger="receipt.delivery"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        job = queue.enqueue("test-agent", payload()).job  # no exception: it is written
    assert queue.get(job.job_id).status == "queued" and broker.pushed == []
    assert "not pushed to Redis" in caplog.text
    promise = DeliveryPromise.objects.get(job_id=job.job_id, function="driver")
    assert promise.state == "pending" and promise.worker_id is None
    due = promise.available_at + REPUSH_AFTER_MS

    assert repush_lost("driver", now_ms=due).acted == 0  # Redis still down
    broker.down = False
    assert repush_lost("driver", now_ms=due - 1).acted == 0  # pushed too recently to tell
    assert repush_lost("driver", now_ms=due).acted == 1
    [task] = _pushed(broker)
    assert (get_func_repr(task["func"]), task["args"], task["cluster"]) == (
        redelivery.DRIVE_TASK,
        (promise.id,),
        "driver",
    )
    assert DeliveryPromise.objects.get(pk=promise.pk).available_at == due
    assert repush_lost("driver", now_ms=due + 1).acted == 0  # not again until it is overdue


def test_nothing_is_pushed_again_while_tasks_wait_in_the_list(broker):
    _promise("p-old")
    broker.waiting = 3  # a backlog: the lost task is taken after it, not doubled
    assert repush_lost("worker-chat", now_ms=1_000 + REPUSH_AFTER_MS).acted == 0
    broker.waiting = 0
    assert repush_lost("worker-chat", now_ms=1_000 + REPUSH_AFTER_MS).acted == 1


def test_only_the_clusters_pending_unclaimed_and_unexpired_promises_are_pushed_again(broker):
    now = 1_000 + REPUSH_AFTER_MS
    _promise("p-lost", job_id="job-1", attempt=2, dispatch_key="job-1:redrive:1:5")
    _promise("p-claimed", worker_id="chat:host:1")
    _promise("p-settled", state="resolved", settled_at=900)
    _promise("p-expired", timeout_at=now)  # the queued redrive starts a new delivery
    _promise("p-codex", target_group="codex")
    _promise("p-recent", available_at=now - REPUSH_AFTER_MS + 1)
    _promise("p-driver", function="driver", attempt=None, target_group="driver")

    report = repush_lost("worker-chat", now_ms=now)

    assert (report.examined, report.acted) == (1, 1)
    [task] = _pushed(broker)
    assert get_func_repr(task["func"]) == redelivery.EXECUTE_TASK and task["args"] == ("p-lost",)
    assert task["kwargs"] == {  # what the driver's own push carries
        "job_id": "job-1",
        "attempt": 2,
        "dispatch_key": "job-1:redrive:1:5",
        "target_group": "chat",
    }
    assert task["cluster"] == "worker-chat"


def test_a_connection_redis_closed_is_tried_once_more(broker):
    broker.failing = 1  # the pooled connection died with a restart
    assert transport.push_committed("driver", redelivery.DRIVE_TASK, "p-1") == 1
    assert [t["args"] for t in _pushed(broker)] == [("p-1",)]
    broker.failing = 2  # Redis is really gone
    assert transport.push_committed("driver", redelivery.DRIVE_TASK, "p-2") == 0


def test_a_repush_that_fails_is_tried_again_after_the_window(broker):
    _promise("p-lost")
    now = 1_000 + REPUSH_AFTER_MS
    broker.failing = 2  # Redis went down between the look at the list and the push
    assert repush_lost("worker-chat", now_ms=now).acted == 0
    assert repush_lost("worker-chat", now_ms=now + 1).acted == 0
    assert repush_lost("worker-chat", now_ms=now + REPUSH_AFTER_MS).acted == 1
    assert [t["args"] for t in _pushed(broker)] == [("p-lost",)]


def test_the_pass_runs_only_with_the_redis_broker_and_in_a_role(broker, monkeypatch):
    config = settings.RECEIPT
    assert [loop.name for loop in redelivery.loops(config, "worker-chat")] == ["redis_repush"]
    assert redelivery.loops(config, "all") == []
    orm_cluster = {**settings.Q_CLUSTER, "orm": "default"}
    monkeypatch.setattr(settings, "Q_CLUSTER", orm_cluster)
    assert redelivery.loops(config, "worker-chat") == []
