"""A worker process's look at its next task (`jobs.runtime.lookahead`): a task looked at
is held and is the next one the loop gets; the loop's STOP is never offered as work; a
process about to be recycled offers nothing (the task would leave with it)."""

from __future__ import annotations

import queue
from typing import Any

import pytest
from django_q.conf import Conf

from jobs.runtime import lookahead
from jobs.runtime.promisebroker import is_execute, task


@pytest.fixture
def tasks(monkeypatch: pytest.MonkeyPatch) -> queue.Queue[Any]:
    waiting: queue.Queue[Any] = queue.Queue()
    monkeypatch.setattr(lookahead, "_current", [lookahead.Lookahead(waiting)])
    monkeypatch.setattr(Conf, "RECYCLE", 100)
    return waiting


def test_a_task_looked_at_is_the_next_the_loop_gets(tasks: queue.Queue[Any]) -> None:
    ahead = lookahead._current[0]
    assert lookahead.next_task() is None  # nothing waiting: nothing to begin early
    first = task("jobs.runtime.tasks.execute", ("p-1",), {"attempt": 1}, "worker-chat")[1]
    second = task("jobs.runtime.tasks.execute", ("p-2",), {"attempt": 1}, "worker-chat")[1]
    tasks.put(first)
    tasks.put(second)
    assert lookahead.next_task() is first and is_execute(first)
    assert lookahead.next_task() is first  # still held, not taken twice
    assert [ahead.get()["args"], ahead.get()["args"]] == [("p-1",), ("p-2",)]
    assert tasks.empty() and ahead.taken == 2


def test_the_loops_stop_is_not_work_and_still_ends_the_loop(tasks: queue.Queue[Any]) -> None:
    tasks.put("STOP")
    assert lookahead.next_task() is None
    assert lookahead._current[0].get() == "STOP"


def test_a_process_about_to_be_recycled_offers_nothing(
    tasks: queue.Queue[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks.put(task("jobs.runtime.tasks.execute", ("p-1",), {}, "worker-chat")[1])
    monkeypatch.setattr(Conf, "RECYCLE", 3)
    ahead = lookahead._current[0]
    ahead.taken = 1
    assert lookahead.next_task() is not None
    ahead.taken = 2  # the loop recycles after its third task: the next one would be lost
    assert lookahead.next_task() is None
    monkeypatch.setattr("django_q.worker.rss_check", lambda: True)
    ahead.taken = 0
    assert lookahead.next_task() is None


def test_outside_a_worker_loop_there_is_no_next_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookahead, "_current", [])
    assert lookahead.next_task() is None


# --- the monitor's queue ---------------------------------------------------------------


class Sent(list[Any]):
    def put(self, task: Any) -> None:
        self.append(task)


def finished(success: bool, **extra: Any) -> dict[str, Any]:
    done = task("jobs.runtime.tasks.execute", ("p-1",), {"attempt": 1}, "worker-chat")[1]
    return {**done, "success": success, "result": None if success else "boom", **extra}


def test_a_success_the_monitor_would_only_drop_is_not_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Conf, "SAVE_LIMIT", -1)
    sent = Sent()
    results = lookahead.Results(sent, drops_successes=True)
    results.put(finished(True))
    assert sent == []
    failure, cached, saved = finished(False), finished(True, cached=True), finished(True, save=True)
    for kept in (failure, cached, saved, "STOP"):
        results.put(kept)
    assert sent == [failure, cached, saved, "STOP"]


def test_successes_still_reach_the_monitor_when_it_would_act_on_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_q.signals import post_execute

    sent = Sent()
    monkeypatch.setattr(Conf, "SAVE_LIMIT", 250)  # a saving cluster stores its successes
    lookahead.Results(sent, drops_successes=True).put(finished(True))
    monkeypatch.setattr(Conf, "SAVE_LIMIT", -1)
    lookahead.Results(sent, drops_successes=False).put(finished(True))  # a broker's ack

    def listener(**_: Any) -> None:
        pass

    post_execute.connect(listener)
    try:
        lookahead.Results(sent, drops_successes=True).put(finished(True))
    finally:
        post_execute.disconnect(listener)
    assert len(sent) == 3


@pytest.mark.parametrize(
    ("broker_class", "orm", "nothing"),
    [
        ("jobs.runtime.promisebroker.PromiseBroker", "default", True),
        ("django_q.brokers.orm.ORM", "default", False),
        (None, None, True),  # django-q2's Redis broker
        (None, "default", False),  # django-q2's own database broker deletes on ack
    ],
)
def test_which_brokers_acknowledge_nothing(
    monkeypatch: pytest.MonkeyPatch, broker_class: str | None, orm: str | None, nothing: bool
) -> None:
    monkeypatch.setattr(Conf, "BROKER_CLASS", broker_class)
    monkeypatch.setattr(Conf, "ORM", orm)
    assert lookahead.acknowledges_nothing() is nothing
