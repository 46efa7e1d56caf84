"""Which parts of a payload carry shell commands (Q-5): they need the `factory:commands` scope.

Factory's handlers run what a payload says in these places, whatever its kind, because
the agent id routes and the handler reads: `command` (a task run), `tasks[].command` (a
plan given on create or react), `checks` and `publish` (an objective's integration), and
the same under `objective` (create's wrapped form). `policy.network` is a grant for
commands, so it counts too. Pure: no Django, nothing but the payload.
"""

from __future__ import annotations

from typing import Any, Final

COMMANDS_SCOPE: Final = "factory:commands"


def command_paths(payload: Any) -> list[str]:
    """Where `payload` carries a command or a grant for one, as `payload.<path>` strings
    (empty when it carries none)."""
    if not isinstance(payload, dict):
        return []
    found = _carried(payload, "payload")
    objective = payload.get("objective")
    if isinstance(objective, dict):
        found += _carried(objective, "payload.objective")
    return found


def _carried(body: dict[str, Any], where: str) -> list[str]:
    found = []
    if body.get("command") is not None:
        found.append(f"{where}.command")
    tasks = body.get("tasks")
    if isinstance(tasks, list):
        for index, task in enumerate(tasks):
            if isinstance(task, dict) and task.get("command") is not None:
                found.append(f"{where}.tasks[{index}].command")
    for key in ("checks", "publish"):
        if body.get(key) not in (None, [], ""):
            found.append(f"{where}.{key}")
    policy = body.get("policy")
    if isinstance(policy, dict) and policy.get("network") not in (None, False):
        found.append(f"{where}.policy.network")
    return found
