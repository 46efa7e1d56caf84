"""Every statement on `jobs_delivery_promise`, each named once with its purpose.

The table's owner is `jobs.runtime.promises`: it runs these, and so do the few callers
that must send one on a connection or inside a statement of their own (the database
broker's take on its listening connection, the driver's one-statement decision, the
enqueue's joined insert, the limits' hold and wake in a begin's or a settlement's
transaction). All of them take their text from here; every INSERT is built
by `insert`. Strings and builders only: nothing here runs a statement.

Open (unsettled): pending, or marked timed out by the sweep (which sets no settled_at).
Statements that find a promise by id say "open" in a form no index can serve: a plan
prepared while the table's statistics looked empty (after a TRUNCATE, on a new install, in
a burst before autovacuum analyzes) otherwise reads every pending promise through the
state or deliverable index and filters for the id, once per claim and per settlement.
"""

from __future__ import annotations

from functools import cache

TABLE = "jobs_delivery_promise"
# The order every INSERT's rows give their values in.
COLUMNS = (
    "id",
    "function",
    "job_id",
    "attempt",
    "target_group",
    "dispatch_key",
    "state",
    "timeout_at",
    "created_at",
    "available_at",
    "ordered_at",
    "due_at",
)


def open_pg(alias: str = "") -> str:
    """The open condition on PostgreSQL, of the promise row `alias` names ("d." in a join)."""
    return (
        f"num_nulls({alias}settled_at) = 1 "
        f"AND {alias}state NOT IN ('resolved', 'rejected', 'canceled')"
    )


OPEN = {
    "postgresql": open_pg(),
    "sqlite": "settled_at IS NULL AND state IN ('pending', 'timedout')",
}
UNCLAIMED = {"postgresql": "num_nulls(worker_id) = 1", "sqlite": "worker_id IS NULL"}


def insert(rows: str, *, skip_taken: bool = True) -> str:
    """The one INSERT of promises: `rows` is a VALUES list or a SELECT giving `COLUMNS` in
    order. `skip_taken`: an id that exists is skipped (no savepoint, and a lost race does
    not poison the caller's transaction) and the new ids are returned; without it a taken
    id fails the statement."""
    tail = " ON CONFLICT (id) DO NOTHING RETURNING id" if skip_taken else ""
    return f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) {rows}{tail}"


# ---- reading ---------------------------------------------------------------------------

# get_with_jobs: promises and their jobs' read-model state, completed by `= ANY(%s)` or
# an `IN (...)` list (no ORM: a driver pass runs it for every job).
WITH_JOBS = (
    "SELECT p.id, p.function, p.job_id, p.attempt, p.target_group, p.dispatch_key, p.state, "
    f"p.timeout_at, p.created_at, p.settled_at, p.worker_id, p.result, j.state "
    f"FROM {TABLE} p LEFT JOIN jobs_job j ON j.id = p.job_id WHERE p.id "
)

# ---- opening ---------------------------------------------------------------------------

# create_many (PostgreSQL): pending promises from one JSON parameter, any number of rows
# under one prepared statement.
INSERT_JSON_PG = insert(
    "SELECT v.i, v.f, v.j, v.a, v.g, v.k, 'pending', v.t, %s, %s, v.o, v.d "
    "FROM jsonb_to_recordset(%s::jsonb) AS v(i text, f text, j text, a int, g text, k text, "
    "t bigint, o bigint, d bigint)"
)


@cache
def insert_values(count: int) -> str:
    """create_many (SQLite): `count` pending promises, eleven parameters a row."""
    return insert(
        "VALUES " + ", ".join(["(%s, %s, %s, %s, %s, %s, 'pending', %s, %s, %s, %s, %s)"] * count)
    )


@cache
def insert_joined_drivers(source: str, wake_channel: str | None) -> str:
    """The enqueue's statement opens its new jobs' driver promises: each under its job id,
    from `source` (rows of job id, timeout, take order and due time: NULL unless the job
    is delayed), then a parameter of now. A taken id fails the statement (the enqueue then
    takes its careful path). `wake_channel`: notified in the same statement (the database
    broker's driver channel)."""
    wake = f", (SELECT pg_notify('{wake_channel}', 'driver')) AS wake" if wake_channel else ""
    return insert(
        "SELECT p.i, 'driver', p.i, NULL, 'driver', p.i, 'pending', p.t::bigint, n.n, n.n, "
        "p.o::bigint, p.d::bigint "
        f"FROM {source} AS p(i, t, o, d), (SELECT %b::text::bigint AS n) AS n{wake}",
        skip_taken=False,
    )


# A driver pass's whole write (PostgreSQL): the execute promises, and the driver promises
# settled each with whether its execute promise was new (`SETTLE_MANY_PG`'s result shape).
OPEN_AND_SETTLE_PG = (
    f"WITH opened AS ({INSERT_JSON_PG}), "
    f"settled AS (UPDATE {TABLE} SET state = 'resolved', settled_at = %s, "
    "result = jsonb_build_object('status', CASE WHEN (%s::jsonb ->> id) IN "
    "(SELECT id FROM opened) THEN 'dispatched' ELSE 'already_dispatched' END, "
    "'execute', %s::jsonb ->> id) "
    f"WHERE id = ANY(%s) AND {OPEN['postgresql']}) "
    "SELECT id FROM opened"
)

# ---- settling and claiming ---------------------------------------------------------------

# settle_many (PostgreSQL): many promises the same way, their results one JSON parameter.
SETTLE_MANY_PG = (
    f"UPDATE {TABLE} SET state = %s, settled_at = %s, result = (%s::jsonb) -> id "
    f"WHERE id = ANY(%s) AND {OPEN['postgresql']}"
)
# settle_many (SQLite, executemany): one promise.
SETTLE_ONE_SQLITE = (
    f"UPDATE {TABLE} SET state = %s, settled_at = %s, result = %s "
    f"WHERE id = %s AND {OPEN['sqlite']}"
)
# settle: one promise, once, naming the worker that settled it.
SETTLE = {
    vendor: f"UPDATE {TABLE} SET state = %s, settled_at = %s, "
    f"result = %s{cast}, worker_id = COALESCE(%s, worker_id) WHERE id = %s AND {OPEN[vendor]}"
    for vendor, cast in (("postgresql", "::jsonb"), ("sqlite", ""))
}
# claim: an open, unclaimed execute promise for one worker (a duplicate delivery loses).
CLAIM = {
    vendor: f"UPDATE {TABLE} SET worker_id = %s WHERE id = %s "
    f"AND function = 'execute' AND {UNCLAIMED[vendor]} AND {OPEN[vendor]}"
    for vendor in OPEN
}
# send_claim_held (PostgreSQL): the claim of a begin that does not wait for it; refused,
# it divides by zero, and the transaction fails as it commits (`receipts.db.
# AssumptionRefused`). An UPDATE cannot sit in `refused_unless_found`'s subquery: a CTE.
CLAIM_RETURNING_PG = f"{CLAIM['postgresql']} RETURNING 1"
CLAIM_HELD_PG = f"WITH c AS ({CLAIM_RETURNING_PG}) SELECT 1 / count(*) FROM c"
# (In a begin sent as one statement, `CLAIM_RETURNING_PG` is that statement's first
# requirement: `receipts.db.one_statement`.)

# ---- the database broker -------------------------------------------------------------------

# The deliverable index's own condition (a scheduled promise is not in it, G-3) and the
# visibility timeout, which no index holds.
_DELIVERABLE = (
    "target_group = %s AND settled_at IS NULL AND worker_id IS NULL AND due_at IS NULL "
    "AND available_at <= %s"
)
# A cluster's take (PostgreSQL): its deliverable promises first in take order (G-4:
# priority, aged), hidden for the visibility window; replicas skip each other's rows.
_TAKE = (
    f"UPDATE {TABLE} SET available_at = %s WHERE id IN ("
    f"SELECT id FROM {TABLE} WHERE {_DELIVERABLE}{{paused}} "
    "ORDER BY ordered_at LIMIT %s FOR UPDATE SKIP LOCKED) "
    "RETURNING id, job_id, attempt, dispatch_key, available_at"
)
# A paused worker group's cluster takes nothing (`jobs.queues`): the group's row, read by
# key once a statement (it names no column of the promise), is the whole cost.
_UNPAUSED = " AND NOT EXISTS (SELECT 1 FROM jobs_queue q WHERE q.name = %s AND q.paused)"
# The driver's take (the driver hop runs whatever group is paused): visible until, the
# group, now, limit.
TAKE_PG = _TAKE.format(paused="")
# A worker cluster's take: each promise with its job's state, which its worker begins on;
# visible until, the group, now, the group again (its pause), limit.
TAKE_WITH_JOB_PG = (
    _TAKE.format(paused=_UNPAUSED)
    + f", (SELECT j.state FROM jobs_job j WHERE j.id = {TABLE}.job_id)"
)
# A cluster's deliverable promises (the queue size).
PEEK = f"SELECT id FROM {TABLE} WHERE {_DELIVERABLE} ORDER BY ordered_at LIMIT %s"
# SQLite's look before it takes: PEEK, and nothing for a paused worker group (group, now,
# the group again, limit).
PEEK_TAKE = f"SELECT id FROM {TABLE} WHERE {_DELIVERABLE}{_UNPAUSED} ORDER BY ordered_at LIMIT %s"


@cache
def take_ids_sqlite(count: int) -> str:
    """A take of `count` promises PEEK found (SQLite), if still deliverable."""
    marks = ", ".join(["%s"] * count)
    return (
        f"UPDATE {TABLE} SET available_at = %s WHERE id IN ({marks}) "
        "AND settled_at IS NULL AND worker_id IS NULL AND due_at IS NULL "
        "AND available_at <= %s RETURNING id, job_id, attempt, dispatch_key, available_at"
    )


# ---- scheduled promises (G-3) --------------------------------------------------------------

_SCHEDULED = "due_at IS NOT NULL AND settled_at IS NULL"  # the scheduled index's condition
# The due loop (PostgreSQL): scheduled promises whose time came, earliest first, released
# into the deliverable index; replicas skip each other's rows. Only the scheduled index
# is read, from its first entry to the first one still ahead.
_RELEASED = "RETURNING id, function, target_group, job_id, attempt, dispatch_key"
RELEASE_DUE_PG = (
    f"UPDATE {TABLE} SET due_at = NULL, held_by = NULL WHERE id IN ("
    f"SELECT id FROM {TABLE} WHERE {_SCHEDULED} AND due_at <= %s "
    f"ORDER BY due_at LIMIT %s FOR UPDATE SKIP LOCKED) {_RELEASED}"
)
# The due loop (SQLite, whose writers are serialized): the ids whose time came...
DUE_SQLITE = f"SELECT id FROM {TABLE} WHERE {_SCHEDULED} AND due_at <= %s ORDER BY due_at LIMIT %s"


@cache
def release_ids_sqlite(count: int) -> str:
    """...and their release, of those still scheduled."""
    marks = ", ".join(["%s"] * count)
    return (
        f"UPDATE {TABLE} SET due_at = NULL, held_by = NULL "
        f"WHERE id IN ({marks}) AND {_SCHEDULED} {_RELEASED}"
    )


# ---- deliveries held by a limit (jobs.limits) ---------------------------------------------

# A begin refused by a limit: its claim undone, the promise scheduled (`due_at`: the
# rate's next room, or `UNTIL_WOKEN` for a cap) with its timeout moved as far, so the
# sweep and the queued redrive leave it alone; `held_by` names the limit (held by, due,
# due again, now, id).
HOLD = (
    f"UPDATE {TABLE} SET worker_id = NULL, held_by = %s, due_at = %s, "
    "timeout_at = %s + (timeout_at - %s) WHERE id = %s"
)
# A freed slot of a cap's key wakes its oldest held delivery whose job still waits (a
# canceled job's would waste it): deliverable at once, its timeout moved back (now, now,
# held by, limit). The woken promise's fields, to send its task.
WAKE = {
    vendor: f"UPDATE {TABLE} SET due_at = NULL, held_by = NULL, available_at = %s, "
    f"timeout_at = %s + (timeout_at - due_at) WHERE id IN ("
    f"SELECT p.id FROM {TABLE} p JOIN jobs_job j ON j.id = p.job_id "
    "WHERE p.held_by = %s AND p.settled_at IS NULL AND j.status = 'queued' "
    f"ORDER BY p.ordered_at LIMIT %s{lock}) {_RELEASED}"
    for vendor, lock in (("postgresql", " FOR UPDATE OF p SKIP LOCKED"), ("sqlite", ""))
}
# Keys with held deliveries, for the keeper's pass (a raised cap, a removed limit).
HELD_KEYS = (
    f"SELECT DISTINCT held_by FROM {TABLE} WHERE held_by LIKE 'cap:%%' "
    "AND settled_at IS NULL LIMIT %s"
)
# Held deliveries of queued jobs (a canceled job's stays held, unsettled, until retention)
# by holder, or by holders in a range (a cap's keys), up to a cap (the dashboard's counts).
_HELD_QUEUED = (
    f"SELECT COUNT(*) FROM (SELECT 1 FROM {TABLE} p JOIN jobs_job j ON j.id = p.job_id "
    "WHERE {holders} AND p.settled_at IS NULL AND j.status = 'queued' LIMIT %s) AS h"
)
COUNT_HELD = _HELD_QUEUED.format(holders="p.held_by = %s")
COUNT_HELD_RANGE = _HELD_QUEUED.format(
    holders="(p.held_by = %s OR (p.held_by >= %s AND p.held_by < %s))"
)
# A job's held delivery: what holds it and until when (diagnosis).
HELD_FOR_JOB = (
    f"SELECT held_by, due_at FROM {TABLE} WHERE job_id = %s AND held_by IS NOT NULL "
    "AND settled_at IS NULL ORDER BY created_at DESC LIMIT 1"
)


# Delayed jobs still waiting (the dashboard), counted up to a cap on the scheduled index;
# a canceled job's promise waits for its time too, so each is checked on its job's row.
COUNT_SCHEDULED = (
    f"SELECT COUNT(*) FROM (SELECT 1 FROM {TABLE} p JOIN jobs_job j ON j.id = p.job_id "
    "WHERE p.due_at IS NOT NULL AND p.settled_at IS NULL AND p.due_at > %s "
    "AND p.held_by IS NULL "
    "AND j.status = 'queued' LIMIT %s) AS c"
)
