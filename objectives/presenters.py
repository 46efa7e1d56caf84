"""Objectives as clients and operators see them (A-9, U-5): one JSON for API and admin."""

from __future__ import annotations

from typing import Any

from jobs import selectors as job_selectors
from jobs.core.state import JobState
from jobs.presenters import job_json
from objectives import selectors
from objectives.core import dag
from objectives.core.board import SECTIONS, section_for, task_counts, task_shown, with_queued
from objectives.core.state import ObjectiveState, Task, objective_to_wire
from objectives.core.vocabulary import objective_stream
from objectives.core.wire import to_wire
from objectives.models import ObjectiveSummary

_HIDDEN = ("tasks", "authContext", "jobs")


def summary_json(row: ObjectiveSummary, queued: int = 0) -> dict[str, Any]:
    """`queued`: how many of its running tasks' jobs wait in the queue (queued_by_objective)."""
    state = row.state if isinstance(row.state, dict) else {}
    return {
        "id": row.id,
        "title": row.title,
        "status": row.status,
        "phase": row.phase,
        "mode": row.mode,
        "severity": row.severity,
        "section": row.section,
        "archived": row.archived,
        "organizationId": row.organization_id,
        "taskCounts": with_queued(row.task_counts or {}, queued),
        "slotHeld": row.slot_held,
        "controlRequestPending": row.control_request_pending,
        "blockedReason": state.get("blockedReason"),
        "createdAt": row.created_at,
        "updatedAt": row.updated_at,
        "receiptCount": row.receipt_count,
    }


def queued_by_objective(sections: dict[str, list[ObjectiveSummary]]) -> dict[str, int]:
    """Queued task jobs of the board's objectives that count a task running (one query)."""
    return selectors.queued_task_jobs(
        row.id
        for rows in sections.values()
        for row in rows
        if (row.task_counts or {}).get("running")
    )


def board_json(sections: dict[str, list[ObjectiveSummary]]) -> list[dict[str, Any]]:
    queued = queued_by_objective(sections)
    return [
        {
            "key": key,
            "title": title,
            "objectives": [summary_json(r, queued.get(r.id, 0)) for r in sections[key]],
        }
        for key, title in SECTIONS
    ]


def shown_statuses(state: ObjectiveState, job_statuses: dict[str, str]) -> dict[str, str]:
    """task id -> what the task is shown as (objectives.core.board.task_shown);
    `job_statuses`: selectors.open_run_statuses(state)."""
    return {
        t.id: task_shown(t, state, job_statuses.get(t.open_run.job_id) if t.open_run else None)
        for t in state.tasks
    }


def task_json(task: Task, depth: int, shown: str | None = None) -> dict[str, Any]:
    wire: dict[str, Any] = to_wire(task)
    wire["shownStatus"] = shown or task.status
    wire["depth"] = depth
    wire["jobIds"] = [run.job_id for run in task.runs]
    return wire


def task_depths(state: ObjectiveState) -> dict[str, int]:
    return dag.depths({t.id: t.depends_on for t in state.tasks}) if state.tasks else {}


def objective_json(state: ObjectiveState, job_statuses: dict[str, str]) -> dict[str, Any]:
    wire = {k: v for k, v in objective_to_wire(state).items() if k not in _HIDDEN}
    wire.update(
        id=state.objective_id,
        stream=objective_stream(state.objective_id),
        section=section_for(state),
        awaitingPromotion=state.awaiting_promotion,
        taskCounts=task_counts(state, job_statuses),
        jobRefs=to_wire(state.jobs),
    )
    return wire


def detail_json(state: ObjectiveState, jobs: list[JobState]) -> dict[str, Any]:
    depths = task_depths(state)
    statuses = selectors.open_run_statuses(state)
    shown = shown_statuses(state, statuses)
    return {
        "objective": objective_json(state, statuses),
        "tasks": [task_json(t, depths.get(t.id, 0), shown[t.id]) for t in state.tasks],
        "jobs": [job_json(job) for job in jobs],
    }


def live_status(state: ObjectiveState) -> dict[str, Any]:
    """A-9 live-status: what the objective is doing right now, for a progress line."""
    open_runs = [t for t in state.tasks if t.open_run is not None]
    current = max(
        open_runs, key=lambda t: t.open_run.dispatched_at if t.open_run else 0, default=None
    )
    job_id = current.open_run.job_id if current and current.open_run else None
    progress_at, stdout, stderr = None, None, None
    if job_id:
        last = job_selectors.last_progress(job_id)
        if last is not None:
            report = last.report if isinstance(last.report, dict) else {}
            progress_at, stdout = last.at, report.get("stdoutTail")
            stderr = report.get("stderrTail")
        elif current and current.last_checkpoint:
            point = current.last_checkpoint
            progress_at, stdout, stderr = point.at, point.stdout_tail, point.stderr_tail
    counts = task_counts(state, selectors.open_run_statuses(state))
    done = sum(counts.get(s, 0) for s in ("approved", "integrated", "superseded"))
    summary = f"{state.status}: {done} of {len(state.tasks)} tasks done"
    for shown in ("running", "queued"):
        if counts.get(shown):
            summary += f", {counts[shown]} {shown}"
    detail = (
        state.blocked_reason
        or state.terminal_reason
        or (f"{current.id}: {current.title}" if current else None)
        or state.result_summary
    )
    return {
        "objectiveId": state.objective_id,
        "status": state.status,
        "phase": state.phase,
        "summary": summary,
        "detail": detail,
        "progressAt": progress_at or state.updated_at,
        "active": state.is_active,
        "jobId": job_id,
        "taskId": current.id if current else None,
        "stdoutTail": stdout,
        "stderrTail": stderr,
    }
