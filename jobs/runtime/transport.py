"""The only way Receipt hands work to a role's django-q2 cluster.

Database broker (the default): the delivery promise row is the task
(`jobs.runtime.promisebroker`), so sending is only a wake-up: one `pg_notify` per
cluster per transaction on PostgreSQL, delivered when the promise commits; nothing on
SQLite, whose pushers poll. Redis: the task is pushed after the commit (Redis is not
transactional), so it exists only if the promise it delivers committed. It is packed as
django-q2's `async_task` packs one (its pusher unpacks it), without what that adds per call
and Receipt never uses (a humanized name, the enqueue signal, option merging): a push is on
every job's path twice.

A push that fails (Redis down or restarting) is logged and dropped, never raised: the
promise it delivers has committed, so the caller's write stands (an enqueue answers,
a driver pass is done), and `jobs.runtime.redelivery` pushes the task again from the
promise once Redis answers.

While a `held()` block is open (`jobs.testing`: a test runs the work in its own process),
nothing is pushed to Redis at all, from any thread of the process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from jobs.runtime import counters
from jobs.runtime.promisebroker import channel_for, signed_task
from jobs.runtime.roles import is_cluster
from observability.logs import log_event

logger = logging.getLogger("receipt.delivery")

PUSH_CHUNK = 500  # tasks per RPUSH (a batch enqueue's tasks: a few hundred KiB a command)
_woken = threading.local()  # clusters already woken by the current transaction
_holds: list[None] = []  # one entry per open `held()` block, whatever its thread
_holds_lock = threading.Lock()


@cache
def _broker(cluster: str) -> Any:  # one Redis client per cluster per process
    from django_q.brokers import get_broker

    return get_broker(cluster)


@contextmanager
def held() -> Iterator[None]:
    """While the block runs, no task is pushed to Redis, by any thread of this process (the
    dispatch outbox's included): the promises are written as ever, and whoever holds runs
    them itself (`jobs.testing`, in the test's process). A push is dropped when it would
    be made, so an after-commit push of a transaction that commits in the block is
    dropped too. The database broker's tasks are its promise rows: nothing to hold."""
    with _holds_lock:
        _holds.append(None)
    try:
        yield
    finally:
        with _holds_lock:
            _holds.pop()


def send(cluster: str, func: str, *args: Any, **kwargs: Any) -> None:
    """`kwargs` travel with a Redis task only (the database broker's take reads its own)."""
    if not is_cluster(cluster):
        raise ValueError(f"unknown cluster {cluster!r}")
    if settings.Q_CLUSTER.get("orm"):
        _wake(cluster)
        return
    _push_after_commit(cluster, func, args, kwargs)


def send_woken(cluster: str, func: str, *args: Any, **kwargs: Any) -> None:
    """`send` for a promise whose own statement carried the database broker's wake-up:
    with that broker nothing is left to do; Redis gets the task after the commit."""
    if not is_cluster(cluster):
        raise ValueError(f"unknown cluster {cluster!r}")
    if not settings.Q_CLUSTER.get("orm"):
        _push_after_commit(cluster, func, args, kwargs)


def _push_after_commit(
    cluster: str, func: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    transaction.on_commit(lambda: _push(cluster, [signed_task(func, args, kwargs, cluster)[1]]))


def wake(cluster: str) -> None:
    """Wake `cluster`'s pushers with the current transaction (the database broker on
    PostgreSQL; a resumed group's promises are taken at once, not at the next poll)."""
    if wakes_by_notify():
        _wake(cluster)


def wakes_by_notify() -> bool:
    """The database broker on PostgreSQL: a cluster is woken by `pg_notify`."""
    return (
        bool(settings.Q_CLUSTER.get("orm")) and connections[DEFAULT_DB_ALIAS].vendor == "postgresql"
    )


def push_committed_many(cluster: str, func: str, calls: Sequence[Sequence[Any]]) -> int:
    """The tasks of promises that have committed, one per call (its arguments): nothing
    to push with the database broker (the promise row is the task); to Redis at once.
    Returns how many reached Redis."""
    if not is_cluster(cluster):
        raise ValueError(f"unknown cluster {cluster!r}")
    if settings.Q_CLUSTER.get("orm"):
        return 0
    return _push(cluster, [signed_task(func, tuple(args), {}, cluster)[1] for args in calls])


def push_committed(cluster: str, func: str, *args: Any, **kwargs: Any) -> int:
    """One task with its `kwargs` (an execute task's known fields), as `send` pushes it,
    for a promise that has committed; 1 if it reached Redis."""
    if not is_cluster(cluster):
        raise ValueError(f"unknown cluster {cluster!r}")
    if settings.Q_CLUSTER.get("orm"):
        return 0
    return _push(cluster, [signed_task(func, args, kwargs, cluster)[1]])


def drained(cluster: str) -> bool:
    """Redis answers and holds no task for `cluster`: every task pushed so far was taken."""
    import redis

    broker = _broker(cluster)
    try:
        return int(broker.connection.llen(broker.list_key)) == 0
    except redis.RedisError:
        return False


def _push(cluster: str, packages: Sequence[str]) -> int:
    """An RPUSH per PUSH_CHUNK tasks, not one per task. A connection Redis closed since
    its last use (a restart) is tried once more on a new one; past that the tasks are
    dropped with a warning: their promises redeliver them. Returns how many were pushed:
    none while `held()`."""
    if _holds:
        return 0
    import redis

    broker = _broker(cluster)
    pushed = 0
    try:
        for start in range(0, len(packages), PUSH_CHUNK):
            chunk = packages[start : start + PUSH_CHUNK]
            try:
                broker.connection.rpush(broker.list_key, *chunk)
            except redis.ConnectionError:
                broker.connection.rpush(broker.list_key, *chunk)
            pushed += len(chunk)
    except redis.RedisError as error:
        lost = len(packages) - pushed
        counters.incr("receipt_push_failures_total", lost, cluster=cluster)
        log_event(
            logger,
            "delivery.push_failed",
            f"{lost} task(s) for {cluster} not pushed to Redis ({error}); they are "
            "pushed again from their promises once Redis answers",
            level=logging.WARNING,
            cluster=cluster,
            tasks=lost,
        )
    return pushed


def _wake(cluster: str) -> None:
    """One notification per cluster per transaction (a driver pass opens many promises)."""
    if connection.vendor != "postgresql":
        return
    if connection.in_atomic_block:
        # Django replaces run_on_commit at every commit and rollback: it names the
        # transaction. The no-op hook makes sure it is replaced even when nothing else
        # registered one.
        if getattr(_woken, "hooks", None) is not connection.run_on_commit:
            transaction.on_commit(_noop)
            _woken.hooks, _woken.clusters = connection.run_on_commit, set()
        if cluster in _woken.clusters:
            return
        _woken.clusters.add(cluster)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [channel_for(cluster), cluster])


def _noop() -> None:
    pass
