"""The pusher of Receipt's clusters: django-q2's loop (take from the broker, hand each task
to the workers' queue), minus signing for the promise broker.

django-q2's pusher unsigns every package its broker hands it (HMAC, base64, unpickle).
The promise broker (`promisebroker`) builds its tasks in this very process from rows it
just took, so signing them only to unsign them at once was about 45 % of a pusher's CPU
in a drain: it hands them over unpacked, as dicts. A signed package (the Redis broker's,
which crossed a network) is unpacked as django-q2 does, signature checked.

Each task is written to the workers' queue by the pusher itself (`hand_over`), not by
the queue's feeder thread: one thread woken less per task.
"""

from __future__ import annotations

import logging
from multiprocessing.process import current_process
from multiprocessing.reduction import ForkingPickler
from time import sleep
from typing import Any

from django_q.brokers import Broker, get_broker
from django_q.conf import Conf
from django_q.signing import BadSignature, SignedPackage

from jobs.runtime import lookahead

logger = logging.getLogger("django-q")


def pusher(task_queue: Any, event: Any, broker: Broker | None = None) -> None:
    """django-q2's `pusher` (same arguments, same stop and failure behaviour)."""
    broker = broker or get_broker()
    logger.info("%s pushing tasks at %s", current_process().name, current_process().pid)
    while True:
        try:
            task_set = broker.dequeue()
        except Exception:
            logger.exception("Failed to pull task from broker")
            sleep(10)  # the broker is probably down: the sentinel restarts us
            break
        for ack_id, package in task_set or ():
            task = unpacked(package)
            if task is None:
                logger.exception("Failed to push task to queue")
                broker.fail(ack_id)
                continue
            task["cluster"] = Conf.CLUSTER_NAME
            task["ack_id"] = ack_id
            hand_over(task_queue, task)
        if event.is_set():
            break


def hand_over(task_queue: Any, task: dict[str, Any]) -> None:
    """`task_queue.put(task)`, written by this thread. A multiprocessing queue's put only
    buffers the task and wakes its feeder thread, which pickles and writes it: a thread
    hand-off per task, ~0.05 of a pusher's ~0.2 core-ms a drained job. Here the same
    bytes go down the same pipe under the same locks (the queue's bound, then its write
    lock), and django-q2's size counter is kept. A queue without those parts (not a
    multiprocessing queue) gets a plain put."""
    bound, write_lock, writer = (getattr(task_queue, n, None) for n in _PARTS)
    size = getattr(task_queue, "size", None)
    if bound is None or writer is None or size is None:
        task_queue.put(task)
        return
    bound.acquire()
    data = ForkingPickler.dumps(task)
    if write_lock is None:
        writer.send_bytes(data)
    else:
        with write_lock:
            writer.send_bytes(data)
    size.increment(1)


_PARTS = ("_sem", "_wlock", "_writer")  # CPython's multiprocessing.queues.Queue


def unpacked(package: Any) -> dict[str, Any] | None:
    """A task as the workers read it: as it is when a broker of this process built it, else
    unsigned; None when it cannot be read."""
    if isinstance(package, dict):
        return package
    try:
        task: dict[str, Any] = SignedPackage.loads(package)
    except (TypeError, BadSignature):
        return None
    return task


def install() -> None:
    """Make every cluster this process starts use this pusher, and a worker loop that can
    look at its next task (`jobs.runtime.lookahead`): django-q2's Sentinel spawns the
    module-level `pusher` and `worker` of `django_q.cluster`."""
    import django_q.cluster

    django_q.cluster.pusher = pusher
    django_q.cluster.worker = lookahead.worker
