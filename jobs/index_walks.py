"""Lists and capped counts of jobs that stop early: each walks one index in its order and
stops at its LIMIT, whatever the planner believes about the filters.

A newest-first page, or a count up to a cap, costs a page (or a cap) only on an ordered
index walk. Two plans read a whole filter's range instead, and PostgreSQL picks them
whenever it underestimates the matching rows: a bitmap scan (it cannot stop at a LIMIT:
the range is read, then the rows sorted) and, with two filters, a BitmapAnd of both
indexes. It underestimates them before a table is first analyzed (a default of 0.5 % per
equality: a backlog enqueued in a burst, on a server whose autovacuum has not yet run)
and for any pair of filters, which it takes for independent (a kind is one agent's).
Measured on 100k queued jobs never analyzed: `?agentId=factory&kind=factory.run`
105 ms (a BitmapAnd of 34k and 25k entries, 11k rows sorted), `?status=queued` 281 ms.

So a filtered list is shaped to have one plan:
- one filter leads: the first of LEADS the filters name. It is written as a range
  (`column >= v AND column <= v`) and the page is ordered by (column, -created_at, -id):
  an equality would let the planner drop the constant column from the order and walk
  `job_newest` instead (which for `status=completed` first reads every newer active job);
  the range keeps the order only the column's own `(column, -created_at, -id)` index gives;
- every other filter is tested on the rows the walk reads (`COALESCE(column = v, false)`):
  no index serves it, so no BitmapAnd, and the planner does not take it for selective;
- a session's jobs, which have no newest-first index, are gathered from
  `job_session_status` and sorted (a chat session holds a handful); the page's order is
  then one no index gives, so no plan walks every job looking for them;
- on PostgreSQL, `walking()` turns bitmap scans and sorts off for its statements (SET
  LOCAL inside its transaction): a capped count walks too (its LIMIT of a thousand can
  exceed the planner's guess of the matches, which makes a sort of them look cheaper),
  and a list led by no filter walks `job_newest` rather than sort a parallel scan of the
  table. A session's page sorts all the same (every plan of it needs one). JIT and
  parallel workers are off too (WALK below).

Filters on lane and routed group alone (no index of their own) walk `job_newest`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, ExpressionWrapper, F, Q, QuerySet, Value
from django.db.models.functions import Coalesce

from jobs.models import Job

# The columns with a newest-first index `(column, -created_at, -id)`, in the order one is
# chosen to lead: an objective's jobs are few; a status is never skipped past (a settled
# status led by an agent's index would first read all of the agent's active jobs); then
# the columns of more values before those of fewer.
LEADS = ("objective_id", "status", "organization_id", "agent_id", "kind")
GATHERED = "session_key"  # few rows a value, no newest-first index: gathered, then sorted
NEWEST = ("-created_at", "-id")


def tested(column: str, value: Any) -> Coalesce:
    """`COALESCE(column = value, false)`: true on the rows it keeps, never served by an index
    and not taken by the planner for selective."""
    equal = ExpressionWrapper(Q(**{column: value}), output_field=BooleanField())
    return Coalesce(equal, Value(False), output_field=BooleanField())


def lead_of(columns: Iterable[str]) -> str | None:
    names = set(columns)
    if GATHERED in names and "objective_id" not in names:
        return GATHERED
    return next((column for column in LEADS if column in names), None)


def narrowed(rows: QuerySet[Job], conditions: Mapping[str, Any]) -> QuerySet[Job]:
    """`rows` with each column equal to its value, newest first, in the shape above."""
    lead = lead_of(conditions)
    for column, value in conditions.items():
        if column == lead == GATHERED:
            rows = rows.filter(**{column: value})
        elif column == lead:
            rows = rows.filter(**{f"{column}__gte": value, f"{column}__lte": value})
        else:
            rows = rows.filter(tested(column, value))
    if lead == GATHERED:  # `created_at + 0`: an order no index gives
        return rows.order_by((F("created_at") + 0).desc(), F("id").desc())
    return rows.order_by(*((lead,) if lead else ()), *NEWEST)


# Planner settings for the statements of a walk, and for a search's few rows (bitmaps of
# its indexes, then sorted): no JIT (a disabled node's 1e10 cost, or a never-analyzed
# table's guesses, put a 0.1 ms read past `jit_above_cost`: 50-90 ms compiling) and no
# parallel workers (starting two cost 10 ms of a 0.1 ms search on 1M jobs never analyzed).
WALK = {
    "enable_bitmapscan": "off",
    "enable_sort": "off",
    "jit": "off",
    "max_parallel_workers_per_gather": "0",
}
GATHER = {"jit": "off", "max_parallel_workers_per_gather": "0"}


def _set(names: Iterable[str]) -> str:
    return "SELECT " + ", ".join(f"set_config('{name}', %s, true)" for name in names)


def _show(names: Iterable[str]) -> str:
    return "SELECT " + ", ".join(f"current_setting('{name}')" for name in names)


@contextmanager
def walking(settings: Mapping[str, str] = WALK) -> Iterator[None]:
    """Run the statements inside with `settings` (PostgreSQL; nothing on SQLite): by
    default bitmap scans, sorts, JIT and parallel workers off.

    One statement more: SET LOCAL (`set_config(..., true)`) in a transaction of its own,
    or, inside a caller's transaction, set and then put back as it was on the way out."""
    if connection.vendor != "postgresql":
        yield
        return
    names, values = list(settings), list(settings.values())
    if not connection.in_atomic_block:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_set(names), values)
            yield  # the commit ends the settings
        return
    with connection.cursor() as cursor:
        cursor.execute(_show(names))
        before = list(cursor.fetchone())
        cursor.execute(_set(names), values)
    yield  # (an error: the caller's rollback undoes the settings)
    with connection.cursor() as cursor:
        cursor.execute(_set(names), before)
