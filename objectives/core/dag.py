"""The task graph (O-3, O-5): plan validation, ready sets, topological order, depth.

A plan is `[{id?, title, command | prompt, dependsOn?, timeoutMs?, executor?}]`. The same
validation applies to an explicit plan and to one printed by a planner command, and
every refusal is a `PlanError` whose message names the offending ids (or the cycle).
Order is always the plan's order where the graph leaves a choice, so decisions are
deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from objectives.core.vocabulary import TASK_ID_MAX, is_task_id

MAX_TASKS: Final = 200
MAX_TITLE: Final = 300
MAX_TEXT: Final = 100_000
MAX_TIMEOUT_MS: Final = 24 * 3_600_000
TASK_KEYS: Final = frozenset(
    {"id", "title", "command", "prompt", "dependsOn", "timeoutMs", "executor"}
)


class PlanError(ValueError):
    """A plan that cannot run; the message starts with `plan rejected:`."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"plan rejected: {problem}")
        self.problem = problem


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskSpec:
    id: str
    title: str
    command: str | None = None
    prompt: str | None = None
    depends_on: tuple[str, ...] = ()
    timeout_ms: int | None = None
    executor: str | None = None


def validate_plan(raw: Any) -> list[TaskSpec]:
    """Normalise and check a plan; raise PlanError naming what is wrong."""
    if not isinstance(raw, list):
        raise PlanError(f"tasks must be a list, got {type(raw).__name__}")
    if not raw:
        raise PlanError("no tasks")
    if len(raw) > MAX_TASKS:
        raise PlanError(f"{len(raw)} tasks; at most {MAX_TASKS}")
    specs = [_spec(item, index) for index, item in enumerate(raw)]
    seen: set[str] = set()
    for spec in specs:
        if spec.id in seen:
            raise PlanError(f"duplicate task id '{spec.id}'")
        seen.add(spec.id)
    for spec in specs:
        for dep in spec.depends_on:
            if dep not in seen:
                raise PlanError(f"task '{spec.id}' depends on unknown task '{dep}'")
    cycle = find_cycle({s.id: s.depends_on for s in specs})
    if cycle:
        raise PlanError(f"dependency cycle {' -> '.join(cycle)}")
    return specs


def _spec(item: Any, index: int) -> TaskSpec:
    where = f"task {index + 1}"
    if not isinstance(item, dict):
        raise PlanError(f"{where} must be an object, got {type(item).__name__}")
    unknown = sorted(set(item) - TASK_KEYS)
    if unknown:
        raise PlanError(f"{where} has unknown key(s) {', '.join(unknown)}")
    task_id = item.get("id", f"t{index + 1}")
    if not is_task_id(task_id):
        raise PlanError(
            f"{where}: id {task_id!r} must be 1..{TASK_ID_MAX} characters of "
            "letters, digits, '.', '_' or '-' (starting with a letter or digit)"
        )
    where = f"task '{task_id}'"
    title = item.get("title")
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE:
        raise PlanError(
            f"{where}: title must be a non-empty string of at most {MAX_TITLE} characters"
        )
    command, prompt = item.get("command"), item.get("prompt")
    for name, value in (("command", command), ("prompt", prompt)):
        if value is not None and (
            not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT
        ):
            raise PlanError(f"{where}: {name} must be a non-empty string")
    if command is None and prompt is None:
        raise PlanError(f"{where} needs a command or a prompt")
    deps = item.get("dependsOn") or []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise PlanError(f"{where}: dependsOn must be a list of task ids")
    timeout = item.get("timeoutMs")
    if not is_timeout(timeout):
        raise PlanError(f"{where}: timeoutMs must be an integer in 1..{MAX_TIMEOUT_MS}")
    executor = item.get("executor")
    if executor is not None and (not isinstance(executor, str) or not executor.strip()):
        raise PlanError(f"{where}: executor must be a non-empty string")
    return TaskSpec(
        id=task_id,
        title=title.strip(),
        command=command,
        prompt=prompt,
        depends_on=tuple(dict.fromkeys(deps)),
        timeout_ms=timeout,
        executor=executor,
    )


def is_timeout(value: Any) -> bool:
    """None, or a whole number of ms in 1..MAX_TIMEOUT_MS (a task's or a check's)."""
    if value is None:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_TIMEOUT_MS


def find_cycle(depends: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The first cycle met walking tasks and their dependencies in plan order, closed
    (`['a', 'b', 'a']`), or None. Unknown dependency ids are ignored here."""
    state: dict[str, int] = {}  # 1 = on the path, 2 = finished
    for root in depends:
        if state.get(root):
            continue
        path: list[str] = [root]
        stack: list[Iterator[str]] = [iter(depends[root])]
        state[root] = 1
        while stack:
            node = next(stack[-1], None)
            if node is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if node not in depends:
                continue
            if state.get(node) == 1:
                return [*path[path.index(node) :], node]
            if state.get(node) == 2:
                continue
            state[node] = 1
            path.append(node)
            stack.append(iter(depends[node]))
    return None


def topological_order(depends: Mapping[str, Sequence[str]]) -> list[str]:
    """Dependencies first; ties in plan order (Kahn). Assumes an acyclic graph."""
    order: list[str] = []
    placed: set[str] = set()
    remaining = list(depends)
    while remaining:
        progress = False
        for node in list(remaining):
            if all(dep in placed or dep not in depends for dep in depends[node]):
                order.append(node)
                placed.add(node)
                remaining.remove(node)
                progress = True
                break
        if not progress:
            raise ValueError(f"graph has a cycle among {', '.join(remaining)}")
    return order


def depths(depends: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Longest distance from a root (a task without dependencies has depth 0)."""
    out: dict[str, int] = {}
    for node in topological_order(depends):
        out[node] = 1 + max((out[d] for d in depends[node] if d in out), default=-1)
    return out


def ready_set(
    depends: Mapping[str, Sequence[str]], statuses: Mapping[str, str], done: frozenset[str]
) -> list[str]:
    """Pending tasks whose every dependency is in a `done` status, in plan order."""
    return [
        node
        for node in depends
        if statuses.get(node) == "pending"
        and all(statuses.get(dep) in done for dep in depends[node])
    ]
