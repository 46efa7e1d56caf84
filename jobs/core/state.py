"""The job's state shape: `JobState`, its `Command`s and the attempt `Fence` (J-3, J-11).

Frozen values with small pure helpers and no Django, clock or I/O. The fold that builds
them is `jobs.core.reducer`; their camelCase wire form is `jobs.core.wire` (A-2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from operator import attrgetter
from typing import Any, Final, TypeGuard

from jobs.core.vocabulary import LEASED_STATUSES, TERMINAL_STATUSES, Status, job_stream


def is_int(value: object) -> TypeGuard[int]:
    """An int and not a bool: a JSON integer in a receipt body or a wire form."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """One queue command sent to a job (J-10); ``consumed_at`` is set once a worker reads it."""

    id: str
    command: str
    lane: str | None
    payload: Any
    by: str | None
    created_at: int
    consumed_at: int | None = None

    @property
    def pending(self) -> bool:
        return self.consumed_at is None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobState:
    """The fold of one job stream. Treat ``payload``, ``result`` and command payloads as
    read-only: they may share structure with the receipts they came from."""

    job_id: str
    agent_id: str
    lane: str
    kind: str | None
    status: Status
    attempt: int
    max_attempts: int
    session_key: str | None
    singleton_mode: str
    payload: Any
    worker_id: str | None
    lease_until: int | None
    lease_ms: int | None
    abort_requested: bool
    abort_reason: str | None
    commands: tuple[Command, ...]
    result: Any
    last_error: str | None
    created_at: int
    updated_at: int
    organization_id: str | None
    objective_id: str | None
    task_id: str | None
    receipt_count: int
    head: str
    settled_by: str | None
    cancel_reason: str | None
    # the worker group its enqueue chose (`queue`), when it differs from the default route
    queue: str | None = None
    run_at: int | None = None  # G-3: not started before this (epoch ms), when it was ahead
    priority: int = 0  # G-4: -100..100 within the job's worker group
    # Operator retries (`job.retried`): how many, the latest one's `by` and time, and the
    # attempt it followed; attempts after that one are the fresh budget's.
    retries: int = 0
    retried_by: str | None = None
    retried_at: int | None = None
    retried_after_attempt: int = 0
    # A retry policy's backoff: the failed attempt's next one starts no sooner (epoch ms).
    retry_at: int | None = None
    # The concurrency cap's key the latest attempt started under (jobs.core.limits).
    limit_key: str | None = None

    @property
    def stream(self) -> str:
        return job_stream(self.job_id)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def is_active(self) -> bool:
        return not self.is_terminal

    @property
    def holds_lease(self) -> bool:
        return self.status in LEASED_STATUSES

    def scheduled_for(self, now_ms: int) -> int | None:
        """The time a queued job waits for before its next attempt, None when it may
        start now: its `run_at` before the first attempt (G-3), a retry policy's
        `retry_at` after a failed one."""
        if self.status != "queued":
            return None
        wait = self.run_at if self.attempt == 0 else self.retry_at
        return wait if wait is not None and wait > now_ms else None

    @property
    def attempts_used(self) -> int:
        """Attempts counted against `max_attempts`: those since the latest retry (attempt
        numbers keep rising across retries, so fences never repeat)."""
        return self.attempt - self.retried_after_attempt

    @property
    def pending_commands(self) -> tuple[Command, ...]:
        return tuple(c for c in self.commands if c.pending)


_JOB_FIELDS: Final = tuple(f.name for f in fields(JobState))
_job_values: Final = attrgetter(*_JOB_FIELDS)


def evolve(job: JobState, changes: dict[str, Any]) -> JobState:
    """`dataclasses.replace(job, **changes)` for the fold's hot loop: the same new state,
    without replace's per-field checks (a job state has no init-only fields), its values
    read in one C call."""
    values = dict(zip(_JOB_FIELDS, _job_values(job), strict=True))
    values.update(changes)
    return JobState(**values)


class FenceOutcome(StrEnum):
    """What a fence check found; a lost fence is an outcome, not an exception (J-11)."""

    OK = "ok"
    MISSING = "missing"  # no such job
    TERMINAL = "terminal"  # the job already settled
    LOST = "lost"  # no lease, or the lease belongs to another worker or attempt


@dataclass(frozen=True, slots=True)
class Fence:
    """The (workerId, attempt) pair every worker-side write must match (glossary, J-3)."""

    worker_id: str
    attempt: int

    def check(self, job: JobState | None) -> FenceOutcome:
        if job is None:
            return FenceOutcome.MISSING
        if job.is_terminal:
            return FenceOutcome.TERMINAL
        if not job.holds_lease or job.worker_id != self.worker_id or job.attempt != self.attempt:
            return FenceOutcome.LOST
        return FenceOutcome.OK

    def body(self) -> dict[str, Any]:
        """The fence as receipt-body fields."""
        return {"workerId": self.worker_id, "attempt": self.attempt}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Fence | None:
        """The fence a receipt body carries, or None when it has no well-formed one."""
        worker_id, attempt = body.get("workerId"), body.get("attempt")
        if isinstance(worker_id, str) and is_int(attempt):
            return cls(worker_id, attempt)
        return None
