"""The driver (D-4): the first hop. Reads the job and decides: settle the promise,
fail a stale lease, cancel on abort, or open the execute promise and send the attempt
to the routed worker group. It never leases: leasing belongs to the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from jobs import callbacks, queue
from jobs import promise_sql as sql
from jobs.core import names
from jobs.core.contracts import routed_group
from jobs.core.scheduling import take_order_sql
from jobs.core.state import Fence, JobState
from jobs.projector import state_from_rows
from jobs.runtime import counters, faults, promisebroker, promises, transport
from jobs.runtime.roles import cluster_for_group
from jobs.timing_config import current_timing
from receipts.clock import now_ms as wall_clock_ms
from receipts.db import pipelined_transaction, prepared

EXECUTE_TASK = "jobs.runtime.tasks.execute"
STALE_LEASE_ERROR = "stale active job lost execution; retrying through driver"


execute_promise_id = names.execute_promise_id


def drive(promise_id: str, *, now_ms: int | None = None) -> dict[str, Any]:
    now = wall_clock_ms() if now_ms is None else now_ms
    result = _drive_queued([promise_id], now).get(promise_id) or _drive_counted(promise_id, now)
    counters.flush()
    return result


def _drive_counted(promise_id: str, now: int) -> dict[str, Any]:
    result = _drive(promise_id, now_ms=now)
    counters.incr("receipt_driver_outcomes_total", status=result["status"])
    return result


def drive_many(promise_ids: list[str], *, now_ms: int | None = None) -> list[dict[str, Any]]:
    """A driver pass over many promises (the database broker hands the driver batches).

    The common case, a queued job with nothing unusual, is decided by the database in
    one statement where a pass can write in one (`_drive_queued`); else from one read for
    the whole batch and written in ONE transaction: every execute promise inserted, every
    driver promise settled, one wake-up per worker cluster. Anything else (terminal,
    leased, abort requested, a promise already settled) takes the one-by-one path.
    """
    now = wall_clock_ms() if now_ms is None else now_ms
    decided = _drive_queued(promise_ids, now)
    results = list(decided.values())
    promise_ids = [promise_id for promise_id in promise_ids if promise_id not in decided]
    if not promise_ids:
        counters.flush()
        return results
    found = promises.get_with_jobs(promise_ids, now_ms=now)
    simple: list[tuple[promises.PromiseView, JobState]] = []
    for promise_id in promise_ids:
        view, job = None, None
        if promise_id in found:
            view, stored = found[promise_id]
            job = _job(stored)
        if view is not None and job is not None and plainly_queued(view, job):
            simple.append((view, job))
        else:
            results.append(_drive_counted(promise_id, now))
    if simple:
        results += _open_many(simple, now)
    counters.flush()
    return results


def plainly_queued(view: promises.PromiseView, job: JobState) -> bool:
    """The common decision (D-4), in Python: an open driver promise whose job is queued
    with no abort asked opens the execute promise of the job's next attempt. Its SQL twin
    is `DRIVE_QUEUED`, just below; change both or neither."""
    return (
        view.function == "driver"
        and view.open
        and job.status == "queued"
        and not job.abort_requested
    )


@dataclass(frozen=True)
class Decided:
    """A driver promise the common decision took (`drive_queued`): the execute promise
    of its job's next attempt, and whether this statement opened it."""

    driver_id: str
    execute_id: str
    job_id: str
    attempt: int
    target_group: str
    dispatch_key: str
    opened: bool
    job_state: Any = None  # the job's read-model state, as the statement read it


# The common decision (D-4) in SQL, `plainly_queued`'s twin, on the job's routed group
# (its row's worker_group, set from the same routing at enqueue): opens the execute
# promise and settles the driver promise as `promises.send_open_and_settle` does. Nothing
# else is written; the promises it does not return take the read-and-decide path.
# Key-only: by promise id, then the job by its id. The job's status is tested only after
# the join (CTE `c`): beside it the planner, reading `status = 'queued'` as selective (a
# table analyzed when few jobs were queued, or never), walked every queued job's entry of
# the status index for each promise and parsed its state to filter it, a pass slower the
# longer the backlog.
_DRIVE_QUEUED = (
    "WITH c AS MATERIALIZED (SELECT d.id AS driver, d.dispatch_key AS k, j.id AS job, "
    "j.attempt, j.worker_group AS g, j.status, j.state AS st "
    f"FROM {sql.TABLE} d JOIN jobs_job j ON j.id = d.job_id "
    f"WHERE d.id = ANY(%s) AND d.function = 'driver' AND {sql.open_pg('d.')}), "
    "v AS MATERIALIZED (SELECT driver, k, job, attempt + 1 AS a, g, "
    f"{names.execute_promise_id_sql('job', '(attempt + 1)', 'driver')} AS x, "
    "coalesce(nullif((st ->> 'leaseMs')::bigint, 0), %s) AS lease, "
    "coalesce((st ->> 'priority')::int, 0) AS priority, st FROM c "
    "WHERE status = 'queued' AND (st ->> 'abortRequested') IS DISTINCT FROM 'true'), "
    "opened AS ("
    + sql.insert(
        "SELECT x, 'execute', job, a, g, k, 'pending', %s + lease, %s, %s, "
        f"{take_order_sql('%s', 'priority', '%s')}, NULL FROM v"
    )
    + "), "
    f"settled AS (UPDATE {sql.TABLE} p SET state = 'resolved', settled_at = %s, "
    "result = jsonb_build_object('status', CASE WHEN v.x IN (SELECT id FROM opened) "
    "THEN 'dispatched' ELSE 'already_dispatched' END, 'execute', v.x) "
    f"FROM v WHERE p.id = v.driver AND {sql.open_pg('p.')}){{woke}} "
    "SELECT v.driver, v.x, v.job, v.a, v.g, v.k, v.x IN (SELECT id FROM opened), v.st{count} "
    # SET LOCAL of the statement's own transaction (or the caller's): read at its commit
    "FROM v CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit"
)
# With the database broker the wake-up of each worker cluster given work travels in the
# statement, and so commits with it.
_WOKE = (
    ", woke AS (SELECT pg_notify(%s || c, c) FROM (SELECT DISTINCT "
    f"{names.worker_cluster_sql('g')} AS c FROM v WHERE x IN (SELECT id FROM opened)) AS w)"
)
# {waking the database broker's clusters: statement}
DRIVE_QUEUED = {
    True: _DRIVE_QUEUED.format(woke=_WOKE, count=", (SELECT count(*) FROM woke)"),
    False: _DRIVE_QUEUED.format(woke="", count=""),
}


def drive_queued(
    driver_ids: list[str], *, now_ms: int, default_lease_ms: int, wake_channel: str | None
) -> list[Decided]:
    """PostgreSQL: the common decision for these driver promises as ONE statement
    (`DRIVE_QUEUED`), run at once. Outside a transaction it is its own (autocommit):
    no BEGIN, no COMMIT, no pipeline around it. Its commit does not wait for the disk
    (`promises.recoverable_commit`'s reasoning: it writes promises and wake-ups only).
    `wake_channel`: the database broker's channel prefix (`promisebroker.channel_for("")`);
    each worker cluster given work is notified on its own channel."""
    aging = current_timing().priority_aging_ms  # G-4: the execute promise's take order
    params: list[Any] = [
        driver_ids,
        default_lease_ms,
        now_ms,
        now_ms,
        now_ms,
        now_ms,
        aging,
        now_ms,
    ]
    if wake_channel is not None:
        params.append(wake_channel)
    rows, _ = prepared(DRIVE_QUEUED[wake_channel is not None], params)
    return [Decided(*row[:8]) for row in rows]


def _drive_queued(promise_ids: list[str], now: int) -> dict[str, dict[str, Any]]:
    """The common case decided by the database in ONE statement, its own transaction:
    every driver promise whose job is queued with no abort asked gets its execute promise
    and is settled (`drive_queued`), and its worker's task is pushed once
    committed. Returns {driver promise id: result} of those it decided (none where a pass
    cannot write in one statement); the others are read and decided as before, so a job
    that is anything but plainly queued costs one more round trip."""
    if not _one_statement(wake_in_statement=True):
        return {}
    default_lease = current_timing().job_lease_ms
    channel = promisebroker.channel_for("") if transport.wakes_by_notify() else None
    decided = drive_queued(
        promise_ids, now_ms=now, default_lease_ms=default_lease, wake_channel=channel
    )
    faults.crash("driver_after_execute_sent")
    results = {}
    for d in decided:
        if d.opened:  # the database broker was woken by the statement
            transport.send_woken(
                cluster_for_group(d.target_group),
                EXECUTE_TASK,
                d.execute_id,
                job_id=d.job_id,
                attempt=d.attempt,
                dispatch_key=d.dispatch_key,
                target_group=d.target_group,
                state=d.job_state,  # the worker begins on it without reading the job
            )
        status = "dispatched" if d.opened else "already_dispatched"
        counters.incr("receipt_driver_outcomes_total", status=status)
        results[d.driver_id] = {"status": status, "jobId": d.job_id, "execute": d.execute_id}
    return results


def _open_many(
    batch: list[tuple[promises.PromiseView, JobState]], now: int
) -> list[dict[str, Any]]:
    default_lease = current_timing().job_lease_ms
    new: dict[str, promises.NewPromise] = {}
    routes: dict[str, tuple[str, str]] = {}
    for view, job in batch:
        group = routed_group(job.agent_id, job.kind, job.queue)
        execute_id = execute_promise_id(job.job_id, job.attempt + 1, view.id)
        routes[view.id] = (execute_id, group)
        new[execute_id] = promises.NewPromise(
            execute_id,
            "execute",
            job.job_id,
            job.attempt + 1,
            group,
            view.dispatch_key,
            job.lease_ms or default_lease,
            job.priority,
        )
    read_opened: Callable[[], set[str]] | None = None
    with pipelined_transaction():
        promises.recoverable_commit()
        if _one_statement():
            read_opened = _open_in_one_statement(new, routes, now)
        else:
            opened = _open_and_settle(batch, new, routes, now)
    if read_opened is not None:
        opened = read_opened()  # known once the pass's pipeline synced
    faults.crash("driver_after_execute_sent")
    results = []
    for view, job in batch:
        execute_id = routes[view.id][0]
        status = "dispatched" if execute_id in opened else "already_dispatched"
        counters.incr("receipt_driver_outcomes_total", status=status)
        results.append({"status": status, "jobId": job.job_id, "execute": execute_id})
    return results


def _open_and_settle(
    batch: list[tuple[promises.PromiseView, JobState]],
    new: dict[str, promises.NewPromise],
    routes: dict[str, tuple[str, str]],
    now: int,
) -> set[str]:
    """The pass's writes, each decided on what the one before returned: the execute
    promises, their wake-ups or tasks, the driver promises' settlements, the callbacks."""
    opened = promises.create_many(list(new.values()), now_ms=now)
    for execute_id, target in sorted(routes.values()):
        if execute_id in opened:  # a wake-up per cluster and transaction on the database
            transport.send(
                cluster_for_group(target), EXECUTE_TASK, execute_id, **_known(new[execute_id])
            )
    settled = []
    for view, _ in batch:
        execute_id = routes[view.id][0]
        status = "dispatched" if execute_id in opened else "already_dispatched"
        settled.append((view.id, {"status": status, "execute": execute_id}))
    promises.settle_many(settled, "resolved", now_ms=now)
    callbacks.record(
        [("dispatched", job, now) for view, job in batch if routes[view.id][0] in opened]
    )
    return opened


def _one_statement(*, wake_in_statement: bool = False) -> bool:
    """A pass can write in one statement on PostgreSQL when nothing in it waits for what
    was opened: no callbacks to record, and tasks pushed to Redis after the commit. The
    database broker's wake-ups go in the transaction, per cluster it opened work for: only
    a statement that carries them itself (`wake_in_statement`) takes that broker."""
    return (
        connection.vendor == "postgresql"
        and not settings.RECEIPT.callback_url
        and (wake_in_statement or not transport.wakes_by_notify())
    )


def _open_in_one_statement(
    new: dict[str, promises.NewPromise], routes: dict[str, tuple[str, str]], now: int
) -> Callable[[], set[str]]:
    """The execute promises and the driver promises' settlements as one statement sent
    with the commit (one round trip for the write); the tasks of the promises it opened
    are pushed once it committed. Returns what it opened, readable once it synced."""
    executes = {driver_id: execute_id for driver_id, (execute_id, _) in routes.items()}
    opened = cache(promises.send_open_and_settle(list(new.values()), executes, now_ms=now))

    def push() -> None:
        for execute_id, target in sorted(routes.values()):
            if execute_id in opened():  # after the commit: pushed at once
                transport.send(
                    cluster_for_group(target), EXECUTE_TASK, execute_id, **_known(new[execute_id])
                )

    transaction.on_commit(push)
    return opened


def _known(promise: promises.NewPromise) -> dict[str, Any]:
    """What a worker would otherwise read back from its execute promise (a Redis task
    carries it; the database broker's take returns it)."""
    return {
        "job_id": promise.job_id,
        "attempt": promise.attempt,
        "dispatch_key": promise.dispatch_key,
        "target_group": promise.target_group,
    }


def _job(stored: Any) -> JobState | None:
    """The job of a read-model `state` as `promises.get_with_jobs` returns it."""
    return None if stored is None else state_from_rows([(stored,)])


def _drive(promise_id: str, *, now_ms: int | None = None) -> dict[str, Any]:
    now = wall_clock_ms() if now_ms is None else now_ms
    promise, stored = promises.get_with_jobs([promise_id], now_ms=now).get(promise_id, (None, None))
    if promise is None or promise.function != "driver":
        return {"status": "unknown_promise", "promiseId": promise_id}
    if not promise.open:  # settled already; a late but unsettled delivery still drives
        return {"status": "duplicate_delivery", "promiseId": promise_id, "state": promise.state}
    job = _job(stored)
    if job is None:
        promises.settle(promise_id, "rejected", now_ms=now, result={"status": "missing"})
        return {"status": "missing", "jobId": promise.job_id}
    if job.is_terminal:
        promises.settle(promise_id, "resolved", now_ms=now, result={"status": "terminal_state"})
        return {"status": "terminal_state", "jobId": job.job_id}
    if job.holds_lease:
        return _drive_leased(promise_id, job, now)
    if job.abort_requested:
        queue.cancel(  # records its callback; the runworker's sender posts it
            job.job_id,
            reason=job.abort_reason or queue.ABORT_REQUESTED_REASON,
            by="driver",
            now_ms=now,
        )
        promises.settle(promise_id, "resolved", now_ms=now, result={"status": "canceled"})
        return {"status": "canceled", "jobId": job.job_id}
    return _open_many([(promise, job)], now)[0]


def _drive_leased(promise_id: str, job: JobState, now: int) -> dict[str, Any]:
    if job.lease_until is not None and job.lease_until <= now:
        # The attempt's worker is gone: fail it under its own fence so the ordinary
        # retry rules (J-4) and redrive recover the job (D-4).
        assert job.worker_id is not None
        queue.fail(
            job.job_id, STALE_LEASE_ERROR, fence=Fence(job.worker_id, job.attempt), now_ms=now
        )
        promises.settle(promise_id, "resolved", now_ms=now, result={"status": "stale_lease_failed"})
        return {"status": "stale_lease_failed", "jobId": job.job_id}
    promises.settle(promise_id, "resolved", now_ms=now, result={"status": "already_running"})
    return {"status": "already_running", "jobId": job.job_id}
