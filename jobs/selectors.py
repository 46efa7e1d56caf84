"""Reads of the jobs read model: filtered, newest-first keyset pages (A-3, U-1), and a
job's latest progress report (U-2). The bounded counts of the dashboard, `/metrics` and
`/healthz` are in `jobs.counts`.

No OFFSET and no COUNT: a page is `created_at, id` strictly below the cursor, served by
one filter's `(filter, -created_at, -id)` index, starting at the cursor, with the other
filters tested per row (`jobs.index_walks`: a plan that stops at the page's end whatever
the planner's statistics).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.db.models.fields.json import KT

from jobs import index_walks
from jobs.core.state import JobState
from jobs.core.vocabulary import (
    ACTIVE_STATUSES,
    JOB_CANCELED,
    JOB_PROGRESS,
    LANES,
    LEASED_STATUSES,
    TERMINAL_ORDER,
    job_stream,
    validate_job_id,
)
from jobs.core.wire import job_from_wire
from jobs.errors import InvalidRequest, JobNotFound
from jobs.models import Job
from jobs.projector import load_state
from receipts.models import Receipt as ReceiptRow

if TYPE_CHECKING:
    from access.principals import Principal

FILTERS = {
    "status": "status",
    "agentId": "agent_id",
    "lane": "lane",
    "kind": "kind",
    "sessionKey": "session_key",
    "objectiveId": "objective_id",
    "organizationId": "organization_id",
    "routedGroup": "worker_group",
}
DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def encode_cursor(created_at: int, job_id: str) -> str:
    raw = f"{created_at}:{job_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created_at, job_id = base64.urlsafe_b64decode(padded.encode()).decode().split(":", 1)
        return int(created_at), job_id
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidRequest("invalid_cursor", "cursor is not one this API returned") from None


@dataclass(frozen=True)
class Page:
    jobs: list[JobState]
    next_cursor: str | None


def filtered(filters: dict[str, Any], *, organization_id: str | None = None) -> QuerySet[Job]:
    found = conditions(filters, organization_id=organization_id)
    return Job.objects.none() if found is None else Job.objects.filter(**found)


def conditions(
    filters: dict[str, Any], *, organization_id: str | None = None
) -> dict[str, Any] | None:
    """column -> value of the filters given (an unknown one is InvalidRequest), with an
    org-bound caller's organization; None when no job can match (the filter names
    another organization than the caller's)."""
    found: dict[str, Any] = {}
    for key, value in filters.items():
        if value in (None, ""):
            continue
        column = FILTERS.get(key)
        if column is None:
            raise InvalidRequest("invalid_filter", f"unknown filter {key!r}")
        found[column] = value
    if organization_id is None:
        return found
    # an org-bound caller sees only its organization
    if found.setdefault("organization_id", organization_id) != organization_id:
        return None
    return found


def page(
    filters: dict[str, Any],
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
    organization_id: str | None = None,
) -> Page:
    """A keyset page of `limit` jobs (the caller checked it: `jobs.api.parameters`)."""
    narrowed = conditions(filters, organization_id=organization_id)
    if narrowed is None:
        return Page([], None)
    # one filter's index walked in its order, the others tested per row (jobs.index_walks)
    rows = index_walks.narrowed(Job.objects.all(), narrowed)
    if cursor:
        created_at, job_id = decode_cursor(cursor)
        # `created_at <= c` is implied by the OR, but only it can start the index scan at
        # the cursor: without it every page walks from the newest row (O(depth) a page)
        rows = rows.filter(created_at__lte=created_at).filter(
            Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=job_id)
        )
    with index_walks.walking():
        found = list(rows.values_list("state", flat=True)[: limit + 1])
    jobs = [job_from_wire(wire) for wire in found[:limit]]
    next_cursor = None
    if len(found) > limit:
        last = jobs[-1]
        next_cursor = encode_cursor(last.created_at, last.job_id)
    return Page(jobs, next_cursor)


@dataclass(frozen=True)
class Progress:
    at: int  # ms, the receipt's ts
    attempt: int | None
    worker_id: str | None
    report: Any  # the handler's progress value, as reported


def last_progress(job_id: str) -> Progress | None:
    """The job's latest `job.progress` receipt: the fold keeps no progress, the receipts do.
    One backward walk of the (stream, stream_seq) index, stopping at the first match."""
    row = (
        ReceiptRow.objects.filter(stream=job_stream(job_id), event_type=JOB_PROGRESS)
        .order_by("-stream_seq")
        .values_list("ts", "body")
        .first()
    )
    if row is None:
        return None
    ts, body = row
    body = body if isinstance(body, dict) else {}
    return Progress(
        at=ts,
        attempt=body.get("attempt"),
        worker_id=body.get("workerId"),
        report=body.get("progress"),
    )


AGENT_IDS_CAP = 200  # filter choices, not a report: past this, search `agent:<id>`
AGENT_IDS_SQL = (
    "WITH RECURSIVE seen(agent_id, n) AS ("
    " SELECT MIN(agent_id), 1 FROM jobs_job"
    " UNION ALL"
    " SELECT (SELECT MIN(j.agent_id) FROM jobs_job j WHERE j.agent_id > seen.agent_id),"
    " seen.n + 1 FROM seen WHERE seen.agent_id IS NOT NULL AND seen.n < %s"
    ") SELECT agent_id FROM seen WHERE agent_id IS NOT NULL"
)


def agent_ids(*, cap: int = AGENT_IDS_CAP) -> list[str]:
    """The distinct agent ids of the jobs table, smallest first, at most `cap` of them.

    A loose index scan: each step is one probe of `job_agent_newest` for the next larger
    id, so the cost grows with the number of agents, never with the number of jobs (a
    plain DISTINCT reads the whole index on both PostgreSQL and SQLite).
    """
    with connection.cursor() as cursor:
        cursor.execute(AGENT_IDS_SQL, [cap])
        return [row[0] for row in cursor.fetchall()]


def visible_job_or_404(principal: Principal, job_id: str) -> JobState:
    """The job if `principal` may see it; JobNotFound (404 `job_not_found`) otherwise (Q-2).

    The one way any API path (detail, receipts, state, commands, live events) turns a job
    id into a job: a job of another organization is reported exactly like a missing one,
    never 403, so ids cannot be probed across organizations. An id that could never name
    a job is not found either, so no bad id reaches a query.
    """
    try:
        validate_job_id(job_id)
    except (ValueError, TypeError):
        text = str(job_id)  # echoed clipped: an error never carries a huge id whole
        clipped = text if len(text) <= 40 else f"{text[:40]}… ({len(text)} characters)"
        raise JobNotFound(clipped) from None
    job = load_state(job_id)
    if job is None or not principal.may_see(job.organization_id):
        raise JobNotFound(job_id)
    return job


# ---- reads by objective, for Factory (objectives.selectors, objectives.services) --------
# An objective's jobs are served by `job_objective_newest`; lists of ids by primary key,
# `ID_BATCH` at a time.

ID_BATCH = 500


def _batches(job_ids: Iterable[str]) -> Iterator[list[str]]:
    ids = list(dict.fromkeys(job_ids))
    return (ids[start : start + ID_BATCH] for start in range(0, len(ids), ID_BATCH))


def states(job_ids: Iterable[str]) -> list[JobState]:
    """The folds of those of `job_ids` that exist."""
    batches = (
        Job.objects.filter(pk__in=ids).values_list("state", flat=True) for ids in _batches(job_ids)
    )
    return [job_from_wire(wire) for rows in batches for wire in rows]


def statuses(job_ids: Iterable[str]) -> dict[str, str]:
    """job id -> status of those of `job_ids` that exist."""
    return dict(Job.objects.filter(pk__in=list(job_ids)).values_list("id", "status"))


def objective_jobs(
    objective_id: str, *, active_only: bool = False, limit: int = 200
) -> list[JobState]:
    """The objective's jobs (only the active ones with `active_only`), newest first."""
    rows = Job.objects.filter(objective_id=objective_id)
    if active_only:
        rows = rows.filter(status__in=ACTIVE_STATUSES)
    wires = rows.order_by("-created_at", "-id").values_list("state", flat=True)[:limit]
    return [job_from_wire(wire) for wire in wires]


def active_objective_job_ids(objective_id: str, *, kind: str | None = None) -> list[str]:
    """The ids of the objective's active jobs (only those of `kind`, if given), oldest first."""
    rows = Job.objects.filter(objective_id=objective_id, status__in=ACTIVE_STATUSES)
    if kind is not None:
        rows = rows.filter(kind=kind)
    return list(rows.order_by("created_at", "id").values_list("id", flat=True))


def count_by_objective(objective_ids: Iterable[str], *, kind: str, status: str) -> dict[str, int]:
    """objective id -> how many of its jobs of `kind` are in `status` (one query)."""
    ids = list(objective_ids)
    if not ids:
        return {}
    rows = (
        Job.objects.filter(objective_id__in=ids, kind=kind, status=status)
        .values("objective_id")
        .annotate(n=Count("id"))
        .values_list("objective_id", "n")
    )
    return dict(rows)


def canceled_by(job_ids: Iterable[str]) -> dict[str, str | None]:
    """job id -> the `by` of its `job.canceled` receipt, which the job fold does not keep
    (it names who canceled a job while it was queued, J-10)."""
    found: dict[str, str | None] = {}
    for ids in _batches(job_ids):
        streams = {job_stream(job_id): job_id for job_id in ids}
        rows = ReceiptRow.objects.filter(stream__in=list(streams), event_type=JOB_CANCELED)
        for stream, body in rows.values_list("stream", "body"):
            found[streams[stream]] = body.get("by") if isinstance(body, dict) else None
    return found


# ---- reads of the dashboard, the diagnosis, the runtime and the simulation -------------


def settled_since(since: int) -> list[QuerySet[Job]]:
    """The jobs settled (terminal, last updated) at or after `since`, one unordered query
    per settled status, for the caller to aggregate each.

    Each is one (status, updated_at >= since) range of `job_status_updated`. One query for
    all three, `status IN (every settled status)`, is the partial index's own condition:
    the planner drops it from the scan and reads the whole index testing `updated_at`
    (every settled job ever stored: 880k entries, 67 ms at 1M for 712 in the window); an
    OR of the three ranges is read as three only while the statistics say so. Read them
    inside `index_walks.walking()`: a table never analyzed took `job_error_prefix` (whose
    condition names `failed`, and which holds every queued job) for a cheap bitmap of the
    failed jobs, and read a million entries of it."""
    return [
        Job.objects.filter(status=status, updated_at__gte=since).order_by()
        for status in TERMINAL_ORDER
    ]


def active_count() -> int:
    """How many jobs are active: a full COUNT, for the simulation's idle-database check."""
    return Job.objects.filter(status__in=ACTIVE_STATUSES).count()


def job_row(job_id: str) -> dict[str, Any] | None:
    """The job's `jobs_job` row as a dict of its columns, None without one."""
    return Job.objects.filter(pk=job_id).values().first()


def active_session_peers(session_key: str, *, exclude: str, limit: int = 10) -> tuple[str, ...]:
    """The ids of the session's active jobs other than `exclude`, oldest first."""
    rows = Job.objects.filter(session_key=session_key, status__in=ACTIVE_STATUSES)
    return tuple(
        rows.exclude(pk=exclude).order_by("created_at").values_list("id", flat=True)[:limit]
    )


def busy_in_group(group: str, *, shown: int, cap: int) -> tuple[tuple[str, ...], int]:
    """The ids of the group's leased and running jobs, oldest first (at most `shown`), and
    how many there are, counted up to cap + 1 (partial index job_group_busy)."""
    rows = Job.objects.filter(status__in=sorted(LEASED_STATUSES), worker_group=group)
    ids = tuple(rows.order_by("created_at", "id").values_list("id", flat=True)[:shown])
    busy = len(ids)
    if busy == shown:  # maybe more: count them, but never past cap + 1
        busy = rows.order_by()[: cap + 1].count()
    return ids, busy


def queued_ahead(group: str, job: JobState, *, cap: int) -> int:
    """How many queued jobs of the group were enqueued before `job`, up to cap + 1:
    (created_at, id) < (mine), as a range on created_at under each lane of the partial
    index job_active_cells (every lane named: the index leads with status and lane)."""
    earlier = Job.objects.filter(
        status="queued", lane__in=LANES, worker_group=group, created_at__lte=job.created_at
    ).filter(Q(created_at__lt=job.created_at) | Q(id__lt=job.job_id))
    return earlier.order_by()[: cap + 1].count()


def held_in_group(group: str, *, limit: int) -> list[tuple[str, int, str | None]]:
    """(id, attempt, worker id) of the group's leased or running jobs, at most `limit`:
    the worker id straight from the fold's JSON, no payload."""
    rows = Job.objects.filter(worker_group=group, status__in=("leased", "running"))
    rows = rows.annotate(worker=KT("state__workerId"))
    return list(rows.values_list("id", "attempt", "worker")[:limit])
