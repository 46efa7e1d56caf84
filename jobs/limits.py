"""Rate limits and concurrency caps, enforced as an attempt begins (the rules:
`jobs.core.limits`).

- **Caps.** A job's cap key counts its running jobs (`jobs_job.limit_key`, written by the
  projector from the lease receipt, which records the key). The begin counts them under a
  transaction lock of the key (PostgreSQL; SQLite's writers are serialized already) and,
  at the cap, holds its delivery (`cap:<key>`). A running job of the key that stops
  running wakes the oldest held delivery in the same transaction, under the same lock: so
  either the begin sees the slot freed, or the stop sees the held delivery.
- **Rates.** A ring of N start times per limit (`jobs_rate_slot`); a start takes the slot
  whose time left the window. Refused, the delivery is held until the window has room,
  spaced one start's share of the period after the previous held one, so a backlog comes
  back at the rate it can start rather than all at once.

A held delivery keeps its job queued; diagnosis names what holds it and the dashboard
shows each limit's use. The keeper's pass wakes what a raised cap or a removed limit
frees (no stop happens for those).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from django.conf import settings
from django.db import connection

from jobs import promise_sql
from jobs.core import limits as rules
from jobs.core.contracts import routed_group
from jobs.core.limits import HELD_CAP, HELD_RATE, UNTIL_WOKEN_MS, Governing, Limit
from jobs.core.state import JobState
from receipts.db import prepared

RUNNING: Final = ("leased", "running")  # a job in one of these holds a slot of its key
KEEPER_KEYS: Final = 200  # held keys the keeper looks at per pass
_RUNNING_SQL = (
    "SELECT COUNT(*) FROM jobs_job WHERE limit_key = %s AND status IN ('leased', 'running')"
)
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"


@dataclass(frozen=True)
class Hold:
    """A begin refused by a limit: what holds the delivery, and until when."""

    held_by: str
    due_at: int


@dataclass(frozen=True)
class KindAdapter:
    """How a kind's payload names its task and reads an argument (Django's tasks)."""

    name: Callable[[dict[str, Any]], str | None]
    argument: Callable[[dict[str, Any], str], Any]


_in_code: list[Limit] = []
adapters: dict[str, KindAdapter] = {}
# Senders of woken deliveries' tasks (the runtime registers one): rows of (id, function,
# group, job id, attempt, dispatch key), in the transaction that woke them.
on_woken: list[Callable[[Sequence[tuple[Any, ...]]], None]] = []


def register_limit(limit: Limit) -> Limit:
    """Declare a limit in code (beside RECEIPT_LIMITS); a name declared twice is refused."""
    if any(known.name == limit.name for known in declared()):
        raise rules.LimitError(f"limit {limit.name!r} is declared twice")
    _in_code.append(limit)
    return limit


def forget(name: str) -> None:
    """Tests only: drop a limit declared in code."""
    _in_code[:] = [limit for limit in _in_code if limit.name != name]


def declared() -> tuple[Limit, ...]:
    return (*settings.RECEIPT.limits, *_in_code)


def by_name(name: str) -> Limit | None:
    return next((limit for limit in declared() if limit.name == name), None)


def governing(job: JobState) -> Governing:
    """The limits over `job`'s next start (nothing to read when none is declared)."""
    limits = declared()
    if not limits:
        return rules.NOTHING
    payload = job.payload if isinstance(job.payload, dict) else {}
    adapter = adapters.get(job.kind or "")
    task = adapter.name(payload) if adapter is not None else None

    def argument(path: str) -> Any:
        if adapter is not None:
            return adapter.argument(payload, path)
        return rules.payload_value(payload, path)

    group = routed_group(job.agent_id, job.kind, job.queue)
    return rules.governing(limits, kind=job.kind or "", task=task, group=group, argument=argument)


# ---- the begin: take a start, or hold -----------------------------------------------------


def acquire(found: Governing, *, now_ms: int) -> str | None | Hold:
    """In the begin's transaction: the cap key the attempt starts under (None without a
    cap), or the Hold that refuses it. A refused rate gives back what this begin took."""
    if found.cap is not None:
        assert found.cap_key is not None and found.cap.concurrency is not None
        _lock(found.cap_key)
        if running(found.cap_key) >= found.cap.concurrency:
            return Hold(rules.held_by(HELD_CAP, found.cap.name, found.cap_key), UNTIL_WOKEN_MS)
    taken: list[tuple[int, int]] = []
    for limit in found.rates:
        slot = _take_slot(limit, now_ms)
        if isinstance(slot, Hold):
            for slot_id, old in taken:
                prepared(_SET_SLOT, [old, slot_id])
            return slot
        taken.append(slot)
    return found.cap_key


def hold(promise_id: str, held: Hold, *, now_ms: int) -> None:
    """The refused begin's delivery: unclaimed and held (same transaction)."""
    prepared(promise_sql.HOLD, [held.held_by, held.due_at, held.due_at, now_ms, promise_id])


def running(key: str) -> int:
    rows, _ = prepared(_RUNNING_SQL, [key])
    return int(rows[0][0])


def _lock(key: str) -> None:
    if connection.vendor == "postgresql":  # SQLite: the writer's lock serializes already
        prepared(_LOCK, [f"receipt.limit:{key}"])


_FREE_SLOT = (
    "SELECT id, started_at FROM jobs_rate_slot WHERE limit_name = %s AND slot >= 0 "
    "AND slot < %s AND started_at <= %s ORDER BY started_at LIMIT 1"
)
# PostgreSQL: the oldest slot outside the window, taken in one statement; concurrent
# begins skip each other's. (id, its previous time)
_TAKE_PG = (
    "UPDATE jobs_rate_slot SET started_at = %s FROM ("
    f"{_FREE_SLOT} FOR UPDATE SKIP LOCKED) AS o(id, old) "
    "WHERE jobs_rate_slot.id = o.id RETURNING jobs_rate_slot.id, o.old"
)
_SET_SLOT = "UPDATE jobs_rate_slot SET started_at = %s WHERE id = %s"
_ROOM = (
    "SELECT MIN(started_at), COUNT(*) FROM jobs_rate_slot "
    "WHERE limit_name = %s AND slot >= 0 AND slot < %s"
)
# The ring's rows, from slot -1 (the held deliveries' cursor) to N - 1, made on first use
# (and after a rate is raised).
_ENSURE = (
    "WITH RECURSIVE g(n) AS (SELECT -1 UNION ALL SELECT n + 1 FROM g WHERE n + 1 < %s) "
    "INSERT INTO jobs_rate_slot (limit_name, slot, started_at) SELECT %s, n, 0 FROM g "
    "WHERE 1 = 1 ON CONFLICT (limit_name, slot) DO NOTHING"
)
_CURSOR = {
    vendor: "UPDATE jobs_rate_slot SET started_at = "
    f"{larger}(started_at + %s, %s) WHERE limit_name = %s AND slot = -1 RETURNING started_at"
    for vendor, larger in (("postgresql", "GREATEST"), ("sqlite", "MAX"))
}


def _take_slot(limit: Limit, now_ms: int) -> tuple[int, int] | Hold:
    """A start of `limit`'s window: (slot id, its previous time), or the Hold until room."""
    assert limit.rate is not None
    taken = _take(limit, now_ms)
    if taken is not None:
        return taken
    oldest, count = prepared(_ROOM, [limit.name, limit.rate])[0][0]
    if count < limit.rate:  # a new limit, or a raised rate: its ring is made now
        prepared(_ENSURE, [limit.rate, limit.name])
        taken = _take(limit, now_ms)
        if taken is not None:
            return taken
        oldest, _ = prepared(_ROOM, [limit.name, limit.rate])[0][0]
    free_at = int(oldest or 0) + limit.per_ms
    step = max(1, limit.per_ms // limit.rate)
    due = prepared(_CURSOR[connection.vendor], [step, free_at, limit.name])[0][0][0]
    return Hold(rules.held_by(HELD_RATE, limit.name), int(due))


def _take(limit: Limit, now_ms: int) -> tuple[int, int] | None:
    window = [limit.name, limit.rate, now_ms - limit.per_ms]
    if connection.vendor == "postgresql":
        rows, _ = prepared(_TAKE_PG, [now_ms, *window])
    else:  # SQLite: writers are serialized, a look and a write are one step
        rows, _ = prepared(_FREE_SLOT, window)
        if rows:
            prepared(_SET_SLOT, [now_ms, rows[0][0]])
    return (int(rows[0][0]), int(rows[0][1])) if rows else None


# ---- a slot frees: wake ----------------------------------------------------------------------


def released(key: str, *, now_ms: int) -> None:
    """A running job of cap key `key` stopped running (the projector, in that
    transaction): the key's oldest held delivery whose job waits is woken."""
    _lock(key)
    _wake(key, 1, now_ms)


def _wake(key: str, count: int, now_ms: int) -> list[tuple[Any, ...]]:
    held = rules.held_by(HELD_CAP, rules.limit_name(key), key)
    rows, _ = prepared(promise_sql.WAKE[connection.vendor], [now_ms, now_ms, held, count])
    if rows:
        for send in on_woken:
            send(rows)
    return rows


def keep(*, now_ms: int) -> int:
    """The keeper's pass: wake what a raised cap or a removed limit frees, which no stop
    announces. Reads the held deliveries' distinct keys (bounded); returns how many woke."""
    rows, _ = prepared(promise_sql.HELD_KEYS, [KEEPER_KEYS])
    woken = 0
    for (held,) in rows:
        key = held.split(":", 1)[1]
        limit = by_name(rules.limit_name(key))
        if limit is None or limit.concurrency is None:
            woken += len(_wake(key, 500, now_ms))
            continue
        _lock(key)
        free = limit.concurrency - running(key)
        if free > 0:
            woken += len(_wake(key, free, now_ms))
    return woken


# ---- what an operator sees -------------------------------------------------------------------


def held_for(job_id: str) -> tuple[str, int] | None:
    """What holds a queued job's delivery, and until when (None: nothing holds it)."""
    rows, _ = prepared(promise_sql.HELD_FOR_JOB, [job_id])
    return (rows[0][0], int(rows[0][1])) if rows else None


def count_held(held_by: str, *, cap: int) -> int:
    rows, _ = prepared(promise_sql.COUNT_HELD, [held_by, cap + 1])
    return int(rows[0][0])


_KEYS = (
    "SELECT limit_key, COUNT(*) FROM jobs_job WHERE status IN ('leased', 'running') "
    "AND limit_key IS NOT NULL AND (limit_key = %s OR (limit_key >= %s AND limit_key < %s)) "
    "GROUP BY limit_key ORDER BY COUNT(*) DESC, limit_key LIMIT %s"
)
_RECENT = (
    "SELECT COUNT(*) FROM jobs_rate_slot WHERE limit_name = %s AND slot >= 0 AND slot < %s "
    "AND started_at > %s"
)


def usage(limit: Limit, *, now_ms: int, keys: int = 10, cap: int = 1000) -> dict[str, Any]:
    """One limit's use for the dashboard: starts in the current window, the busiest keys
    (running / cap), and how many deliveries each part holds (counted up to `cap`)."""
    shown: dict[str, Any] = {"name": limit.name, "covers": covers_text(limit)}
    if limit.rate is not None:
        recent = prepared(_RECENT, [limit.name, limit.rate, now_ms - limit.per_ms])[0][0][0]
        held = count_held(rules.held_by(HELD_RATE, limit.name), cap=cap)
        shown["rate"] = {"text": limit.rate_text, "used": int(recent), "of": limit.rate}
        shown["rate"]["held"] = held
    if limit.concurrency is not None:
        rows, _ = prepared(_KEYS, [limit.name, f"{limit.name}:", f"{limit.name};", keys])
        busiest = [
            {"key": _value_of(key), "running": int(n), "full": int(n) >= limit.concurrency}
            for key, n in rows
        ]
        held_rows, _ = prepared(
            promise_sql.COUNT_HELD_RANGE,
            [f"cap:{limit.name}", f"cap:{limit.name}:", f"cap:{limit.name};", cap + 1],
        )
        shown["concurrency"] = {
            "of": limit.concurrency,
            "key": limit.key,
            "busiest": busiest,
            "held": int(held_rows[0][0]),
        }
    return shown


def _value_of(key: str) -> str | None:
    return key.split(":", 1)[1] if ":" in key else None


def covers_text(limit: Limit) -> str:
    parts: Iterable[str] = (
        *(f"kind {kind}" for kind in limit.kinds),
        *(f"queue {queue}" for queue in limit.queues),
    )
    return ", ".join(parts)
