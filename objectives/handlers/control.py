"""`factory.objective.control` on `factory-control` (O-7): one control pass per job."""

from __future__ import annotations

from jobs.core.state import JobState
from jobs.handler_contract import HandlerContext, JobResult
from jobs.runtime import faults
from objectives import control_pass, selectors
from objectives.core.watchdog import RECONCILE


def handle(job: JobState, ctx: HandlerContext) -> JobResult:
    payload = job.payload if isinstance(job.payload, dict) else {}
    objective_id = payload.get("objectiveId")
    if not isinstance(objective_id, str) or selectors.get(objective_id) is None:
        return JobResult.failure(f"objective {objective_id!r} not found", no_retry=True)
    report = control_pass.run(
        objective_id,
        pass_job_id=job.job_id,
        reconcile=payload.get("reason") == RECONCILE,
        deadline_s=ctx.deadline,
    )
    faults.pause("factory_control_after_commit", 6.0)  # C-3: kill the worker mid-pass
    return JobResult.success(report.to_wire())
