"""Planner plug point (O-5): turn an objective in `planning` into a plan.

`plan_for(state)` uses the planner named by RECEIPT_FACTORY_PLANNER (a dotted path to a
callable `planner(state, *, timeout_s) -> PlanOutcome | list[task dict]`), else the
default deterministic planner: the objective input's `tasks`; failing that, when the
objective has a prompt and RECEIPT_FACTORY_PLANNER_COMMAND is set, that command gets the
objective as JSON on stdin and must print `{"tasks": [...]}` on stdout, in the sandbox
(Q-5) with a scratch directory as its workspace and the network as the objective's policy
says. Every plan, from any source, goes through the same validation (objectives.core.dag).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from jobs.runtime import sandbox
from objectives import processes
from objectives.core.control import PlanOutcome
from objectives.core.dag import PlanError, validate_plan
from objectives.core.state import ObjectiveState
from receipts.core.storable import storable

DEFAULT_TIMEOUT_S = 120.0
TASK_FORMAT = "[{id, title, command | prompt, dependsOn?, timeoutMs?, executor?}]"


def no_plan_reason(state: ObjectiveState) -> str:
    if state.prompt and not settings.RECEIPT.factory_planner_command:
        why = "the objective has only a prompt and RECEIPT_FACTORY_PLANNER_COMMAND is not set"
    else:
        why = "the objective has no tasks"
    return (
        f"no executable plan: {why}. Supply tasks {TASK_FORMAT} with a factory.dispatch "
        "react (objectiveId, tasks) or in the create request, or set "
        "RECEIPT_FACTORY_PLANNER_COMMAND (reads the objective as JSON on stdin, prints "
        '{"tasks": [...]}) or RECEIPT_FACTORY_PLANNER (a dotted path)'
    )


def plan_for(state: ObjectiveState, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> PlanOutcome:
    path = settings.RECEIPT.factory_planner
    if path:
        try:
            planner = import_string(path)
            answer = planner(state, timeout_s=timeout_s)
        except Exception as error:
            return PlanOutcome(
                error=f"planner {path} failed: {type(error).__name__}: {error}",
                source=f"planner:{path}",
            )
        if isinstance(answer, PlanOutcome):
            return answer
        return _validated(answer, source=f"planner:{path}")
    return default_plan(state, timeout_s=timeout_s)


def default_plan(state: ObjectiveState, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> PlanOutcome:
    if state.input_tasks is not None:
        return _validated(state.input_tasks, source="input")
    command = settings.RECEIPT.factory_planner_command
    if state.prompt and command:
        return _from_command(state, command, timeout_s=timeout_s)
    return PlanOutcome(error=no_plan_reason(state))


def _validated(tasks: Any, *, source: str) -> PlanOutcome:
    tasks = storable(tasks)  # a planner's output is handler output: NUL and lone surrogates go
    try:
        return PlanOutcome(tasks=tuple(validate_plan(tasks)), source=source)
    except PlanError as error:
        return PlanOutcome(error=str(error), source=source)


def objective_json(state: ObjectiveState) -> dict[str, Any]:
    """What a planner or agent sees of the objective (no auth details)."""
    return {
        "objectiveId": state.objective_id,
        "title": state.title,
        "prompt": state.prompt,
        "mode": state.mode,
        "severity": state.severity,
        "channel": state.channel,
        "scope": state.scope,
        "evidence": state.evidence,
        "doneWhen": state.done_when,
        "checks": [{"name": c.name, "command": c.command} for c in state.checks],
        "notes": [n.text for n in state.notes],
    }


def _from_command(state: ObjectiveState, command: str, *, timeout_s: float) -> PlanOutcome:
    source = "planner_command"
    with tempfile.TemporaryDirectory(prefix="receipt-plan-") as tmp:
        logs, scratch = Path(tmp) / "logs", Path(tmp) / "scratch"
        scratch.mkdir()  # the planner's workspace; its logs stay out of its reach
        out, err = logs / "stdout.log", logs / "stderr.log"
        try:
            result = processes.run(
                command,
                cwd=scratch,
                env=processes.scrubbed_env({"RECEIPT_OBJECTIVE_ID": state.objective_id}),
                stdout_path=out,
                stderr_path=err,
                timeout_s=timeout_s,
                stdin=json.dumps(objective_json(state)).encode(),
                jail=sandbox.Jail(workspace=scratch, network=state.policy.network),
            )
        except sandbox.Unavailable as error:
            return PlanOutcome(error=f"planner command not run: {error}", source=source)
        stdout = out.read_text(errors="replace")
    if result.timed_out:
        return PlanOutcome(
            error=f"planner command timed out after {int(timeout_s)} s", source=source
        )
    if result.exit_code != 0:
        return PlanOutcome(
            error=f"planner command failed (exit {result.exit_code}): "
            f"{result.stderr_tail[-1000:].strip()}",
            source=source,
        )
    try:
        printed = json.loads(stdout)
    except json.JSONDecodeError as error:
        return PlanOutcome(error=f"planner command printed no JSON plan: {error}", source=source)
    if not isinstance(printed, dict) or "tasks" not in printed:
        return PlanOutcome(error='planner command must print {"tasks": [...]}', source=source)
    return _validated(printed["tasks"], source=source)
