"""`factory.objective.audit` on `factory-control` (O-10).

Verifies the objective's chain and the chain of every job it spawned (every job whose
payload names the objective), writes a JSON artifact and an `objective.audit.recorded`
receipt with a summary (durations, attempts, failures, retries), compare-and-appended
on the head the audit read. If the head moved meanwhile the audit records
`objective.audit.superseded`, asks control for another round, and returns
`{status: "superseded"}`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings

from jobs.core.state import JobState
from jobs.handler_contract import HandlerContext, JobResult
from objectives import selectors, services
from objectives.core import vocabulary as v
from objectives.core.state import ObjectiveState
from receipts import store

MAX_JOBS = 5_000


def summarize(
    state: ObjectiveState, jobs: list[JobState], verified: dict[str, Any]
) -> dict[str, Any]:
    tasks: dict[str, dict[str, Any]] = {}
    for task in state.tasks:
        durations = [(r.settled_at or r.dispatched_at) - r.dispatched_at for r in task.runs]
        tasks[task.id] = {
            "status": task.status,
            "passes": len(task.runs),
            "failedPasses": sum(1 for r in task.runs if r.outcome not in (None, "approved")),
            "durationMs": sum(durations),
        }
    by_kind: dict[str, int] = {}
    by_status: dict[str, int] = {}
    for job in jobs:
        by_kind[job.kind or "?"] = by_kind.get(job.kind or "?", 0) + 1
        by_status[job.status] = by_status.get(job.status, 0) + 1
    end = state.completed_at or state.updated_at
    return {
        "objectiveId": state.objective_id,
        "status": state.status,
        "terminalReason": state.terminal_reason,
        "durations": {"objectiveMs": end - state.created_at, "tasks": tasks},
        "attempts": sum(job.attempt for job in jobs),
        "failures": {
            "jobs": by_status.get("failed", 0),
            "taskPasses": sum(t["failedPasses"] for t in tasks.values()),
        },
        "retries": {
            "jobs": sum(1 for job in jobs if job.attempt > 1),
            "taskPasses": sum(max(0, t["passes"] - 1) for t in tasks.values()),
        },
        "jobs": {"count": len(jobs), "byKind": by_kind, "byStatus": by_status},
        "verified": verified,
    }


def verify_all(objective_id: str, jobs: list[JobState]) -> dict[str, Any]:
    objective = store.verify(v.objective_stream(objective_id))
    broken = []
    for job in jobs:
        result = store.verify(job.stream)
        if not result.ok:
            broken.append({"jobId": job.job_id, "reason": result.reason, "index": result.index})
    return {
        "ok": objective.ok and not broken,
        "objective": objective.to_wire(),
        "jobsChecked": len(jobs),
        "brokenJobs": broken,
    }


def _artifact(objective_id: str, job_id: str, document: dict[str, Any]) -> Path:
    path = Path(settings.RECEIPT.data_dir) / "audits" / objective_id / f"{job_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=True))
    return path


def handle(job: JobState, ctx: HandlerContext) -> JobResult:
    payload = job.payload if isinstance(job.payload, dict) else {}
    objective_id = payload.get("objectiveId")
    state, head = selectors.load(objective_id) if isinstance(objective_id, str) else (None, None)
    if state is None:
        return JobResult.failure(f"objective {objective_id!r} not found", no_retry=True)
    if state.audit.job_id != job.job_id or state.audit.status != "requested":
        return JobResult.success({"status": "superseded", "reason": "not the requested audit"})
    jobs = selectors.objective_jobs(state.objective_id, limit=MAX_JOBS)
    summary = summarize(state, jobs, verify_all(state.objective_id, jobs))
    path = _artifact(state.objective_id, job.job_id, {"summary": summary, "head": head})
    artifact = str(path.relative_to(settings.RECEIPT.data_dir))  # receipts name no server directory
    if not services.audit_recorded(
        state.objective_id, job.job_id, summary=summary, artifact=artifact, head=head
    ):
        return JobResult.success({"status": "superseded"})
    return JobResult.success({"status": "recorded", "summary": summary, "artifact": artifact})
