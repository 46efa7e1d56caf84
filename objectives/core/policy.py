"""Objective policy (O-4): defaults, validation of client-supplied values, mode rules.

Decided where the spec is silent: unknown keys are refused (a typo must not silently
fall back to a default); each limit has a range; `autoPromote` is forced false for
investigation objectives whatever the client sent. `network` (Q-5) lets the objective's
commands reach the network from their sandbox; off unless asked for, and asking needs the
`factory:commands` scope at the API (`jobs.core.shell_commands`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final


class PolicyError(ValueError):
    """A client-supplied policy that cannot be used; the message names the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    max_active_tasks: int = 5
    max_task_runs: int = 50
    max_candidate_passes_per_task: int = 4
    max_objective_minutes: int = 1440
    max_dispatches_per_react: int = 10
    auto_promote: bool = True
    network: bool = False


DEFAULT_POLICY: Final = Policy()

# wire key -> (field, low, high); autoPromote and network are the booleans.
_LIMITS: Final[dict[str, tuple[str, int, int]]] = {
    "maxActiveTasks": ("max_active_tasks", 1, 100),
    "maxTaskRuns": ("max_task_runs", 1, 10_000),
    "maxCandidatePassesPerTask": ("max_candidate_passes_per_task", 1, 100),
    "maxObjectiveMinutes": ("max_objective_minutes", 1, 525_600),
    "maxDispatchesPerReact": ("max_dispatches_per_react", 1, 1_000),
}
_FLAGS: Final[dict[str, str]] = {"autoPromote": "auto_promote", "network": "network"}
POLICY_KEYS: Final[tuple[str, ...]] = (*_LIMITS, *_FLAGS)


def resolve_policy(raw: Any, *, mode: str) -> Policy:
    """The policy of a new objective: defaults overlaid with `raw` (None or an object)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise PolicyError(f"policy must be an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(POLICY_KEYS))
    if unknown:
        raise PolicyError(
            f"unknown policy key(s) {', '.join(unknown)}; known: {', '.join(POLICY_KEYS)}"
        )
    values: dict[str, Any] = {}
    for key, (attr, low, high) in _LIMITS.items():
        if key not in raw or raw[key] is None:
            continue
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise PolicyError(f"policy.{key} must be an integer in {low}..{high}, got {value!r}")
        values[attr] = value
    for key, attr in _FLAGS.items():
        flag = raw.get(key)
        if flag is not None:
            if not isinstance(flag, bool):
                raise PolicyError(f"policy.{key} must be true or false, got {flag!r}")
            values[attr] = flag
    policy = replace(DEFAULT_POLICY, **values)
    if mode == "investigation":  # O-2: investigation never auto-promotes
        policy = replace(policy, auto_promote=False)
    return policy
