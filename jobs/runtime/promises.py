"""Delivery promises (D-1): create, read and settle. A pending promise past its timeout
counts as `timedout` (terminal) wherever it is read.

The owner of `jobs_delivery_promise`: its statements are named in `promise_sql`, and
other modules reach the table through the verbs here (the broker's take and the
driver's one statement send `promise_sql`'s text on their own connection or inside
their own statement). Must not decide delivery: that is the driver's and dispatch's."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from django.db import connection, transaction
from django.db.models import CharField, Exists, Q, Value
from django.db.models.functions import Concat

from jobs import promise_sql as sql
from jobs.core import flat_wire
from jobs.core.names import RECOVERY_PART
from jobs.core.scheduling import take_order
from jobs.models import DeliveryPromise
from jobs.timing_config import current_timing
from receipts.db import gathering, prepared, sent

TERMINAL_STATES = ("resolved", "rejected", "canceled", "timedout")


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
        return flat_wire.to_wire(self)


def _view(columns: Sequence[Any], now_ms: int) -> PromiseView:
    """A promise from its columns in PromiseView's order, its state as of `now_ms`."""
    values = list(columns)  # (no dataclasses.replace: the driver reads one per job it takes)
    if values[6] == "pending" and values[7] <= now_ms:  # state, timeout_at
        values[6] = "timedout"
    return PromiseView(*values)


def view(row: DeliveryPromise, now_ms: int) -> PromiseView:
    return _view([getattr(row, f.name) for f in fields(PromiseView)], now_ms)


def get(promise_id: str, *, now_ms: int) -> PromiseView | None:
    row = DeliveryPromise.objects.filter(pk=promise_id).first()
    return view(row, now_ms) if row else None


_SQLITE_IDS_PER_READ = 500


def get_with_jobs(promise_ids: list[str], *, now_ms: int) -> dict[str, tuple[PromiseView, Any]]:
    """{promise id: (its view, its job's read-model `state` as stored, None without a
    row)} for the promises that exist."""
    if connection.vendor == "postgresql":
        rows = prepared(sql.WITH_JOBS + "= ANY(%s)", [list(promise_ids)])[0]
    else:
        rows = []
        for start in range(0, len(promise_ids), _SQLITE_IDS_PER_READ):
            part = promise_ids[start : start + _SQLITE_IDS_PER_READ]
            marks = ", ".join(["%s"] * len(part))
            rows += prepared(sql.WITH_JOBS + f"IN ({marks})", part)[0]
    found = {}
    for row in rows:
        result = json.loads(row[11]) if isinstance(row[11], str | bytes) else row[11]
        view = _view((*row[:11], result), now_ms)
        found[view.id] = (view, row[12])
    return found


@dataclass(frozen=True)
class NewPromise:
    promise_id: str
    function: str
    job_id: str
    attempt: int | None
    target_group: str
    dispatch_key: str
    timeout_ms: int  # from when it becomes deliverable: now, or `due_at`
    priority: int = 0  # G-4: its job's
    due_at: int | None = None  # G-3: opened scheduled, released by the due loop at this time


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
    priority: int = 0,
    due_at: int | None = None,
) -> bool:
    """Insert a pending promise; False when the id already exists (someone else won).

    ON CONFLICT instead of catching IntegrityError: no savepoint, and a lost race does not
    poison the caller's transaction.
    """
    return bool(
        create_many(
            [
                NewPromise(
                    promise_id,
                    function,
                    job_id,
                    attempt,
                    target_group,
                    dispatch_key,
                    timeout_ms,
                    priority,
                    due_at,
                )
            ],
            now_ms=now_ms,
        )
    )


def _insert_row(p: NewPromise, now_ms: int) -> dict[str, Any]:
    start = now_ms if p.due_at is None else p.due_at  # when it becomes deliverable
    return {
        "i": p.promise_id,
        "f": p.function,
        "j": p.job_id,
        "a": p.attempt,
        "g": p.target_group,
        "k": p.dispatch_key,
        "t": start + p.timeout_ms,
        "o": take_order(start, p.priority, current_timing().priority_aging_ms),
        "d": p.due_at,
    }


def create_many(new: list[NewPromise], *, now_ms: int) -> set[str]:
    """Insert pending promises in one statement (on PostgreSQL one prepared statement for
    any number, the rows as one JSON parameter); the ids that were new (the others
    existed: someone else won)."""
    if not new:
        return set()
    if connection.vendor == "postgresql":
        values = [_insert_row(p, now_ms) for p in new]
        found, _ = prepared(sql.INSERT_JSON_PG, [now_ms, now_ms, json.dumps(values)])
        return {row[0] for row in found}
    params: list[Any] = []
    for p in new:
        row = _insert_row(p, now_ms)
        params += [
            *(row[key] for key in ("i", "f", "j", "a", "g", "k", "t")),
            now_ms,
            now_ms,
            row["o"],
            row["d"],
        ]
    rows, _ = prepared(sql.insert_values(len(new)), params)
    return {row[0] for row in rows}


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
        sql.OPEN_AND_SETTLE_PG, [now_ms, now_ms, values, now_ms, mapping, mapping, list(executes)]
    )
    return lambda: {row[0] for row in outcome()[0]}


def settle_many(settlements: list[tuple[str, Any]], state: str, *, now_ms: int) -> None:
    """Settle several promises (id, result) the same way: one statement on PostgreSQL (the
    rows as one JSON parameter, prepared), executemany on SQLite."""
    if not settlements:
        return
    assert state in TERMINAL_STATES
    if connection.vendor == "postgresql":
        ids, results = [pid for pid, _ in settlements], dict(settlements)
        prepared(sql.SETTLE_MANY_PG, [state, now_ms, json.dumps(results), ids], wait=False)
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            sql.SETTLE_ONE_SQLITE,
            [[state, now_ms, json.dumps(result), pid] for pid, result in settlements],
        )


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
        sql.SETTLE[connection.vendor],  # every attempt settles one
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
    return prepared(sql.CLAIM[connection.vendor], [worker_id, promise_id])[1] == 1


def send_claim(promise_id: str, worker_id: str) -> Callable[[], bool]:
    """`claim`, sent without waiting for its outcome inside `pipelined()` on PostgreSQL:
    the outcome arrives with the next statement whose result is read (the stream lock of
    the attempt's begin), and the returned function tells it then. Elsewhere the claim
    runs at once."""
    outcome = sent(sql.CLAIM[connection.vendor], [worker_id, promise_id])
    return lambda: outcome()[1] == 1


def send_claim_held(promise_id: str, worker_id: str) -> None:
    """PostgreSQL, inside `pipelined()` or `one_statement()`: the claim, sent without
    waiting; a refused claim fails the transaction when the pipeline syncs (or the one
    statement), so nothing decided after it is kept."""
    gathered = gathering()
    if gathered is not None:
        gathered.require(sql.CLAIM_RETURNING_PG, [worker_id, promise_id])
        return
    prepared(sql.CLAIM_HELD_PG, [worker_id, promise_id], wait=False)


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


def awaiting_delivery(job_id: str, *, now_ms: int) -> list[tuple[str, str, int, int]]:
    """(id, function, created at, timeout at) of a job's pending promises that no limit
    holds, oldest first: the deliveries diagnosis says are on their way."""
    rows = DeliveryPromise.objects.filter(
        job_id=job_id, state="pending", timeout_at__gt=now_ms, held_by__isnull=True
    ).order_by("created_at")
    return list(rows.values_list("id", "function", "created_at", "timeout_at"))


def last_driver_start(job_id: str) -> int | None:
    """When a driver promise of the job was last created (ms), if ever."""
    rows = DeliveryPromise.objects.filter(job_id=job_id, function="driver")
    return rows.order_by("-created_at").values_list("created_at", flat=True).first()


def existing(promise_ids: list[str]) -> set[str]:
    """Which of these promise ids are taken (whatever their state)."""
    return set(DeliveryPromise.objects.filter(pk__in=promise_ids).values_list("pk", flat=True))


def unclaimed_attempts(promise_ids: list[str]) -> list[tuple[str, int | None]]:
    """(job id, attempt) of those of these promises a worker could still claim: pending and
    unclaimed (one past its timeout that the sweep has not marked yet still is)."""
    rows = DeliveryPromise.objects.filter(
        Q(state="pending") | Q(state="timedout", settled_at__isnull=True),
        pk__in=promise_ids,
        worker_id__isnull=True,
    )
    return list(rows.values_list("job_id", "attempt"))


# ---- maintenance: the passes that look for promises by state rather than by id -----------


def no_delivery_under_way(
    job_id: Any, *, now_ms: int, cooldown_ms: int, last_generation: int
) -> list[Any]:
    """ORM conditions on a job (`job_id` an `OuterRef`) for the queued redrive (L-1): no
    pending delivery, no driver started within the cooldown, and its delivery generations
    not used up (no promise of generation `last_generation`)."""
    pending = DeliveryPromise.objects.filter(job_id=job_id, state="pending", timeout_at__gt=now_ms)
    recent = DeliveryPromise.objects.filter(
        job_id=job_id, function="driver", created_at__gt=now_ms - cooldown_ms
    )
    exhausted = DeliveryPromise.objects.filter(
        id=Concat(job_id, Value(f"{RECOVERY_PART}{last_generation}"), output_field=CharField())
    )
    return [~Exists(pending), ~Exists(recent), ~Exists(exhausted)]


def sweep_timed_out(*, now_ms: int, limit: int) -> tuple[int, int]:
    """Mark up to `limit` pending promises past their timeout `timedout` (no settled_at:
    nobody settled them, and a late delivery may still claim one); (found, marked)."""
    ids = list(
        DeliveryPromise.objects.filter(state="pending", timeout_at__lte=now_ms).values_list(
            "id", flat=True
        )[:limit]
    )
    marked = DeliveryPromise.objects.filter(id__in=ids, state="pending").update(state="timedout")
    return len(ids), marked


def take_unclaimed(
    group: str, *, now_ms: int, pushed_before_ms: int, limit: int
) -> list[tuple[Any, ...]]:
    """Inside a transaction: a group's pending, unclaimed promises last pushed before
    `pushed_before_ms` and not yet timed out, marked pushed now (`available_at`), locked
    so replicas skip them: (id, function, job id, attempt, dispatch key), oldest first."""
    rows = list(
        DeliveryPromise.objects.select_for_update(skip_locked=True)
        .filter(
            target_group=group,
            state="pending",
            settled_at__isnull=True,
            worker_id__isnull=True,
            due_at__isnull=True,  # a scheduled promise is pushed when the due loop releases it
            timeout_at__gt=now_ms,  # past it, the queued redrive starts a new delivery
            available_at__lte=pushed_before_ms,
        )
        .order_by("created_at")
        .values_list("id", "function", "job_id", "attempt", "dispatch_key")[:limit]
    )
    DeliveryPromise.objects.filter(id__in=[row[0] for row in rows]).update(available_at=now_ms)
    return rows


def release_due(*, now_ms: int, limit: int) -> list[tuple[Any, ...]]:
    """G-3: up to `limit` scheduled promises whose time came (a delayed job's driver, or an
    execute a rate limit held), earliest first, released into their group's queue
    (deliverable from now on): (id, function, group, job id, attempt, dispatch key). Safe
    in many processes at once: each promise is released by one of them."""
    if connection.vendor == "postgresql":
        rows, _ = prepared(sql.RELEASE_DUE_PG, [now_ms, limit])
        return rows
    with transaction.atomic():
        due = [row[0] for row in prepared(sql.DUE_SQLITE, [now_ms, limit])[0]]
        if not due:
            return []
        return prepared(sql.release_ids_sqlite(len(due)), due)[0]


def count_scheduled(*, now_ms: int, cap: int) -> int:
    """Delayed jobs whose time is still ahead, counted up to cap + 1 (G-3, the dashboard)."""
    with connection.cursor() as cursor:  # a page's read, not the hot path: not prepared
        cursor.execute(sql.COUNT_SCHEDULED, [now_ms, cap + 1])
        return int(cursor.fetchone()[0])
