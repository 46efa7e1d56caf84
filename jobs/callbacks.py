"""The D-8 callback outbox (`jobs.models.Callback`): its write and its reads.

`record` writes `jobs_callback` rows in the transaction of the write that caused the
event: the jobs projector records every settlement (a worker's, the driver's, any cancel,
a lease expiry that used up the attempts), the driver records `dispatched` with the
execute promise it opens. With no URL configured nothing is written: no statement. The
runtime's sender (`jobs.runtime.callbacks`) claims, posts and settles the rows.

The reads: one job's rows, for the API and the admin job page, and the counts `/metrics`
and the dashboard show. Every query stays on an index: one job's rows by (job_id, -id);
pending rows through the partial index of the retry loop; delivered and given-up rows
only inside the last hour, by (state, finished_at). Nothing counts the whole table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db import connection
from django.db.models import Count, Min

from jobs.core import callbacks as core
from jobs.core.callbacks import EVENTS
from jobs.core.state import JobState
from jobs.models import Callback

PER_JOB = 100
HOUR_MS = 3_600_000
FINISHED = {"delivered": "deliveredLastHour", "gave_up": "gaveUpLastHour"}

Execute = Callable[[str, Sequence[Any]], Any]


def record(events: Sequence[tuple[str, JobState, int]], *, execute: Execute | None = None) -> None:
    """Record (event, job, at_ms) callbacks in the current transaction. `execute` runs
    the statement (the append's own cursor, for the projector); else a Django cursor."""
    config = settings.RECEIPT
    url = config.callback_url
    if not url or not events:
        return
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    row = f"(%s, %s, %s, %s{cast}, 'pending', 0, %s, %s, %s)"
    params: list[Any] = []
    for event, job, at_ms in events:
        params += [
            job.job_id,
            event,
            url,
            json.dumps(core.body(event, job, at_ms=at_ms)),
            at_ms,
            at_ms,
            at_ms + config.callback_retry_for_ms,
        ]
    sql = (
        "INSERT INTO jobs_callback (job_id, event, url, body, state, attempts, created_at, "
        f"next_at, give_up_at) VALUES {', '.join([row] * len(events))}"
    )
    if execute is not None:
        execute(sql, params)
        return
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def mask_url(url: str | None) -> str | None:
    """A callback URL reduced to scheme, host and port: paths and queries often hold tokens."""
    if not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    masked_path = "/••••" if parts.path not in ("", "/") or parts.query else parts.path
    return urlunsplit((parts.scheme, host, masked_path, "", ""))


def for_job(job_id: str, *, limit: int = PER_JOB) -> list[dict[str, Any]]:
    """The job's callbacks, newest first, in wire form."""
    return [to_wire(row) for row in Callback.objects.filter(job_id=job_id).order_by("-id")[:limit]]


def to_wire(row: Callback) -> dict[str, Any]:
    return {
        "id": row.id,
        "event": row.event,
        "state": row.state,
        "url": mask_url(row.url),
        "attempts": row.attempts,
        "lastStatus": row.last_status,
        "lastError": row.last_error,
        "createdAt": row.created_at,
        "nextAt": row.next_at,
        "giveUpAt": row.give_up_at,
        "finishedAt": row.finished_at,
        "body": row.body,
    }


def admin_rows(job_id: str) -> list[dict[str, Any]]:
    """`for_job` with times in UTC and the body as indented JSON, for the job page."""
    from receipts.admin import utc  # the admin's: the runtime, which records here, loads none

    return [
        {
            **wire,
            "created": utc(wire["createdAt"]),
            "next": utc(wire["nextAt"]),
            "finished": utc(wire["finishedAt"]),
            "giveUp": utc(wire["giveUpAt"]),
            "bodyJson": json.dumps(wire["body"], indent=2, sort_keys=True),
        }
        for wire in for_job(job_id)
    ]


def counts(*, now_ms: int) -> dict[str, Any]:
    """Pending callbacks (and the oldest one's event time), delivered and given up in the
    last hour: totals and per event."""
    by_event = {
        event: {"pending": 0, "deliveredLastHour": 0, "gaveUpLastHour": 0} for event in EVENTS
    }
    totals = {"pending": 0, "deliveredLastHour": 0, "gaveUpLastHour": 0}
    oldest: int | None = None
    pending = (
        Callback.objects.filter(state="pending")
        .order_by()
        .values("event")
        .annotate(n=Count("id"), oldest=Min("created_at"))
    )
    for row in pending:
        by_event.setdefault(row["event"], dict.fromkeys(totals, 0))["pending"] = row["n"]
        totals["pending"] += row["n"]
        oldest = row["oldest"] if oldest is None else min(oldest, row["oldest"])
    finished = (
        Callback.objects.filter(state__in=list(FINISHED), finished_at__gte=now_ms - HOUR_MS)
        .order_by()
        .values("event", "state")
        .annotate(n=Count("id"))
    )
    for row in finished:
        key = FINISHED[row["state"]]
        by_event.setdefault(row["event"], dict.fromkeys(totals, 0))[key] = row["n"]
        totals[key] += row["n"]
    return {**totals, "oldestPendingAt": oldest, "byEvent": by_event}
