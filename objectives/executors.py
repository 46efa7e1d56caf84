"""Executor plug point (O-6): run one candidate pass of a task.

RECEIPT_FACTORY_EXECUTOR names a callable `executor(request, ctx) -> dict` (dotted path);
the default `LocalExecutor` runs the task's `command` with `/bin/sh -c` in the objective's
workspace `<RECEIPT_WORKSPACE_DIR>/<objectiveId>`, or, for a prompt-only task,
RECEIPT_FACTORY_AGENT_COMMAND in a task packet directory (objective.json, task.json,
prompt.md, output/) with the prompt on stdin, either in the sandbox (Q-5,
`jobs.runtime.sandbox`) with the network only if the objective's policy grants it. Full
stdout/stderr are kept under `artifacts/<taskId>/<jobId>/`; tails reach `job.progress` at
most once a second. Artifact paths in the result are relative to the workspace: a result
names no directory of the server.

The verdict, in order: a timeout fails the pass; a valid `result.json`
({outcome: approved|changes_requested|blocked|partial, summary, completion}) decides
(`artifacts/<taskId>/<jobId>/result.json` relative to the workspace for commands,
`output/result.json` in the packet for agents); otherwise exit 0 approves and anything
else fails the pass. An abort kills the process group and returns None: the worker
settles the job as canceled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from jobs.core.state import JobState
from jobs.runtime import sandbox
from jobs.runtime.context import HandlerContext
from objectives import processes, services
from objectives.core.state import ObjectiveState
from objectives.core.vocabulary import FAILED_OUTCOME, OUTCOMES
from objectives.planners import objective_json

DEADLINE_MARGIN_S = 3.0  # finish (and report) before the worker's execution timeout ...
DEADLINE_MARGIN_SHARE = 0.1  # ... or a tenth of what is left, when that is less
PROGRESS_TAIL = 2000
NO_AGENT = (
    "prompt-only task needs RECEIPT_FACTORY_AGENT_COMMAND (a coding-agent CLI run in a "
    "task packet directory with the prompt on stdin); set it, or give the task a "
    "command"
)


@dataclass(frozen=True)
class TaskRequest:
    objective: ObjectiveState
    job: JobState
    task_id: str
    pass_no: int
    title: str
    command: str | None
    prompt: str | None
    timeout_ms: int | None

    @property
    def workspace(self) -> Path:
        return services.workspace(self.objective.objective_id)

    @property
    def artifacts(self) -> Path:
        return self.workspace / "artifacts" / self.task_id / self.job.job_id

    def jail(self, *writable: Path) -> sandbox.Jail:
        return jail_for(self.objective, *writable)

    def env(self) -> dict[str, str]:
        return processes.scrubbed_env(
            {
                "RECEIPT_OBJECTIVE_ID": self.objective.objective_id,
                "RECEIPT_TASK_ID": self.task_id,
                "RECEIPT_JOB_ID": self.job.job_id,
            }
        )


def jail_for(objective: ObjectiveState, *writable: Path) -> sandbox.Jail:
    """The sandbox of a command of `objective` (Q-5): its workspace, and the network only if
    its policy grants it."""
    return sandbox.Jail(
        workspace=services.workspace(objective.objective_id),
        network=objective.policy.network,
        writable=writable,
    )


class Executor(Protocol):
    def __call__(self, request: TaskRequest, ctx: HandlerContext) -> dict[str, Any] | None: ...


def executor_for(request: TaskRequest) -> Executor:
    path = settings.RECEIPT.factory_executor
    return import_string(path) if path else LocalExecutor()


def timeout_s_for(timeout_ms: int | None, ctx: HandlerContext) -> float:
    remaining = ctx.remaining_s()
    budget = max(1.0, remaining - min(DEADLINE_MARGIN_S, remaining * DEADLINE_MARGIN_SHARE))
    return min(budget, timeout_ms / 1000) if timeout_ms else budget


def progress_reporter(ctx: HandlerContext, **fixed: Any) -> Any:
    def report(stdout_tail: str, stderr_tail: str) -> None:
        ctx.progress(
            {
                **fixed,
                "stdoutTail": stdout_tail[-PROGRESS_TAIL:],
                "stderrTail": stderr_tail[-PROGRESS_TAIL:],
            }
        )

    return report


class LocalExecutor:
    def __call__(self, request: TaskRequest, ctx: HandlerContext) -> dict[str, Any] | None:
        art = request.artifacts
        art.mkdir(parents=True, exist_ok=True)
        if request.command:
            cwd, command, stdin, result_path = (
                request.workspace,
                request.command,
                None,
                art / "result.json",
            )
        elif settings.RECEIPT.factory_agent_command:
            cwd = self._packet(request)
            command = settings.RECEIPT.factory_agent_command
            stdin, result_path = (request.prompt or "").encode(), cwd / "output" / "result.json"
        else:
            return {"outcome": "blocked", "summary": NO_AGENT}
        result_path.unlink(missing_ok=True)  # a retried attempt never reads the last one's
        timeout_s = timeout_s_for(request.timeout_ms, ctx)
        fixed = {"taskId": request.task_id, "pass": request.pass_no}
        jail = request.jail(art, result_path.parent)
        ran = processes.run(
            command,
            cwd=cwd,
            env=request.env(),
            stdin=stdin,
            timeout_s=timeout_s,
            aborted=ctx.aborted,
            stdout_path=art / "stdout.log",
            stderr_path=art / "stderr.log",
            on_start=lambda pid: ctx.progress({**fixed, "phase": "started", "pid": pid}),
            on_output=progress_reporter(ctx, **fixed),
            jail=jail,
        )
        if ran.aborted:
            return None
        verdict = _verdict(ran, result_path, timeout_s)
        return {
            **verdict,
            "exitCode": ran.exit_code,
            "stdoutTail": ran.stdout_tail,
            "stderrTail": ran.stderr_tail,
            "pid": ran.pid,
            "durationMs": ran.duration_ms,
            "timedOut": ran.timed_out,
            "artifacts": {
                "stdout": _relative(art / "stdout.log", request.workspace),
                "stderr": _relative(art / "stderr.log", request.workspace),
                "result": _relative(result_path, request.workspace)
                if result_path.exists()
                else None,
            },
        }

    def _packet(self, request: TaskRequest) -> Path:
        packet = request.workspace / "packets" / request.task_id / request.job.job_id
        (packet / "output").mkdir(parents=True, exist_ok=True)
        (packet / "objective.json").write_text(
            json.dumps(objective_json(request.objective), indent=2)
        )
        (packet / "task.json").write_text(
            json.dumps(
                {
                    "id": request.task_id,
                    "title": request.title,
                    "prompt": request.prompt,
                    "pass": request.pass_no,
                    "jobId": request.job.job_id,
                },
                indent=2,
            )
        )
        (packet / "prompt.md").write_text(request.prompt or "")
        return packet


def _relative(path: Path, workspace: Path) -> str:
    return str(path.relative_to(workspace))


def _verdict(ran: processes.ProcessResult, result_path: Path, timeout_s: float) -> dict[str, Any]:
    if ran.timed_out:
        return {"outcome": FAILED_OUTCOME, "summary": f"timed out after {int(timeout_s * 1000)} ms"}
    if result_path.exists():
        return read_result(result_path)
    if ran.exit_code == 0:
        return {"outcome": "approved", "summary": None}
    return {"outcome": FAILED_OUTCOME, "summary": f"exit {ran.exit_code}"}


def read_result(path: Path) -> dict[str, Any]:
    """`result.json` as {outcome, summary, completion}; an invalid file fails the pass."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return {"outcome": FAILED_OUTCOME, "summary": f"result.json is not valid JSON: {error}"}
    if not isinstance(data, dict) or data.get("outcome") not in OUTCOMES:
        return {
            "outcome": FAILED_OUTCOME,
            "summary": f"result.json needs outcome one of {', '.join(OUTCOMES)}",
        }
    summary = data.get("summary")
    completion = data.get("completion")
    return {
        "outcome": data["outcome"],
        "summary": summary if isinstance(summary, str) else None,
        "completion": completion if isinstance(completion, dict) else None,
    }
