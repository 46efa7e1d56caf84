"""The database broker's wake-ups on PostgreSQL (D-4, D-5, T-4): each cluster hears only
its own channel, and a pusher whose last take left nothing behind waits for a
notification before it takes again, so an idle stack costs one take per wake-up."""

from __future__ import annotations

import select
from collections.abc import Iterator
from typing import Any

import pytest

from jobs import queue
from jobs.runtime import promisebroker
from jobs.runtime.promisebroker import PromiseBroker, channel_for
from receipts.clock import now_ms as wall_clock_ms
from tests.integration.jobs.helpers import payload
from tests.support import listening

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

AGENT = "test-promise-broker"


def _heard(listener: Any, until_ms: int) -> set[str]:
    heard: set[str] = set()
    while not heard and wall_clock_ms() < until_ms:
        select.select([listener.fileno()], [], [], 0.1)
        heard |= {n.channel for n in listener.notifies(timeout=0, stop_after=0)}
    return heard


def test_an_enqueue_wakes_the_driver_and_no_worker_cluster():
    with (
        listening(f'"{channel_for("driver")}"') as driver,
        listening(f'"{channel_for("worker-chat")}"') as chat,
    ):
        queue.enqueue(AGENT, payload("factory.run"))
        assert _heard(driver, wall_clock_ms() + 5_000) == {channel_for("driver")}
        # Sent by the same commit: had the chat cluster been notified, it is here by now.
        assert _heard(chat, wall_clock_ms() + 300) == set()


def _recorded(broker: PromiseBroker, calls: list[str]) -> None:
    take, wait = broker._take, broker._wait

    def recorded_take() -> list[tuple[Any, ...]]:
        rows = take()
        calls.append(f"take:{len(rows)}")
        return rows

    def recorded_wait() -> None:
        calls.append("wait")
        wait()

    broker._take = recorded_take  # type: ignore[method-assign]
    broker._wait = recorded_wait  # type: ignore[method-assign]


@pytest.fixture
def driver_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[PromiseBroker, list[str]]]:
    """The driver cluster's broker, each of its takes and waits recorded in order."""
    monkeypatch.setattr(promisebroker, "IDLE_WAIT_S", 0.05)
    broker = PromiseBroker(list_key="driver")
    calls: list[str] = []
    _recorded(broker, calls)
    try:
        yield broker, calls
    finally:
        broker._close()


def test_a_pusher_that_took_everything_waits_for_a_notification_first(driver_broker):
    broker, calls = driver_broker
    assert broker.dequeue() is None  # idle, listening
    queue.enqueue(AGENT, payload("factory.run"))
    calls.clear()
    assert len(broker.dequeue() or []) == 1
    assert calls == ["wait", "take:1"]  # woken by the enqueue's notification
    calls.clear()
    assert broker.dequeue() is None
    assert calls[0] == "wait"  # not another take straight away


def test_a_notification_heard_during_a_take_is_taken_at_once(driver_broker, monkeypatch):
    broker, calls = driver_broker
    broker._connection()
    queue.enqueue(AGENT, payload("factory.run", i=1))
    queue.enqueue(AGENT, payload("factory.run", i=2))
    monkeypatch.setattr(broker, "_limit", lambda: 1)
    assert len(broker.dequeue() or []) == 1  # the limit reached: more may be waiting
    calls.clear()
    assert len(broker.dequeue() or []) == 1
    assert calls == ["take:1"]
    calls.clear()
    broker._woken = True  # as a notification read with the last take leaves it
    broker._caught_up = True
    broker.dequeue()
    assert calls[0].startswith("take")
