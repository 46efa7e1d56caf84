"""The receipts Factory's own jobs report about their objective: monitor checkpoints
(O-9), audits (O-10) and integration verdicts (O-13), each body built here, and
`applies`, which says whether a report still applies to the fold: only while the
objective still waits for the job that made it, so a superseded job's late report is
inert. `objectives.services` compare-and-appends them; this module must not know how.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from objectives.core import vocabulary as v
from objectives.core.facts import JobFact, Staleness, liveness
from objectives.core.state import ObjectiveState

Body = dict[str, Any]
CHECKPOINT_TAIL: Final = 1000
RESULT_TAIL: Final = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandRun:
    """One command an integration job ran in the workspace: a check, or the publish command."""

    name: str
    command: str
    exit_code: int | None
    timed_out: bool
    duration_ms: int
    output_tail: str

    @property
    def why(self) -> str:
        return "timed out" if self.timed_out else f"exit {self.exit_code}"


def checkpoint(
    task_id: str,
    job: JobFact,
    *,
    monitor_job_id: str,
    progress_at: int | None,
    progress: Any,
    now_ms: int,
    staleness: Staleness,
) -> Body:
    """`monitor.checkpoint`: the task job's liveness and the tails of its last progress."""
    report = progress if isinstance(progress, dict) else {}
    return {
        "type": v.MONITOR_CHECKPOINT,
        "taskId": task_id,
        "jobId": job.job_id,
        "monitorJobId": monitor_job_id,
        "liveness": liveness(job, now_ms, staleness),
        "jobStatus": job.status,
        "attempt": job.attempt,
        "lastProgressAt": progress_at,
        "stdoutTail": (report.get("stdoutTail") or "")[-CHECKPOINT_TAIL:] or None,
        "stderrTail": (report.get("stderrTail") or "")[-CHECKPOINT_TAIL:] or None,
    }


def validating(job_id: str, checks: list[str]) -> Body:
    return {"type": v.INTEGRATION_VALIDATING, "jobId": job_id, "checks": checks}


def check_result(run: CommandRun) -> Body:
    """One check's line in the `results` of a validation verdict."""
    return {
        "name": run.name,
        "exitCode": run.exit_code,
        "timedOut": run.timed_out,
        "durationMs": run.duration_ms,
        "outputTail": run.output_tail[-RESULT_TAIL:],
    }


def validated(job_id: str, results: list[Body]) -> Body:
    return {"type": v.INTEGRATION_VALIDATED, "jobId": job_id, "results": results}


def validation_failed(job_id: str, run: CommandRun, results: list[Body]) -> Body:
    return {
        "type": v.INTEGRATION_VALIDATION_FAILED,
        "jobId": job_id,
        "check": run.name,
        "exitCode": run.exit_code,
        "outputTail": run.output_tail,
        "reason": f"check {run.name} failed ({run.why}): {run.output_tail}",
        "results": results,
    }


def publish_verdict(job_id: str, run: CommandRun | None) -> Body:
    """`integration.promoted`, or `integration.publish.failed` when the publish command
    failed; `run` is None when the objective has no publish command."""
    body: Body = {
        "type": v.INTEGRATION_PROMOTED,
        "jobId": job_id,
        "command": run.command if run else None,
        "exitCode": run.exit_code if run else None,
        "outputTail": run.output_tail if run else None,
    }
    if run is None or run.exit_code == 0:
        return body
    reason = f"publish command failed ({run.why}): {run.output_tail}"
    return {**body, "type": v.PUBLISH_FAILED, "reason": reason}


def audit_recorded(job_id: str, *, summary: Body, artifact: str, head: str | None) -> Body:
    """`objective.audit.recorded`, appended on exactly the `head` the audit read."""
    return {
        "type": v.AUDIT_RECORDED,
        "jobId": job_id,
        "summary": summary,
        "artifact": artifact,
        "head": head,
    }


def audit_superseded(job_id: str) -> Body:
    return {"type": v.AUDIT_SUPERSEDED, "jobId": job_id}


# The integration job a verdict's objective must still wait for, and in which statuses.
_AWAITED: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    v.INTEGRATION_VALIDATING: ("validate_job_id", ("requested",)),
    v.INTEGRATION_VALIDATED: ("validate_job_id", ("requested", "validating")),
    v.INTEGRATION_VALIDATION_FAILED: ("validate_job_id", ("requested", "validating")),
    v.INTEGRATION_PROMOTED: ("publish_job_id", ("publish_requested",)),
    v.PUBLISH_FAILED: ("publish_job_id", ("publish_requested",)),
}


def applies(state: ObjectiveState, body: Body) -> bool:
    """Does the report `body` of job `body["jobId"]` still apply to `state`?"""
    kind, job_id = body["type"], body["jobId"]
    if kind == v.AUDIT_SUPERSEDED:
        return state.audit.job_id == job_id and state.audit.status == "requested"
    if state.is_terminal:
        return False
    if kind == v.MONITOR_CHECKPOINT:
        task = state.task(body["taskId"])
        return task is not None and any(run.job_id == job_id for run in task.runs)
    field, statuses = _AWAITED[kind]
    integration = state.integration
    return getattr(integration, field) == job_id and integration.status in statuses
