"""Delivery promises (D-1): create, read and settle. A pending promise past its timeout
counts as `timedout` (terminal) wherever it is read."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection

from jobs.models import DeliveryPromise
from receipts.db import prepared, sent

TERMINAL_STATES = ("resolved", "rejected", "canceled", "timedout")


# Open (unsettled): pending, or marked timed out by the sweep (which sets no settled_at).
# Statements that find a promise by id say "open" in a form no index can serve: a plan
# prepared while the table's statistics looked empty (after a TRUNCATE, on a new install, in
# a burst before autovacuum analyzes) otherwise reads every pending promise through the
# state or deliverable index and filters for the id, once per claim and per settlement.
def _open_pg(alias: str = "") -> str:
    """The open condition on PostgreSQL, of the promise row `alias` names ("d." in a join)."""
    return (
        f"num_nulls({alias}settled_at) = 1 "
        f"AND {alias}state NOT IN ('resolved', 'rejected', 'canceled')"
    )


_OPEN = {
    "postgresql": _open_pg(),
    "sqlite": "settled_at IS NULL AND state IN ('pending', 'timedout')",
}
_UNCLAIMED = {"postgresql": "num_nulls(worker_id) = 1", "sqlite": "worker_id IS NULL"}


def recoverable_commit() -> None:
    """Call first in a transaction that writes delivery plumbing only (promises, their
    wake-ups, callback rows; never a receipt): on PostgreSQL its commit does not wait for
    the disk. Used by the driver pass. A server crash may lose it, which loses nothing: a
    lost driver pass comes back when its promise's visibility window ends, and any later
    commit that read its rows (a worker's begin, which is durable) writes it to disk
    first, in WAL order."""
    if connection.vendor == "postgresql":
        prepared(_ASYNC_COMMIT, [], wait=False)


_ASYNC_COMMIT = "SELECT set_config('synchronous_commit', 'off', true)"  # SET LOCAL, preparable


@dataclass(frozen=True)
class PromiseView:
    id: str
    function: str
    job_id: str
    attempt: int | None
    target_group: str
    dispatch_key: str
    state: str  # effective state: pending past timeout reads as timedout
    timeout_at: int
    created_at: int
    settled_at: int | None
    worker_id: str | None
    result: Any

    @property
    def pending(self) -> bool:
        return self.state == "pending"

    @property
    def open(self) -> bool:
        """Not settled by anyone: pending, or timed out while its task still waited in the
        broker (a late delivery may still do the work; see `claim`)."""
        return self.state == "pending" or (self.state == "timedout" and self.settled_at is None)

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "function": self.function,
            "jobId": self.job_id,
            "attempt": self.attempt,
            "targetGroup": self.target_group,
            "dispatchKey": self.dispatch_key,
            "state": self.state,
            "timeoutAt": self.timeout_at,
            "createdAt": self.created_at,
            "settledAt": self.settled_at,
            "workerId": self.worker_id,
            "result": self.result,
        }


def effective_state(row: DeliveryPromise, now_ms: int) -> str:
    return _effective(row.state, row.timeout_at, now_ms)


def _effective(state: str, timeout_at: int, now_ms: int) -> str:
    return "timedout" if state == "pending" and timeout_at <= now_ms else state


def view(row: DeliveryPromise, now_ms: int) -> PromiseView:
    return PromiseView(
        row.id,
        row.function,
        row.job_id,
        row.attempt,
        row.target_group,
        row.dispatch_key,
        effective_state(row, now_ms),
        row.timeout_at,
        row.created_at,
        row.settled_at,
        row.worker_id,
        row.result,
    )


def get(promise_id: str, *, now_ms: int) -> PromiseView | None:
    row = DeliveryPromise.objects.filter(pk=promise_id).first()
    return view(row, now_ms) if row else None


# A driver pass reads its promises and their jobs' read-model rows in one statement (no
# ORM: it runs for every job, and the query compiler cost more than the round trip).
_WITH_JOB = (
    "SELECT p.id, p.function, p.job_id, p.attempt, p.target_group, p.dispatch_key, p.state, "
    "p.timeout_at, p.created_at, p.settled_at, p.worker_id, p.result, j.state "
    "FROM jobs_delivery_promise p LEFT JOIN jobs_job j ON j.id = p.job_id WHERE p.id "
)
_SQLITE_IDS_PER_READ = 500


def get_with_jobs(promise_ids: list[str], *, now_ms: int) -> dict[str, tuple[PromiseView, Any]]:
    """{promise id: (its view, its job's read-model `state` as stored, None without a
    row)} for the promises that exist."""
    if connection.vendor == "postgresql":
        rows = prepared(_WITH_JOB + "= ANY(%s)", [list(promise_ids)])[0]
    else:
        rows = []
        for start in range(0, len(promise_ids), _SQLITE_IDS_PER_READ):
            part = promise_ids[start : start + _SQLITE_IDS_PER_READ]
            marks = ", ".join(["%s"] * len(part))
            rows += prepared(_WITH_JOB + f"IN ({marks})", part)[0]
    found = {}
    for row in rows:
        result = json.loads(row[11]) if isinstance(row[11], str | bytes) else row[11]
        view = PromiseView(
            id=row[0],
            function=row[1],
            job_id=row[2],
            attempt=row[3],
            target_group=row[4],
            dispatch_key=row[5],
            state=_effective(row[6], row[7], now_ms),
            timeout_at=row[7],
            created_at=row[8],
            settled_at=row[9],
            worker_id=row[10],
            result=result,
        )
        found[view.id] = (view, row[12])
    return found


_INSERT = (
    "INSERT INTO jobs_delivery_promise (id, function, job_id, attempt, target_group, "
    "dispatch_key, state, timeout_at, created_at, available_at) VALUES {rows} "
    "ON CONFLICT (id) DO NOTHING RETURNING id"
)
_ROW = "(%s, %s, %s, %s, %s, %s, 'pending', %s, %s, %s)"


@dataclass(frozen=True)
class NewPromise:
    promise_id: str
    function: str
    job_id: str
    attempt: int | None
    target_group: str
    dispatch_key: str
    timeout_ms: int


def create(
    *,
    promise_id: str,
    function: str,
    job_id: str,
    attempt: int | None,
    target_group: str,
    dispatch_key: str,
    timeout_ms: int,
    now_ms: int,
) -> bool:
    """Insert a pending promise; False when the id already exists (someone else won).

    ON CONFLICT instead of catching IntegrityError: no savepoint, and a lost race does not
    poison the caller's transaction.
    """
    return bool(
        create_many(
            [
                NewPromise(
                    promise_id, function, job_id, attempt, target_group, dispatch_key, timeout_ms
                )
            ],
            now_ms=now_ms,
        )
    )


_INSERT_PG = (
    "INSERT INTO jobs_delivery_promise (id, function, job_id, attempt, target_group, "
    "dispatch_key, state, timeout_at, created_at, available_at) "
    "SELECT v.i, v.f, v.j, v.a, v.g, v.k, 'pending', v.t, %s, %s "
    "FROM jsonb_to_recordset(%s::jsonb) AS v(i text, f text, j text, a int, g text, k text, "
    "t bigint) ON CONFLICT (id) DO NOTHING RETURNING id"
)


def _insert_row(p: NewPromise, now_ms: int) -> dict[str, Any]:
    return {
        "i": p.promise_id,
        "f": p.function,
        "j": p.job_id,
        "a": p.attempt,
        "g": p.target_group,
        "k": p.dispatch_key,
        "t": now_ms + p.timeout_ms,
    }


def create_many(new: list[NewPromise], *, now_ms: int) -> set[str]:
    """Insert pending promises in one statement (on PostgreSQL one prepared statement for
    any number, the rows as one JSON parameter); the ids that were new (the others
    existed: someone else won)."""
    if not new:
        return set()
    if connection.vendor == "postgresql":
        values = [_insert_row(p, now_ms) for p in new]
        found, _ = prepared(_INSERT_PG, [now_ms, now_ms, json.dumps(values)])
        return {row[0] for row in found}
    params: list[Any] = []
    for p in new:
        params += [
            p.promise_id,
            p.function,
            p.job_id,
            p.attempt,
            p.target_group,
            p.dispatch_key,
            now_ms + p.timeout_ms,
            now_ms,
            now_ms,
        ]
    rows, _ = prepared(_INSERT.format(rows=", ".join([_ROW] * len(new))), params)
    return {row[0] for row in rows}


# A driver pass's whole write on PostgreSQL: the execute promises, and the driver promises
# settled each with whether its execute promise was new (`settle_many`'s result shape).
_OPEN_AND_SETTLE_PG = (
    "WITH opened AS (" + _INSERT_PG + "), "
    "settled AS (UPDATE jobs_delivery_promise SET state = 'resolved', settled_at = %s, "
    "result = jsonb_build_object('status', CASE WHEN (%s::jsonb ->> id) IN "
    "(SELECT id FROM opened) THEN 'dispatched' ELSE 'already_dispatched' END, "
    "'execute', %s::jsonb ->> id) "
    f"WHERE id = ANY(%s) AND {_OPEN['postgresql']}) "
    "SELECT id FROM opened"
)


def send_open_and_settle(
    new: list[NewPromise], executes: dict[str, str], *, now_ms: int
) -> Callable[[], set[str]]:
    """PostgreSQL, inside `pipelined()`: create `new` and settle the driver promises of
    `executes` ({driver promise id: its execute promise id}) in ONE statement, sent
    without waiting; the returned function gives the execute promises that were new once
    the pipeline has synced (a commit sent after it needs no round trip of its own)."""
    values = json.dumps([_insert_row(p, now_ms) for p in new])
    mapping = json.dumps(executes)
    outcome = sent(
        _OPEN_AND_SETTLE_PG, [now_ms, now_ms, values, now_ms, mapping, mapping, list(executes)]
    )
    return lambda: {row[0] for row in outcome()[0]}


@dataclass(frozen=True)
class Decided:
    """A driver promise the common decision took (`send_drive_queued`): the execute
    promise of its job's next attempt, and whether this statement opened it."""

    driver_id: str
    execute_id: str
    job_id: str
    attempt: int
    target_group: str
    dispatch_key: str
    opened: bool
    job_state: Any = None  # the job's read-model state, as the statement read it


# The driver's common decision (D-4) in SQL: an open driver promise whose job is queued
# with no abort asked opens the execute promise of the job's next attempt on the job's
# routed group (its row's worker_group, set from the same routing at enqueue), and is
# settled as `send_open_and_settle` settles it. Nothing else is written; the promises it
# does not return take the driver's read-and-decide path. Key-only: by promise id, then
# the job by its id. The job's status is tested only after the join (CTE `c`): beside it
# the planner, reading `status = 'queued'` as selective (a table analyzed when few jobs
# were queued, or never), walked every queued job's entry of the status index for each
# promise and parsed its state to filter it, a pass slower the longer the backlog.
_DRIVE_QUEUED_PG = (
    "WITH c AS MATERIALIZED (SELECT d.id AS driver, d.dispatch_key AS k, j.id AS job, "
    "j.attempt, j.worker_group AS g, j.status, j.state AS st "
    "FROM jobs_delivery_promise d JOIN jobs_job j ON j.id = d.job_id "
    f"WHERE d.id = ANY(%s) AND d.function = 'driver' AND {_open_pg('d.')}), "
    "v AS MATERIALIZED (SELECT driver, k, job, attempt + 1 AS a, g, "
    "job || ':attempt:' || (attempt + 1) || "
    "CASE WHEN driver = job THEN '' ELSE ':dispatch:' || driver END AS x, "
    "coalesce(nullif((st ->> 'leaseMs')::bigint, 0), %s) AS lease, st FROM c "
    "WHERE status = 'queued' AND (st ->> 'abortRequested') IS DISTINCT FROM 'true'), "
    "opened AS (INSERT INTO jobs_delivery_promise (id, function, job_id, attempt, "
    "target_group, dispatch_key, state, timeout_at, created_at, available_at) "
    "SELECT x, 'execute', job, a, g, k, 'pending', %s + lease, %s, %s FROM v "
    "ON CONFLICT (id) DO NOTHING RETURNING id), "
    "settled AS (UPDATE jobs_delivery_promise p SET state = 'resolved', settled_at = %s, "
    "result = jsonb_build_object('status', CASE WHEN v.x IN (SELECT id FROM opened) "
    "THEN 'dispatched' ELSE 'already_dispatched' END, 'execute', v.x) "
    f"FROM v WHERE p.id = v.driver AND {_open_pg('p.')}){{woke}} "
    "SELECT v.driver, v.x, v.job, v.a, v.g, v.k, v.x IN (SELECT id FROM opened), v.st{count} "
    # SET LOCAL of the statement's own transaction (or the caller's): read at its commit
    "FROM v CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit"
)
# With the database broker the wake-up of each worker cluster given work travels in the
# statement, and so commits with it.
_WOKE = (
    ", woke AS (SELECT pg_notify(%s || c, c) FROM (SELECT DISTINCT 'worker-' || g AS c "
    "FROM v WHERE x IN (SELECT id FROM opened)) AS w)"
)
_DRIVE_QUEUED = {
    True: _DRIVE_QUEUED_PG.format(woke=_WOKE, count=", (SELECT count(*) FROM woke)"),
    False: _DRIVE_QUEUED_PG.format(woke="", count=""),
}


def drive_queued(
    driver_ids: list[str], *, now_ms: int, default_lease_ms: int, wake_channel: str | None
) -> list[Decided]:
    """PostgreSQL: the common decision for these driver promises as ONE statement
    (`_DRIVE_QUEUED_PG`), run at once. Outside a transaction it is its own (autocommit):
    no BEGIN, no COMMIT, no pipeline around it. Its commit does not wait for the disk
    (`recoverable_commit`'s reasoning: the statement writes promises and wake-ups only).
    `wake_channel`: the database broker's channel prefix (`promisebroker.channel_for("")`);
    each worker cluster given work is notified on its own channel."""
    sql = _DRIVE_QUEUED[wake_channel is not None]
    params: list[Any] = [driver_ids, default_lease_ms, now_ms, now_ms, now_ms, now_ms]
    if wake_channel is not None:
        params.append(wake_channel)
    rows, _ = prepared(sql, params)
    return [Decided(*row[:8]) for row in rows]


def settle_many(settlements: list[tuple[str, Any]], state: str, *, now_ms: int) -> None:
    """Settle several promises (id, result) the same way: one statement on PostgreSQL (the
    rows as one JSON parameter, prepared), executemany on SQLite."""
    if not settlements:
        return
    assert state in TERMINAL_STATES
    if connection.vendor == "postgresql":
        ids, results = [pid for pid, _ in settlements], dict(settlements)
        prepared(_SETTLE_MANY_PG, [state, now_ms, json.dumps(results), ids], wait=False)
        return
    sql = (
        "UPDATE jobs_delivery_promise SET state = %s, settled_at = %s, result = %s "
        f"WHERE id = %s AND {_OPEN['sqlite']}"
    )
    with connection.cursor() as cursor:
        cursor.executemany(
            sql, [[state, now_ms, json.dumps(result), pid] for pid, result in settlements]
        )


_SETTLE_MANY_PG = (
    "UPDATE jobs_delivery_promise SET state = %s, settled_at = %s, result = (%s::jsonb) -> id "
    f"WHERE id = ANY(%s) AND {_OPEN['postgresql']}"
)


_SETTLE = {
    vendor: "UPDATE jobs_delivery_promise SET state = %s, settled_at = %s, "
    f"result = %s{cast}, worker_id = COALESCE(%s, worker_id) WHERE id = %s AND {_OPEN[vendor]}"
    for vendor, cast in (("postgresql", "::jsonb"), ("sqlite", ""))
}
_CLAIM = {
    vendor: "UPDATE jobs_delivery_promise SET worker_id = %s WHERE id = %s "
    f"AND function = 'execute' AND {_UNCLAIMED[vendor]} AND {_OPEN[vendor]}"
    for vendor in _OPEN
}


def settle(
    promise_id: str, state: str, *, now_ms: int, result: Any = None, worker_id: str | None = None
) -> bool:
    """Settle a promise once; a second settlement changes nothing.

    A claimed promise that timed out while its task waited in the broker (a late
    delivery, see `claim`) is settled too: the record then says what really happened.
    """
    _, count = _send_settle(promise_id, state, now_ms, result, worker_id, wait=True)
    return count == 1


def settle_with_transaction(
    promise_id: str, state: str, *, now_ms: int, result: Any = None, worker_id: str | None = None
) -> None:
    """`settle` whose outcome the caller does not read: inside `pipelined()` it travels
    with the commit instead of costing a round trip of its own."""
    _send_settle(promise_id, state, now_ms, result, worker_id, wait=False)


def _send_settle(
    promise_id: str, state: str, now_ms: int, result: Any, worker_id: str | None, *, wait: bool
) -> tuple[list[tuple[Any, ...]], int]:
    assert state in TERMINAL_STATES
    return prepared(
        _SETTLE[connection.vendor],  # every attempt settles one
        [state, now_ms, None if result is None else json.dumps(result), worker_id, promise_id],
        wait=wait,
    )


def claim(promise_id: str, worker_id: str) -> bool:
    """Claim an execute promise for one worker; a duplicate delivery loses.

    A promise whose timeout passed while its task waited in the broker (its role was down
    or backlogged) may still be claimed: the worker then leases only the exact attempt the
    promise names, so a late delivery either runs the job's next attempt or finds it
    taken. This is what lets a queue drain on its own after a long outage.
    """
    return prepared(_CLAIM[connection.vendor], [worker_id, promise_id])[1] == 1


def send_claim(promise_id: str, worker_id: str) -> Callable[[], bool]:
    """`claim`, sent without waiting for its outcome inside `pipelined()` on PostgreSQL:
    the outcome arrives with the next statement whose result is read (the stream lock of
    the attempt's begin), and the returned function tells it then. Elsewhere the claim
    runs at once."""
    outcome = sent(_CLAIM[connection.vendor], [worker_id, promise_id])
    return lambda: outcome()[1] == 1


# The claim of a begin that does not wait for it (`send_claim_held`): refused, it divides
# by zero, and the transaction fails as it commits (`receipts.db.AssumptionRefused`).
_CLAIM_HELD_PG = f"WITH c AS ({_CLAIM['postgresql']} RETURNING 1) SELECT 1 / count(*) FROM c"


def send_claim_held(promise_id: str, worker_id: str) -> None:
    """PostgreSQL, inside `pipelined()`: the claim, sent without waiting; a refused claim
    fails the transaction when the pipeline syncs, so nothing decided after it is kept."""
    prepared(_CLAIM_HELD_PG, [worker_id, promise_id], wait=False)


def read_execute(promise_id: str) -> tuple[str, int, str, str] | None:
    """(job id, attempt, target group, dispatch key) of an execute promise."""
    row = (
        DeliveryPromise.objects.filter(pk=promise_id, function="execute")
        .values_list("job_id", "attempt", "target_group", "dispatch_key")
        .first()
    )
    if row is None or row[1] is None:
        return None
    return row[0], int(row[1]), row[2], row[3]


def pending_for_job(job_id: str, *, now_ms: int) -> list[PromiseView]:
    rows = DeliveryPromise.objects.filter(job_id=job_id, state="pending", timeout_at__gt=now_ms)
    return [view(r, now_ms) for r in rows.order_by("-created_at")]


def for_job(job_id: str, *, now_ms: int, limit: int = 100) -> list[PromiseView]:
    rows = DeliveryPromise.objects.filter(job_id=job_id).order_by("-created_at")[:limit]
    return [view(r, now_ms) for r in rows]


def jobs_with_pending(job_ids: list[str], *, now_ms: int) -> set[str]:
    rows = DeliveryPromise.objects.filter(
        job_id__in=job_ids, state="pending", timeout_at__gt=now_ms
    )
    return set(rows.values_list("job_id", flat=True))
