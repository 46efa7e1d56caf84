"""Reads of the D-8 callback records (`jobs.models.Callback`): one job's, for the API and
the admin job page, and the counts `/metrics` and the dashboard show. Never writes.

Every query stays on an index: one job's rows by (job_id, -id); pending rows through the
partial index of the retry loop; delivered and given-up rows only inside the last hour,
by (state, finished_at). Nothing counts the whole table.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Count, Min

from jobs.core.callbacks import EVENTS
from jobs.models import Callback

PER_JOB = 100
HOUR_MS = 3_600_000
FINISHED = {"delivered": "deliveredLastHour", "gave_up": "gaveUpLastHour"}


def for_job(job_id: str, *, limit: int = PER_JOB) -> list[dict[str, Any]]:
    """The job's callbacks, newest first, in wire form."""
    return [to_wire(row) for row in Callback.objects.filter(job_id=job_id).order_by("-id")[:limit]]


def to_wire(row: Callback) -> dict[str, Any]:
    from jobs.dashboard import mask_url  # the dashboard reads the counts below

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
    from receipts.admin import utc

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
