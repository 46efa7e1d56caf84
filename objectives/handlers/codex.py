"""Agent `codex`: task runs (O-6) and integration (O-13).

- `factory.task.run`: one candidate pass through the executor; the job completes with
  the verdict ({outcome, summary, exitCode, tails, artifacts}) and the control pass
  records it as the task's outcome.
- `factory.integration.validate`: records `integration.validating`, runs each check
  in the workspace, then `integration.validated` or `integration.validation.failed`
  (which blocks the objective with the failing check's output tail).
- `factory.integration.publish`: runs the objective's publish command if it has one and
  records `integration.promoted` (or `integration.publish.failed`).
Every command runs in the objective's sandbox (Q-5, `executors.jail_for`). Where commands
cannot run (`sandbox.Unavailable`: no bubblewrap and the host not chosen) the job fails at
once, not retried, with the reason naming both fixes.
Integration receipts are compare-and-appended only while this job is still the one the
objective waits for (`objectives.core.reports.applies`), so a superseded job's late
verdict is inert.
"""

from __future__ import annotations

import re
from typing import Any

from jobs.core.state import JobState
from jobs.handler_contract import HandlerContext, JobResult
from jobs.runtime import sandbox
from objectives import processes, selectors, services, workspace_files
from objectives.core import reports
from objectives.core.reports import CommandRun
from objectives.core.state import ObjectiveState
from objectives.core.vocabulary import is_task_id
from objectives.executors import (
    TaskRequest,
    executor_for,
    jail_for,
    progress_reporter,
    timeout_s_for,
)

OUTPUT_TAIL = 2000


def _objective(job: JobState) -> tuple[ObjectiveState | None, dict[str, Any]]:
    payload = job.payload if isinstance(job.payload, dict) else {}
    objective_id = payload.get("objectiveId")
    state = selectors.get(objective_id) if isinstance(objective_id, str) else None
    return state, payload


def run_task(job: JobState, ctx: HandlerContext) -> JobResult:
    state, payload = _objective(job)
    if state is None:
        return JobResult.failure(
            f"objective {payload.get('objectiveId')!r} not found", no_retry=True
        )
    task_id = payload.get("taskId")
    if not is_task_id(task_id):  # it names directories in the workspace
        return JobResult.failure(f"invalid taskId {task_id!r}", no_retry=True)
    request = TaskRequest(
        objective=state,
        job=job,
        task_id=str(task_id),
        pass_no=int(payload.get("pass") or 1),
        title=str(payload.get("title") or ""),
        command=payload.get("command"),
        prompt=payload.get("prompt"),
        timeout_ms=payload.get("timeoutMs"),
    )
    try:
        verdict = executor_for(request)(request, ctx)
    except (sandbox.Unavailable, workspace_files.UnsafePath) as error:
        return JobResult.failure(str(error), no_retry=True)
    if verdict is None:
        return JobResult.failure(f"task stopped: {ctx.abort_reason or 'aborted'}")
    return JobResult.success(verdict)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "check"


def _run(
    state: ObjectiveState,
    job: JobState,
    ctx: HandlerContext,
    name: str,
    command: str,
    timeout_ms: int | None,
) -> CommandRun | None:
    """Run `command` in the objective's workspace; None when the job was aborted."""
    workspace = services.workspace(state.objective_id)
    art = services.logs(state.objective_id) / "integration" / job.job_id
    workspace.mkdir(parents=True, exist_ok=True)
    env = processes.scrubbed_env(
        {
            "RECEIPT_OBJECTIVE_ID": state.objective_id,
            "RECEIPT_TASK_ID": name,
            "RECEIPT_JOB_ID": job.job_id,
        }
    )
    ran = processes.run(
        command,
        cwd=workspace,
        env=env,
        aborted=ctx.aborted,
        timeout_s=timeout_s_for(timeout_ms, ctx),
        stdout_path=art / f"{_slug(name)}.stdout.log",
        stderr_path=art / f"{_slug(name)}.stderr.log",
        on_output=progress_reporter(ctx, check=name),
        jail=jail_for(state),
    )
    if ran.aborted:
        return None
    tail = (ran.stderr_tail.strip() + "\n" + ran.stdout_tail.strip()).strip()
    return CommandRun(
        name=name,
        command=command,
        exit_code=ran.exit_code,
        timed_out=ran.timed_out,
        duration_ms=ran.duration_ms,
        output_tail=tail[-OUTPUT_TAIL:],
    )


def validate(job: JobState, ctx: HandlerContext) -> JobResult:
    state, _ = _objective(job)
    if state is None:
        return JobResult.failure("objective not found", no_retry=True)
    oid = state.objective_id
    if state.checks and (why := sandbox.problem()):  # before anything is recorded
        return JobResult.failure(why, no_retry=True)
    if not services.validation_started(oid, job.job_id, [c.name for c in state.checks]):
        current = selectors.get(oid)
        if current is None or current.integration.validate_job_id != job.job_id:
            return JobResult.success({"status": "superseded"})
    results: list[dict[str, Any]] = []
    for check in state.checks:
        run = _run(state, job, ctx, check.name, check.command, check.timeout_ms)
        if run is None:
            return JobResult.failure(f"validation stopped: {ctx.abort_reason or 'aborted'}")
        results.append(reports.check_result(run))
        if run.exit_code != 0:
            services.validation_failed(oid, job.job_id, run, results)
            return JobResult.success({"status": "failed", "check": check.name, "results": results})
    services.validated(oid, job.job_id, results)
    return JobResult.success({"status": "validated", "results": results})


def publish(job: JobState, ctx: HandlerContext) -> JobResult:
    state, _ = _objective(job)
    if state is None:
        return JobResult.failure("objective not found", no_retry=True)
    run = None
    if state.publish_command is not None and (why := sandbox.problem()):
        return JobResult.failure(why, no_retry=True)
    if state.publish_command is not None:
        run = _run(state, job, ctx, "publish", state.publish_command, None)
        if run is None:
            return JobResult.failure(f"publication stopped: {ctx.abort_reason or 'aborted'}")
    recorded = services.publish_finished(state.objective_id, job.job_id, run)
    return JobResult.success({"status": recorded or "superseded"})
