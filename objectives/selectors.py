"""Reads of Factory's read models: objectives (summary rows) and, through `jobs.selectors`,
the jobs they spawned.

Organization isolation (Q-2) is a parameter of every read: an organization-bound caller
passes its organization and sees nothing else, reported like a missing objective.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Exists, OuterRef

from jobs import selectors as job_selectors
from jobs.core.state import JobState
from jobs.timing_config import current_timing
from objectives.core.board import SECTION_KEYS
from objectives.core.facts import JobFact, Staleness
from objectives.core.state import ObjectiveState, objective_from_wire
from objectives.core.vocabulary import KIND_TASK_RUN, TERMINAL_OBJECTIVE_STATUSES
from objectives.errors import ObjectiveNotFound
from objectives.models import ObjectiveSummary

BOARD_LIMIT = 100


def load(objective_id: str) -> tuple[ObjectiveState | None, str | None]:
    """The objective's fold and the head it was folded to (None, None when it is new)."""
    row = ObjectiveSummary.objects.filter(pk=objective_id).values_list("state", "head").first()
    if row is None:
        return None, None
    return objective_from_wire(row[0]), row[1]


def unsettled_objective_of_job() -> Exists:
    """A job row's objective (OuterRef "objective_id") is not settled: not terminal, or
    terminal but not yet audited (`active`). Retention keeps such jobs (jobs.retention)."""
    return Exists(
        ObjectiveSummary.objects.filter(pk=OuterRef("objective_id")).exclude(
            status__in=TERMINAL_OBJECTIVE_STATUSES, active=False
        )
    )


def get(objective_id: str) -> ObjectiveState | None:
    return load(objective_id)[0]


def visible(objective_id: str, *, organization_id: str | None = None) -> ObjectiveState:
    """The objective if the caller may see it; ObjectiveNotFound otherwise (Q-2)."""
    state = get(objective_id) if isinstance(objective_id, str) and len(objective_id) <= 64 else None
    if state is None or (organization_id is not None and state.organization_id != organization_id):
        raise ObjectiveNotFound(str(objective_id)[:64])
    return state


def staleness(**floors: int) -> Staleness:
    """The staleness judgement (L-4) with this deployment's heartbeat cadences (K-7)."""
    return Staleness(timing=current_timing(), **floors)


def fact_of(job: JobState, *, canceled_by: str | None = None) -> JobFact:
    """`canceled_by`: the `by` of the job's `job.canceled` receipt, which the job fold
    does not keep; it names the aborter of a job canceled while queued (J-10)."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    path = payload.get("executionPath")
    aborts = [c for c in job.commands if c.command == "abort"]
    return JobFact(
        job_id=job.job_id,
        status=job.status,
        kind=job.kind,
        result=job.result,
        last_error=job.last_error or job.cancel_reason,
        attempt=job.attempt,
        created_at=job.created_at,
        updated_at=job.updated_at,
        lease_until=job.lease_until,
        lease_ms=job.lease_ms,
        abort_requested=job.abort_requested,
        aborted_by=aborts[-1].by if aborts else canceled_by,
        cancel_reason=job.cancel_reason,
        execution_path=path if isinstance(path, str) else None,
        task_id=job.task_id,
    )


def job_facts(job_ids: Iterable[str]) -> dict[str, JobFact]:
    """Facts of the jobs by id; one extra query names who canceled any queued-canceled ones."""
    jobs = job_selectors.states(job_ids)
    by = job_selectors.canceled_by(
        j.job_id
        for j in jobs
        if j.status == "canceled" and not any(c.command == "abort" for c in j.commands)
    )
    return {job.job_id: fact_of(job, canceled_by=by.get(job.job_id)) for job in jobs}


def active_job_facts(objective_id: str) -> list[JobFact]:
    jobs = job_selectors.objective_jobs(objective_id, active_only=True, limit=500)
    return [fact_of(job) for job in jobs]


def objective_jobs(objective_id: str, *, limit: int = 200) -> list[JobState]:
    return job_selectors.objective_jobs(objective_id, limit=limit)


def active_task_jobs(objective_id: str) -> list[str]:
    return job_selectors.active_objective_job_ids(objective_id, kind=KIND_TASK_RUN)


def held_slots() -> int:
    return ObjectiveSummary.objects.filter(slot_held=True, mode="delivery").count()


def waiting_for_slot(limit: int) -> list[str]:
    return list(
        ObjectiveSummary.objects.filter(status="waiting_for_slot")
        .order_by("updated_at")
        .values_list("id", flat=True)[:limit]
    )


def board(
    *, organization_id: str | None = None, limit: int = BOARD_LIMIT
) -> dict[str, list[ObjectiveSummary]]:
    """Newest first per section (A-9, U-5); each section served by its index."""
    rows = ObjectiveSummary.objects.defer("state")
    if organization_id is not None:
        rows = rows.filter(organization_id=organization_id)
    return {
        key: list(rows.filter(section=key).order_by("-updated_at", "-id")[:limit])
        for key in SECTION_KEYS
    }


def queued_task_jobs(objective_ids: Iterable[str]) -> dict[str, int]:
    """Per objective, how many of its task jobs wait in the queue (U-5: shown `queued`)."""
    return job_selectors.count_by_objective(objective_ids, kind=KIND_TASK_RUN, status="queued")


def open_run_statuses(state: ObjectiveState) -> dict[str, str]:
    """job id -> status of each task's open run job (U-5: queued vs running)."""
    ids = [t.open_run.job_id for t in state.tasks if t.open_run is not None]
    if not ids or state.is_terminal:
        return {}
    return job_selectors.statuses(ids)
