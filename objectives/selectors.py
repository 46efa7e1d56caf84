"""Reads of Factory's read models: objectives (summary rows), their jobs and progress.

Organization isolation (Q-2) is a parameter of every read: an organization-bound caller
passes its organization and sees nothing else, reported like a missing objective.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jobs.core.reducer import JobState, job_from_wire
from jobs.core.vocabulary import ACTIVE_STATUSES
from jobs.models import Job
from objectives.core.board import SECTION_KEYS
from objectives.core.facts import JobFact
from objectives.core.state import ObjectiveState, objective_from_wire
from objectives.errors import ObjectiveNotFound
from objectives.models import ObjectiveSummary
from receipts.models import Receipt as ReceiptRow

BOARD_LIMIT = 100


def load(objective_id: str) -> tuple[ObjectiveState | None, str | None]:
    """The objective's fold and the head it was folded to (None, None when it is new)."""
    row = (ObjectiveSummary.objects.filter(pk=objective_id)
           .values_list("state", "head").first())
    if row is None:
        return None, None
    return objective_from_wire(row[0]), row[1]


def get(objective_id: str) -> ObjectiveState | None:
    return load(objective_id)[0]


def visible(objective_id: str, *, organization_id: str | None = None) -> ObjectiveState:
    """The objective if the caller may see it; ObjectiveNotFound otherwise (Q-2)."""
    state = get(objective_id) if isinstance(objective_id, str) and len(objective_id) <= 64 else None
    if state is None or (organization_id is not None and state.organization_id != organization_id):
        raise ObjectiveNotFound(str(objective_id)[:64])
    return state


def fact_of(job: JobState) -> JobFact:
    payload = job.payload if isinstance(job.payload, dict) else {}
    path = payload.get("executionPath")
    return JobFact(job_id=job.job_id, status=job.status, kind=job.kind, result=job.result,
                   last_error=job.last_error or job.cancel_reason, attempt=job.attempt,
                   created_at=job.created_at, updated_at=job.updated_at,
                   lease_until=job.lease_until, abort_requested=job.abort_requested,
                   execution_path=path if isinstance(path, str) else None, task_id=job.task_id)


def job_facts(job_ids: Iterable[str]) -> dict[str, JobFact]:
    ids = list(dict.fromkeys(job_ids))
    facts: dict[str, JobFact] = {}
    for start in range(0, len(ids), 500):
        for wire in Job.objects.filter(pk__in=ids[start:start + 500]).values_list("state", flat=True):
            fact = fact_of(job_from_wire(wire))
            facts[fact.job_id] = fact
    return facts


def active_job_facts(objective_id: str) -> list[JobFact]:
    rows = (Job.objects.filter(objective_id=objective_id, status__in=ACTIVE_STATUSES)
            .values_list("state", flat=True)[:500])
    return [fact_of(job_from_wire(wire)) for wire in rows]


def objective_jobs(objective_id: str, *, limit: int = 200) -> list[JobState]:
    rows = (Job.objects.filter(objective_id=objective_id).order_by("-created_at", "-id")
            .values_list("state", flat=True)[:limit])
    return [job_from_wire(wire) for wire in rows]


def held_slots() -> int:
    return ObjectiveSummary.objects.filter(slot_held=True, mode="delivery").count()


def waiting_for_slot(limit: int) -> list[str]:
    return list(ObjectiveSummary.objects.filter(status="waiting_for_slot")
                .order_by("updated_at").values_list("id", flat=True)[:limit])


def board(*, organization_id: str | None = None, limit: int = BOARD_LIMIT) -> dict[str, list[ObjectiveSummary]]:
    """Newest first per section (A-9, U-5); each section served by its index."""
    rows = ObjectiveSummary.objects.defer("state")
    if organization_id is not None:
        rows = rows.filter(organization_id=organization_id)
    return {key: list(rows.filter(section=key).order_by("-updated_at", "-id")[:limit])
            for key in SECTION_KEYS}


def last_progress(job_id: str) -> tuple[int, dict[str, Any]] | None:
    """(ts, progress) of the job's latest `job.progress` receipt."""
    row = (ReceiptRow.objects.filter(stream=f"jobs/{job_id}", event_type="job.progress")
           .order_by("-stream_seq").values_list("ts", "body").first())
    if row is None:
        return None
    progress = row[1].get("progress") if isinstance(row[1], dict) else None
    return row[0], progress if isinstance(progress, dict) else {}
