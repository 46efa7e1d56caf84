"""Executor plug point (O-6): run one candidate pass of a task.

RECEIPT_FACTORY_EXECUTOR names a callable `executor(request, ctx) -> dict` (dotted path);
the default `LocalExecutor` runs the task's `command` with `/bin/sh -c` in the objective's
workspace `<RECEIPT_WORKSPACE_DIR>/<objectiveId>`, or, for a prompt-only task,
RECEIPT_FACTORY_AGENT_COMMAND in a task packet directory (objective.json, task.json,
prompt.md, output/) with the prompt on stdin; either in the sandbox (Q-5,
`jobs.runtime.sandbox`), with the network only if the objective's policy grants it. Full
stdout/stderr are kept by the worker outside the workspace (`services.logs`); tails
reach `job.progress` at most once a second. The result names its files relative to
RECEIPT_WORKSPACE_DIR: no directory of the server.

The verdict, in order: a timeout fails the pass; a valid `result.json`
({outcome: approved|changes_requested|blocked|partial, summary, completion}) decides
(`artifacts/<taskId>/<jobId>/result.json` relative to the workspace for commands,
`output/result.json` in the packet for agents); otherwise exit 0 approves and anything
else fails the pass. The worker reads and writes in the workspace only through
`objectives.workspace_files` (the command may have left links there). An abort kills
the process group and returns None: the worker settles the job as canceled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from jobs.core.state import JobState
from jobs.handler_contract import HandlerContext
from jobs.runtime import sandbox
from objectives import processes, services, workspace_files
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
    def result_dir(self) -> tuple[str, ...]:
        """Where a command writes its result.json, inside the workspace."""
        return ("artifacts", self.task_id, self.job.job_id)

    @property
    def packet_dir(self) -> tuple[str, ...]:
        return ("packets", self.task_id, self.job.job_id)

    @property
    def logs(self) -> Path:
        """The run's stdout/stderr: the worker writes them, so never in the workspace."""
        return services.logs(self.objective.objective_id) / self.task_id / self.job.job_id

    def jail(self) -> sandbox.Jail:
        return jail_for(self.objective)

    def env(self) -> dict[str, str]:
        return processes.scrubbed_env(
            {
                "RECEIPT_OBJECTIVE_ID": self.objective.objective_id,
                "RECEIPT_TASK_ID": self.task_id,
                "RECEIPT_JOB_ID": self.job.job_id,
            }
        )


def jail_for(objective: ObjectiveState) -> sandbox.Jail:
    """The sandbox of a command of `objective` (Q-5): its workspace, and the network only if
    its policy grants it."""
    return sandbox.Jail(
        workspace=services.workspace(objective.objective_id),
        network=objective.policy.network,
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
        cwd_parts: tuple[str, ...] = ()  # the workspace itself
        if request.command:
            command, stdin = request.command, None
            result_parts = request.result_dir
        elif settings.RECEIPT.factory_agent_command:
            command = settings.RECEIPT.factory_agent_command
            stdin, cwd_parts = (request.prompt or "").encode(), request.packet_dir
            result_parts = (*request.packet_dir, "output")
        else:
            return {"outcome": "blocked", "summary": NO_AGENT}
        owner = sandbox.command_user()  # raises Unavailable before anything is written
        request.workspace.mkdir(parents=True, exist_ok=True)
        if cwd_parts:
            self._packet(request, owner)
        with workspace_files.directory(request.workspace, result_parts, owner=owner) as out:
            workspace_files.remove(out, RESULT)  # a retried attempt never reads the last one's
        timeout_s = timeout_s_for(request.timeout_ms, ctx)
        fixed = {"taskId": request.task_id, "pass": request.pass_no}
        ran = processes.run(
            command,
            cwd=request.workspace.joinpath(*cwd_parts),
            env=request.env(),
            stdin=stdin,
            timeout_s=timeout_s,
            aborted=ctx.aborted,
            stdout_path=request.logs / "stdout.log",
            stderr_path=request.logs / "stderr.log",
            on_start=lambda pid: ctx.progress({**fixed, "phase": "started", "pid": pid}),
            on_output=progress_reporter(ctx, **fixed),
            jail=request.jail(),
        )
        if ran.aborted:
            return None
        result = _read_result(request.workspace, result_parts)
        verdict = _verdict(ran, result, timeout_s)
        root = Path(str(settings.RECEIPT.workspace_dir))
        return {
            **verdict,
            "exitCode": ran.exit_code,
            "stdoutTail": ran.stdout_tail,
            "stderrTail": ran.stderr_tail,
            "pid": ran.pid,
            "durationMs": ran.duration_ms,
            "timedOut": ran.timed_out,
            "artifacts": {  # relative to RECEIPT_WORKSPACE_DIR: no server directory
                "stdout": str((request.logs / "stdout.log").relative_to(root)),
                "stderr": str((request.logs / "stderr.log").relative_to(root)),
                "result": "/".join((request.objective.objective_id, *result_parts, RESULT))
                if result is not None
                else None,
            },
        }

    def _packet(self, request: TaskRequest, owner: tuple[int, int] | None) -> None:
        files = {
            "objective.json": json.dumps(objective_json(request.objective), indent=2),
            "task.json": json.dumps(
                {
                    "id": request.task_id,
                    "title": request.title,
                    "prompt": request.prompt,
                    "pass": request.pass_no,
                    "jobId": request.job.job_id,
                },
                indent=2,
            ),
            "prompt.md": request.prompt or "",
        }
        with workspace_files.directory(request.workspace, request.packet_dir, owner=owner) as fd:
            for name, text in files.items():
                workspace_files.write(fd, name, text.encode())


RESULT = "result.json"


def _read_result(workspace: Path, parts: tuple[str, ...]) -> dict[str, Any] | None:
    """The command's result.json as a verdict, None when it wrote none."""
    try:
        with workspace_files.directory(workspace, parts) as fd:
            data = workspace_files.read(fd, RESULT)
    except (workspace_files.UnsafePath, OSError) as error:
        return {"outcome": FAILED_OUTCOME, "summary": f"result.json cannot be read: {error}"}
    return None if data is None else parse_result(data)


def _verdict(
    ran: processes.ProcessResult, result: dict[str, Any] | None, timeout_s: float
) -> dict[str, Any]:
    if ran.timed_out:
        return {"outcome": FAILED_OUTCOME, "summary": f"timed out after {int(timeout_s * 1000)} ms"}
    if result is not None:
        return result
    if ran.exit_code == 0:
        return {"outcome": "approved", "summary": None}
    return {"outcome": FAILED_OUTCOME, "summary": f"exit {ran.exit_code}"}


def parse_result(data: bytes) -> dict[str, Any]:
    """A result.json's bytes as {outcome, summary, completion}; an invalid one fails the pass."""
    try:
        parsed = json.loads(data)
    except ValueError as error:
        return {"outcome": FAILED_OUTCOME, "summary": f"result.json is not valid JSON: {error}"}
    if not isinstance(parsed, dict) or parsed.get("outcome") not in OUTCOMES:
        return {
            "outcome": FAILED_OUTCOME,
            "summary": f"result.json needs outcome one of {', '.join(OUTCOMES)}",
        }
    summary = parsed.get("summary")
    completion = parsed.get("completion")
    return {
        "outcome": parsed["outcome"],
        "summary": summary if isinstance(summary, str) else None,
        "completion": completion if isinstance(completion, dict) else None,
    }
