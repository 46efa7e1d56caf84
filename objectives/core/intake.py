"""What `factory.dispatch` create (O-11) accepts: the objective's input, checked up front.

Tasks are only type-checked here; the plan itself is validated at planning (O-3, O-5), by
the same code that checks a planner command's output, so both paths block the objective
with the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from objectives.core.dag import MAX_TEXT, MAX_TIMEOUT_MS, MAX_TITLE, is_timeout
from objectives.core.policy import Policy, PolicyError, resolve_policy
from objectives.core.vocabulary import (
    DEFAULT_MODE,
    DEFAULT_SEVERITY,
    MAX_SEVERITY,
    MIN_SEVERITY,
    MODES,
)

MAX_CHECKS: Final = 50
CREATE_KEYS: Final = (
    "title",
    "prompt",
    "mode",
    "severity",
    "checks",
    "tasks",
    "policy",
    "channel",
    "scope",
    "evidence",
    "doneWhen",
    "publish",
)


class IntakeError(ValueError):
    """A create request that cannot become an objective; nothing is written."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    name: str
    command: str
    timeout_ms: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectiveInput:
    title: str
    prompt: str | None
    mode: str
    severity: int
    checks: tuple[Check, ...]
    tasks: Any
    policy: Policy
    channel: str | None
    scope: Any
    evidence: Any
    done_when: Any
    publish_command: str | None


def read_input(raw: dict[str, Any]) -> ObjectiveInput:
    prompt = _text(raw.get("prompt"), "prompt", MAX_TEXT)
    title = _text(raw.get("title"), "title", MAX_TITLE)
    if title is None:
        if prompt is None:
            raise IntakeError("an objective needs a title or a prompt")
        title = prompt.strip().splitlines()[0][:120]
    mode = raw.get("mode") or DEFAULT_MODE
    if mode not in MODES:
        raise IntakeError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    severity = raw.get("severity", DEFAULT_SEVERITY)
    if severity is None:
        severity = DEFAULT_SEVERITY
    if (
        isinstance(severity, bool)
        or not isinstance(severity, int)
        or not (MIN_SEVERITY <= severity <= MAX_SEVERITY)
    ):
        raise IntakeError(
            f"severity must be an integer in {MIN_SEVERITY}..{MAX_SEVERITY}, got {severity!r}"
        )
    tasks = raw.get("tasks")
    if tasks is not None and not isinstance(tasks, list):
        raise IntakeError(f"tasks must be a list, got {type(tasks).__name__}")
    try:
        policy = resolve_policy(raw.get("policy"), mode=mode)
    except PolicyError as error:
        raise IntakeError(str(error)) from None
    publish = raw.get("publish")
    if isinstance(publish, dict):
        publish = publish.get("command")
    return ObjectiveInput(
        title=title.strip(),
        prompt=prompt,
        mode=mode,
        severity=severity,
        checks=read_checks(raw.get("checks")),
        tasks=tasks,
        policy=policy,
        channel=_text(raw.get("channel"), "channel", 200),
        scope=raw.get("scope"),
        evidence=raw.get("evidence"),
        done_when=raw.get("doneWhen"),
        publish_command=_text(publish, "publish", MAX_TEXT),
    )


def read_checks(raw: Any) -> tuple[Check, ...]:
    """`checks: ["cmd", {name?, command, timeoutMs?}]` -> named checks (check-1, ...)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_CHECKS:
        raise IntakeError(f"checks must be a list of at most {MAX_CHECKS} commands")
    checks = []
    for index, item in enumerate(raw):
        name = f"check-{index + 1}"
        if isinstance(item, str):
            item = {"command": item}
        if not isinstance(item, dict):
            raise IntakeError(f"{name} must be a command string or an object")
        command = _text(item.get("command"), f"{name}.command", MAX_TEXT)
        if command is None:
            raise IntakeError(f"{name} needs a command")
        timeout = item.get("timeoutMs")
        if not is_timeout(timeout):
            raise IntakeError(f"{name}.timeoutMs must be an integer in 1..{MAX_TIMEOUT_MS}")
        label = _text(item.get("name"), f"{name}.name", 100) or name
        checks.append(Check(name=label, command=command, timeout_ms=timeout))
    return tuple(checks)


def _text(value: Any, name: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise IntakeError(f"{name} must be a non-empty string of at most {limit} characters")
    return value
