"""Receipt's cluster pusher: django-q2's loop, minus signing for tasks its own broker built
in the same process. A signed package (a broker across a network) is still checked."""

from __future__ import annotations

import queue
import threading
from typing import Any

from django_q.conf import Conf
from django_q.signing import SignedPackage

from jobs.runtime import pusher
from jobs.runtime.promisebroker import signed_task, task


class _Broker:
    """Hands out one batch, then nothing; records what failed."""

    def __init__(self, batch: list[tuple[str, Any]], stop: threading.Event) -> None:
        self.batch, self.stop = batch, stop
        self.failed: list[str] = []

    def dequeue(self) -> list[tuple[str, Any]] | None:
        batch, self.batch = self.batch, []
        if not batch:
            self.stop.set()
        return batch or None

    def fail(self, ack_id: str) -> None:
        self.failed.append(ack_id)


def test_tasks_built_here_and_signed_packages_reach_the_workers_queue() -> None:
    built_id, built = task("jobs.runtime.tasks.execute", ("p-1",), {"attempt": 1}, "worker-chat")
    signed_id, signed = signed_task("jobs.runtime.tasks.drive_many", (["p-2"],), {}, "driver")
    forged = SignedPackage.dumps({"id": "x"})[:-4] + "AAAA"  # the signature no longer matches
    stop = threading.Event()
    broker = _Broker([(built_id, built), (signed_id, signed), ("forged", forged)], stop)
    workers: queue.Queue[dict[str, Any]] = queue.Queue()

    pusher.pusher(workers, stop, broker)

    handed = [workers.get_nowait() for _ in range(workers.qsize())]
    assert [t["args"] for t in handed] == [("p-1",), (["p-2"],)]
    assert [t["ack_id"] for t in handed] == [built_id, signed_id]
    assert all(t["cluster"] == Conf.CLUSTER_NAME for t in handed)
    assert handed[0]["kwargs"] == {"attempt": 1} and callable(handed[0]["func"])
    assert broker.failed == ["forged"]  # refused, never handed to a worker


def test_install_makes_django_q2_spawn_this_pusher(monkeypatch) -> None:
    import django_q.cluster

    monkeypatch.setattr(django_q.cluster, "pusher", django_q.cluster.pusher)
    pusher.install()
    assert django_q.cluster.pusher is pusher.pusher


def test_a_task_handed_over_is_read_as_django_q2s_put_would_have_written_it() -> None:
    """The pusher writes each task to the workers' multiprocessing queue itself (no feeder
    thread): same order, same bound, same size counter; a worker's get reads it."""
    from django_q.queues import Queue

    workers = Queue(maxsize=2)
    first = task("jobs.runtime.tasks.execute", ("p-1",), {"attempt": 1}, "worker-chat")[1]
    second = task("jobs.runtime.tasks.execute", ("p-2",), {"attempt": 2}, "worker-chat")[1]
    pusher.hand_over(workers, first)
    pusher.hand_over(workers, second)
    assert workers.qsize() == 2
    assert not workers._sem.acquire(False)  # full: a third hand-over would wait for a get
    got = [workers.get(timeout=5), workers.get(timeout=5)]
    assert [t["args"] for t in got] == [("p-1",), ("p-2",)]
    assert got[0]["func"] is first["func"] and got[1]["kwargs"] == {"attempt": 2}
    assert workers.qsize() == 0
    pusher.hand_over(workers, first)  # room again
    assert workers.get(timeout=5)["args"] == ("p-1",)
    workers.close()
