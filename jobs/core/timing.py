"""Lease, timeout, heartbeat and concurrency formulas (K-6, K-7, K-8).

This module owns the arithmetic only. Settings arrive as a `TimingSettings` value (the
environment is parsed once by ``receipt_site/config.py``; field names match its
attributes, see `TimingSettings.from_config`); nothing here reads the environment or
a clock.

Decided where the spec is silent:

- Overrides lower, never raise: ``FACTORY_CONTROL_JOB_EXECUTION_TIMEOUT_MS`` and
  ``RECEIPT_RESONATE_HEARTBEAT_INTERVAL_MS`` give ``min(formula, override)``. The
  formulas' floors (5000 ms timeout, 1000 ms heartbeat) guard against tiny leases; an
  explicit override below a floor is a deliberate choice (runtime tests use short
  cadences) and is honoured as given. The settings parser bounds it (100 ms for the
  heartbeat interval).
- The execution-timeout override applies to kind ``factory.objective.control`` whatever
  the agent id ("for objective control only", K-7).
- ``RECEIPT_RESONATE_EXECUTE_CONCURRENCY`` overrides every group's concurrency, the
  driver's included (K-8: "overrides every default").
- A declared worker group (`jobs.core.groups`) takes each setting it does not give from
  the global one: lease ``JOB_LEASE_MS``; concurrency ``RECEIPT_RESONATE_EXECUTE_CONCURRENCY``
  when set, else ``CHAT_JOB_CONCURRENCY`` (a group of plain tasks is sized like chat); its
  own concurrency wins over the global override, being the more specific. Its execution
  timeout lowers the lease-derived one, like the objective-control override.
- K-6 for agent ``codex``: ``timeoutMs`` counts when it is a finite JSON number (not a
  boolean); a fractional result is rounded up, never down, so the lease is never short.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Final

from jobs.core.groups import BUILTIN_GROUPS, GroupSettings
from jobs.core.scheduling import DEFAULT_PRIORITY_AGING_MS

DEFAULT_JOB_LEASE_MS: Final = 300_000
DEFAULT_CODEX_JOB_LEASE_MS: Final = 900_000
DEFAULT_FACTORY_CONTROL_JOB_LEASE_MS: Final = 900_000
DEFAULT_ACTIVE_STALE_MS: Final = 600_000

CODEX_TIMEOUT_GRACE_MS: Final = 300_000  # K-6: payload.timeoutMs + 5 minutes
CODEX_LEASE_CEILING_MS: Final = 3_600_000  # K-6: ... capped at one hour
EXECUTION_TIMEOUT_FLOOR_MS: Final = 5_000
EXECUTION_TIMEOUT_MARGIN_MS: Final = 1_000
HEARTBEAT_FLOOR_MS: Final = 1_000
HEARTBEATS_PER_WINDOW: Final = 3
DRIVER_TIMEOUT_MARGIN_MS: Final = 60_000
DRIVER_TIMEOUT_FLOOR_MS: Final = 120_000
DRIVER_CONCURRENCY: Final = 1

OBJECTIVE_CONTROL_KIND: Final = "factory.objective.control"
TASK_MONITOR_KIND: Final = "factory.task.monitor"
COMPUTER_EXECUTION_PATH: Final = "computer"

ConcurrencyGroup = str  # a worker group (built-in or declared) or "driver"

# SPEC 13: the environment variable behind each field, for messages and the dashboard.
TIMING_ENV: Final[dict[str, str]] = {
    "job_lease_ms": "JOB_LEASE_MS",
    "codex_job_lease_ms": "CODEX_JOB_LEASE_MS",
    "factory_control_job_lease_ms": "FACTORY_CONTROL_JOB_LEASE_MS",
    "factory_control_job_execution_timeout_ms": "FACTORY_CONTROL_JOB_EXECUTION_TIMEOUT_MS",
    "heartbeat_interval_ms": "RECEIPT_RESONATE_HEARTBEAT_INTERVAL_MS",
    "active_stale_ms": "RECEIPT_RESONATE_ACTIVE_STALE_MS",
    "execute_concurrency": "RECEIPT_RESONATE_EXECUTE_CONCURRENCY",
    "chat_job_concurrency": "CHAT_JOB_CONCURRENCY",
    "orchestration_job_concurrency": "ORCHESTRATION_JOB_CONCURRENCY",
    "codex_job_concurrency": "CODEX_JOB_CONCURRENCY",
    "worker_groups": "RECEIPT_WORKER_GROUPS",
    "priority_aging_ms": "RECEIPT_PRIORITY_AGING_MS",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TimingSettings:
    """The settings the formulas read; None means "not set" for the optional overrides.

    Every value must be a positive integer; a bad one raises ValueError naming its
    environment variable.
    """

    job_lease_ms: int = DEFAULT_JOB_LEASE_MS
    codex_job_lease_ms: int = DEFAULT_CODEX_JOB_LEASE_MS
    factory_control_job_lease_ms: int = DEFAULT_FACTORY_CONTROL_JOB_LEASE_MS
    factory_control_job_execution_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None
    active_stale_ms: int = DEFAULT_ACTIVE_STALE_MS
    execute_concurrency: int | None = None
    chat_job_concurrency: int = 4
    orchestration_job_concurrency: int = 1
    codex_job_concurrency: int = 1
    worker_groups: tuple[GroupSettings, ...] = ()  # the deployment's own, as declared
    priority_aging_ms: int = DEFAULT_PRIORITY_AGING_MS  # G-4: jobs.core.scheduling

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "worker_groups":
                if not all(isinstance(group, GroupSettings) for group in value):
                    raise ValueError("RECEIPT_WORKER_GROUPS must be declared groups")
                continue
            if value is None and field.default is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"{TIMING_ENV[field.name]} must be a positive integer, got {value!r}"
                )

    @classmethod
    def from_config(cls, config: object) -> TimingSettings:
        """Copy the same-named attributes of a settings object (``receipt_site.config``);
        one without ``worker_groups`` declares none."""
        return cls(
            **{
                field.name: getattr(config, field.name)
                for field in fields(cls)
                if field.name != "worker_groups" or hasattr(config, field.name)
            }
        )

    def group_names(self) -> tuple[str, ...]:
        """Every worker group a job may run on: the built-in three, then the declared."""
        return (*BUILTIN_GROUPS, *(group.name for group in self.worker_groups))

    def declared(self, group: str | None) -> GroupSettings | None:
        """A declared group's settings; None for a built-in or unknown group."""
        for declared in self.worker_groups:
            if declared.name == group:
                return declared
        return None


def lease_ms_for(
    agent_id: str, payload: object, settings: TimingSettings, *, group: str | None = None
) -> int:
    """The lease of a new job (K-6), from its agent id and payload, and the lease of the
    declared worker group it runs on, if that group sets one."""
    fields_ = payload if isinstance(payload, dict) else {}
    kind = fields_.get("kind")
    declared = settings.declared(group)
    default = settings.job_lease_ms
    if declared is not None and declared.lease_ms is not None:
        default = declared.lease_ms
    if agent_id == "factory-control" and kind == OBJECTIVE_CONTROL_KIND:
        return max(default, settings.factory_control_job_lease_ms)
    if (
        agent_id == "factory-monitor"
        and kind == TASK_MONITOR_KIND
        and fields_.get("executionPath") == COMPUTER_EXECUTION_PATH
    ):
        return max(settings.codex_job_lease_ms, default)
    if agent_id == "codex":
        timeout_ms = _finite_number(fields_.get("timeoutMs"))
        if timeout_ms is None:
            return max(settings.codex_job_lease_ms, default)
        wanted = min(timeout_ms + CODEX_TIMEOUT_GRACE_MS, CODEX_LEASE_CEILING_MS)
        return max(settings.codex_job_lease_ms, math.ceil(wanted))
    return default


def execution_timeout_ms(
    lease_ms: int, kind: str | None, settings: TimingSettings, *, group: str | None = None
) -> int:
    """How long a handler may run in one attempt (K-7), lowered by its declared worker
    group's timeout, if that group sets one."""
    timeout = max(EXECUTION_TIMEOUT_FLOOR_MS, lease_ms - EXECUTION_TIMEOUT_MARGIN_MS)
    declared = settings.declared(group)
    if declared is not None and declared.execution_timeout_ms is not None:
        timeout = min(timeout, declared.execution_timeout_ms)
    override = settings.factory_control_job_execution_timeout_ms
    if kind == OBJECTIVE_CONTROL_KIND and override is not None:
        return min(timeout, override)
    return timeout


def heartbeat_interval_ms(lease_ms: int, settings: TimingSettings) -> int:
    """The heartbeat cadence (K-7): three beats per lease or stale window, whichever is less."""
    window = min(lease_ms, settings.active_stale_ms)
    interval = max(HEARTBEAT_FLOOR_MS, window // HEARTBEATS_PER_WINDOW)
    if settings.heartbeat_interval_ms is not None:
        return min(interval, settings.heartbeat_interval_ms)
    return interval


def driver_timeout_ms(lease_ms: int) -> int:
    """The driver invocation's promise timeout (K-7)."""
    return max(lease_ms + DRIVER_TIMEOUT_MARGIN_MS, DRIVER_TIMEOUT_FLOOR_MS)


def concurrency_for(group: ConcurrencyGroup, settings: TimingSettings) -> int:
    """Worker concurrency of a role's cluster (K-8), a declared group's included."""
    declared = settings.declared(group)
    if declared is not None and declared.concurrency is not None:
        return declared.concurrency
    defaults: dict[str, int] = {
        "chat": settings.chat_job_concurrency,
        "control": settings.orchestration_job_concurrency,
        "codex": settings.codex_job_concurrency,
        "driver": DRIVER_CONCURRENCY,
    }
    if declared is not None:
        defaults[group] = settings.chat_job_concurrency
    if group not in defaults:
        known = ", ".join([*settings.group_names(), "driver"])
        raise ValueError(f"unknown worker group {group!r}; expected one of {known}")
    if settings.execute_concurrency is not None:
        return settings.execute_concurrency
    return defaults[group]


def _finite_number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value  # exact, however large (math.isfinite would overflow)
    if isinstance(value, float) and math.isfinite(value):
        return value
    return None
