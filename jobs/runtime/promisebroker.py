"""The django-q2 broker of the database path: the delivery promise row is the task.

django-q2's ORM broker keeps a second table of pickled tasks (insert on send, select and
lock-update on take, delete on ack: four statements a hop on top of our promise). Here a
cluster takes its unsettled, unclaimed promises straight from `jobs_delivery_promise`:
one UPDATE ... RETURNING per batch, `FOR UPDATE SKIP LOCKED` on PostgreSQL so replicas of
a role never wait on each other. The take pushes `available_at` forward (a visibility
timeout): a process that dies after a take and before its worker claims the promise
lets it come back. Promises are taken in take order (`ordered_at`: creation or due time,
moved earlier by priority, `jobs.core.scheduling`); those in flight sit at the front of
the index until claimed and are skipped (a handful: what the cluster's queue holds), and
scheduled ones (a delayed job's, until the due loop releases them) are not in it at all. The take's write touches no indexed column, so it is a heap-only update.
Settling or claiming a promise takes it out of the partial index, so there is nothing to
acknowledge.

Wake-ups: `transport.send` issues `pg_notify('receipt_q.<cluster>', <cluster>)` with the
promise's transaction; a pusher waits on the same connection it takes with (one
connection per pusher) and hears only its own cluster's channel, so an enqueue wakes the
driver and nobody else. A take that left nothing behind (fewer promises than the pusher
asks for) is not repeated until a notification comes: one take per wake-up when idle.
SQLite has no notifications: the pusher polls every RECEIPT_BROKER_POLL_MS with a read,
and writes only when there is something to take.

The driver cluster gets up to DRIVER_BATCH promises per task, so one driver pass opens
many execute promises in one transaction; worker clusters get one promise per task.
"""

from __future__ import annotations

import functools
import importlib
import time
import uuid
from typing import Any

from django.db import connections
from django.utils import timezone
from django_q.brokers import Broker
from django_q.conf import Conf
from django_q.signing import SignedPackage

from jobs import promise_sql as sql
from jobs.core.names import group_of_cluster
from jobs.runtime.loops import Report
from receipts.db import notify

CHANNEL = "receipt_q"  # the prefix of each cluster's channel: receipt_q.<cluster>
VISIBILITY_MS = 30_000
DRIVER_BATCH = 50
IDLE_WAIT_S = 1.0  # the longest an idle pusher waits without looking (stop, missed notify)
DRIVE_MANY = "jobs.runtime.tasks.drive_many"
EXECUTE = "jobs.runtime.tasks.execute"


def channel_for(cluster: str) -> str:
    """The notification channel a cluster's pusher LISTENs on (quoted there: it holds a dot
    and a dash). `channel_for("")` is the prefix the driver's statement completes."""
    return f"{CHANNEL}.{cluster}"


class PromiseBroker(Broker):
    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key)
        self.group = group_of_cluster(self.list_key) or self.list_key
        self._pg: Any = None  # psycopg connection of this process (PostgreSQL)
        self._woken = False
        self._caught_up = False  # the last take left nothing this pusher could take

    def __getstate__(self) -> Any:  # sent to the pusher and monitor processes
        return self.list_key, self.group

    def __setstate__(self, state: Any) -> None:
        self.list_key, self.group = state
        self.connection = None
        self._pg = None
        self._woken = False
        self._caught_up = False

    # ---- what django-q2 calls --------------------------------------------------------------

    def enqueue(self, task: Any) -> str:
        """A django-q2 schedule firing (`run_schedules`): run its function after the
        schedule's transaction commits, in the calling thread. Receipt's own work never
        comes here: it is sent as promises (jobs.runtime.dispatch)."""
        from django.db import transaction
        from django.utils.module_loading import import_string

        unpacked = SignedPackage.loads(task)
        func = (
            import_string(unpacked["func"])
            if isinstance(unpacked["func"], str)
            else unpacked["func"]
        )
        transaction.on_commit(lambda: func(*unpacked["args"], **unpacked["kwargs"]))
        return str(unpacked["id"])

    def dequeue(self) -> list[tuple[str, dict[str, Any]]] | None:
        if self._caught_up and not self._woken:
            self._wait()  # whatever was committed since the last take has notified us
        self._woken = False
        rows = self._take()
        if not rows and not self._woken:  # a notification that came with the take: look again
            self._wait()
            rows = self._take()
        # Only where notifications wake us: SQLite's pusher polls and takes what it finds.
        self._caught_up = self._postgres() and len(rows) < self._limit()
        return self._tasks(rows) if rows else None

    def acknowledge(self, task_id: Any) -> None:
        """Nothing to do: the task's own settle (or claim) took the promise out of reach."""

    def fail(self, task_id: Any) -> None:
        """A task that cannot be unpacked comes back after the visibility timeout."""

    def delete(self, task_id: Any) -> None:
        pass

    def queue_size(self) -> int:
        return len(self._select(sql.PEEK, [self.group, _now_ms(), 10_000]))

    def lock_size(self) -> int:
        return 0

    def ping(self) -> bool:
        return True

    def info(self) -> str:
        return f"promise broker ({self.group})"

    def delete_queue(self) -> None:
        pass

    def purge_queue(self) -> None:
        pass

    @staticmethod
    def get_connection(list_key: str | None = None) -> Any:
        return 0

    # ---- taking ----------------------------------------------------------------------------

    def _limit(self) -> int:
        return (
            DRIVER_BATCH * max(1, Conf.WORKERS) if self.group == "driver" else max(1, Conf.WORKERS)
        )

    def _take(self) -> list[tuple[Any, ...]]:
        now = _now_ms()
        if self._postgres():
            if self.group == "driver":
                return self._select(
                    sql.TAKE_PG, [now + VISIBILITY_MS, self.group, now, self._limit()]
                )
            return self._select(
                sql.TAKE_WITH_JOB_PG,
                [now + VISIBILITY_MS, self.group, now, self.group, self._limit()],
            )
        peek = [self.group, now, self.group, self._limit()]
        ids = [row[0] for row in self._select(sql.PEEK_TAKE, peek)]
        if not ids:
            return []
        return self._select(sql.take_ids_sqlite(len(ids)), [now + VISIBILITY_MS, *ids, now])

    def _tasks(self, rows: list[tuple[Any, ...]]) -> list[tuple[str, dict[str, Any]]]:
        if self.group == "driver":
            ids = [row[0] for row in rows]
            chunks = [ids[i : i + DRIVER_BATCH] for i in range(0, len(ids), DRIVER_BATCH)]
            return [task(DRIVE_MANY, (chunk,), {}, self.list_key) for chunk in chunks]
        return [
            task(
                EXECUTE,
                (row[0],),
                {
                    "job_id": row[1],
                    "attempt": row[2],
                    "dispatch_key": row[3],
                    "target_group": self.group,
                    **({"state": row[5]} if len(row) > 5 and row[5] is not None else {}),
                },
                self.list_key,
            )
            for row in rows
        ]

    # ---- connections -----------------------------------------------------------------------

    @staticmethod
    def _postgres() -> bool:
        return connections[Conf.ORM or "default"].vendor == "postgresql"

    def _select(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        if not self._postgres():
            with connections[Conf.ORM or "default"].cursor() as cursor:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
        try:
            return list(self._connection().execute(sql, params, prepare=True).fetchall())
        except Exception:
            self._close()  # a broken connection is replaced on the next call
            raise

    def _connection(self) -> Any:
        if self._pg is None or self._pg.closed:
            params = connections[Conf.ORM or "default"].get_connection_params()
            for key in ("cursor_factory", "context", "prepare_threshold"):
                params.pop(key, None)
            self._pg = notify.connect(params)
            # A take only hides promises for the visibility window: losing one in a server
            # crash loses nothing, so its commit does not wait for the disk.
            self._pg.execute("SET synchronous_commit TO off")
            # psycopg reads notifications during any statement: the handler sees them all
            notify.listen(self._pg, [channel_for(self.list_key)], self._on_notify)
        return self._pg

    def _on_notify(self, notify: Any) -> None:
        self._woken = True

    def _wait(self) -> None:
        """Until a notification arrives. Those that woke us are read off the socket here:
        the take that follows sees what they announce, and only one heard during that take
        (`_woken`) may have come too late for it."""
        if not self._postgres():
            time.sleep(Conf.POLL)
            return
        try:
            notify.wait(self._connection(), IDLE_WAIT_S)
        except Exception:  # a broken connection must never stop the pusher
            self._close()
            time.sleep(Conf.POLL)

    def _close(self) -> None:
        if self._pg is not None:
            try:
                self._pg.close()
            finally:
                self._pg = None


def signed_task(
    func: str, args: tuple[Any, ...], kwargs: dict[str, Any], cluster: str
) -> tuple[str, str]:
    """(task id, package) of one django-q2 task for a broker elsewhere (Redis): `task`'s
    fields, signed by django-q2's own `SignedPackage`."""
    task_id, unsigned = task(func, args, kwargs, cluster)
    return task_id, SignedPackage.dumps(unsigned)


def task(
    func: str, args: tuple[Any, ...], kwargs: dict[str, Any], cluster: str
) -> tuple[str, dict[str, Any]]:
    """(task id, task) of one django-q2 task as its worker reads it, for this process's
    pusher (`jobs.runtime.pusher`: unsigned, it never leaves the process)."""
    task_id = uuid.uuid4().hex
    unsigned = {
        "id": task_id,
        "name": str(args[0])[:100],  # the promise id(s): what an operator looks for
        "func": _function(func),  # pickled by reference: the worker skips `pydoc.locate`
        "args": args,
        "kwargs": kwargs,
        "started": timezone.now(),
        "ack_failure": True,
        "cluster": cluster,
    }
    return task_id, unsigned


def is_execute(task: dict[str, Any]) -> bool:
    """Whether a task (as the workers read it) runs an execute promise."""
    return task.get("func") is _function(EXECUTE)


@functools.cache
def _function(path: str) -> Any:
    """The function a dotted path names (django-q2 would locate it anew for every task)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def run_schedules(now_ms: int) -> Any:
    """django-q2's scheduler pass, run by a maintenance loop of the role (not by the
    cluster's sentinel, so no process beyond the connection budget touches the database)."""
    from django_q.brokers import get_broker
    from django_q.scheduler import scheduler

    scheduler(broker=get_broker())
    return Report("schedules")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
