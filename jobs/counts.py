"""Bounded counts of the jobs read model for the dashboard, `/metrics` and `/healthz`.

A count here never reads more than its cap + 1 index entries (a LIMIT inside the COUNT),
so its cost has a ceiling however many jobs are stored or queued; a count that reached the
cap is returned as `capped` ("at least this many") and every page shows it so ("1,000+").
Active jobs are counted per (status, lane, routed group) cell on the partial index
`job_active_cells`, per status on `job_status_newest`, and settled jobs only inside a
recent window on `job_status_updated` (these grow with the window's throughput, never with
the stored history, and stop at SETTLED_CAP). Exact counts at any size would need counts kept by
the projector (docs/scaling.md, section 4). This module reads; it never writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection

from jobs import index_walks
from jobs.core.vocabulary import ACTIVE_ORDER, LANES
from jobs.timing_config import current_timing

# Caps, chosen so that a saturated count costs about a millisecond (~0.15 us an entry on
# the 2-core bench VM): 36 cells x 101 + 3 statuses x 1,001 entries at most (12 cells
# more per declared worker group).
CELL_CAP = 100  # active jobs counted per (status, lane, group) cell; more read "100+"
STATUS_CAP = 1_000  # active jobs counted per status; more read "1,000+"
SETTLED_CAP = 10_000  # jobs settled in a recent window counted per status
_ACTIVE_SQL = ", ".join(f"'{s}'" for s in ACTIVE_ORDER)  # the partial index's predicate


@dataclass(frozen=True)
class Count:
    """A count that may have stopped at a cap: `capped` means at least `value`."""

    value: int
    capped: bool = False

    @classmethod
    def of(cls, counted: int, cap: int) -> Count:
        """From a count that stopped at cap + 1."""
        return cls(min(counted, cap), counted > cap)

    def __add__(self, other: Count) -> Count:
        return Count(self.value + other.value, self.capped or other.capped)

    @property
    def shown(self) -> str:
        """For people: 12, 1,000, 1,000+ (at least 1,000)."""
        return f"{self.value:,}+" if self.capped else f"{self.value:,}"


@dataclass(frozen=True)
class ActiveCell:
    status: str
    lane: str
    group: str
    count: Count
    oldest_created_at: int | None  # queued cells only: the cell's oldest job
    oldest_id: str | None


def _cell_where(organization_id: str | None) -> str:
    # The literal status list lets the planner prove the partial index job_active_cells,
    # which the correlated `status = v.column1` alone cannot.
    where = (
        f"j.status IN ({_ACTIVE_SQL}) AND j.status = v.column1 AND j.lane = v.column2"
        " AND j.worker_group = v.column3"
    )
    return where + (" AND j.organization_id = %s" if organization_id is not None else "")


def active_cells(*, cap: int | None = None, organization_id: str | None = None) -> list[ActiveCell]:
    """Active jobs per (status, lane, routed group), each count stopped at cap + 1, with
    the oldest job of each queued cell; empty cells are left out.

    One statement on both databases: a probe of `job_active_cells` per cell of the
    vocabulary (3 statuses x 4 lanes x every worker group, the declared ones included),
    each reading at most cap + 1 entries.
    With an organization the entries are filtered on the index's included column, so a
    small organization in a long queue reads its cells whole (still index-only).
    """
    cap = CELL_CAP if cap is None else cap
    where = _cell_where(organization_id)
    org = [organization_id] if organization_id is not None else []
    oldest = "SELECT {} FROM jobs_job j WHERE " + where + " ORDER BY j.created_at, j.id LIMIT 1"
    groups = current_timing().group_names()
    cells = [(s, lane, g) for s in ACTIVE_ORDER for lane in LANES for g in groups]
    statement = (
        "SELECT v.column1, v.column2, v.column3,"
        f" (SELECT COUNT(*) FROM (SELECT 1 FROM jobs_job j WHERE {where} LIMIT %s) AS c),"
        f" CASE WHEN v.column1 = 'queued' THEN ({oldest.format('j.created_at')}) END,"
        f" CASE WHEN v.column1 = 'queued' THEN ({oldest.format('j.id')}) END"
        " FROM (VALUES " + ", ".join(["(%s, %s, %s)"] * len(cells)) + ") AS v"
    )
    params = [*org, cap + 1, *org, *org, *(value for cell in cells for value in cell)]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    return [
        ActiveCell(status, lane, group, Count.of(n, cap), created, job_id)
        for status, lane, group, n, created, job_id in rows
        if n
    ]


def by_status(
    statuses: Iterable[str],
    *,
    cap: int | None = None,
    updated_since_ms: int | None = None,
    organization_id: str | None = None,
) -> dict[str, Count]:
    """Jobs per status, each count stopped at cap + 1 (one statement).

    Each is a range of `job_status_newest`; with `updated_since_ms`, of
    `job_status_updated` for a settled status: jobs whose last receipt is that recent,
    which for a settled job is its settlement. With an organization the rows are
    filtered, so that count reads up to the window's (or the status's) rows until it
    finds cap + 1. Each status is its own subquery naming it, so that the planner can
    prove the partial index's condition.
    """
    cap = STATUS_CAP if cap is None else cap
    names = list(statuses)
    extra, params = "", list[object]()
    if updated_since_ms is not None:
        extra, params = " AND j.updated_at >= %s", [updated_since_ms]
    if organization_id is not None:
        extra, params = extra + " AND j.organization_id = %s", [*params, organization_id]
    one = (
        "SELECT %s, (SELECT COUNT(*) FROM (SELECT 1 FROM jobs_job j"
        f" WHERE j.status = %s{extra} LIMIT %s) AS c)"
    )
    # bitmap scans off: a bitmap reads a status's whole range before the LIMIT (100k
    # entries for a backlog of 100k), and the planner picks one for any status it
    # expects fewer rows of than the cap (every status of a table not analyzed yet)
    with index_walks.walking(), connection.cursor() as cursor:
        cursor.execute(
            " UNION ALL ".join([one] * len(names)),
            [value for name in names for value in (name, name, *params, cap + 1)],
        )
        return {status: Count.of(n, cap) for status, n in cursor.fetchall()}
