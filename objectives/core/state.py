"""The shape of an objective's fold (O-1 .. O-3, O-8, O-10): frozen dataclasses.

Treat dict-valued fields (authContext, scope, results ...) as read-only; they may share
structure with the receipts they came from. `objective_to_wire`/`objective_from_wire`
are the one translation to and from the camelCase JSON the summary row stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from objectives.core.dag import TaskSpec
from objectives.core.intake import Check
from objectives.core.policy import Policy
from objectives.core.vocabulary import (
    ACTIVE_OBJECTIVE_STATUSES,
    DONE_TASK_STATUSES,
    IN_FLIGHT_TASK_STATUSES,
    TERMINAL_OBJECTIVE_STATUSES,
)
from objectives.core.wire import from_wire, to_wire


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRun:
    """One candidate pass of a task: one `factory.task.run` job."""

    pass_no: int
    job_id: str
    monitor_job_id: str | None = None
    dispatched_at: int
    settled_at: int | None = None
    job_status: str | None = None
    outcome: str | None = None
    summary: str | None = None
    exit_code: int | None = None
    stdout_tail: str | None = None
    stderr_tail: str | None = None
    completion: dict[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """The last `monitor.checkpoint` of a task (O-9)."""

    job_id: str
    at: int
    liveness: str
    last_progress_at: int | None = None
    stdout_tail: str | None = None
    stderr_tail: str | None = None
    job_status: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Task(TaskSpec):
    """A planned task: its spec, as the plan gave it, and its progress."""

    status: str = "pending"
    status_at: int = 0
    runs: tuple[TaskRun, ...] = ()
    pass_base: int = 0  # runs before the last react: the pass budget restarts there
    blocked_reason: str | None = None
    last_checkpoint: Checkpoint | None = None
    checkpoints: int = 0

    @property
    def open_run(self) -> TaskRun | None:
        """The dispatched run whose outcome is not recorded yet."""
        if self.runs and self.runs[-1].outcome is None:
            return self.runs[-1]
        return None

    @property
    def passes_used(self) -> int:
        return len(self.runs) - self.pass_base

    @property
    def done(self) -> bool:
        return self.status in DONE_TASK_STATUSES

    @property
    def in_flight(self) -> bool:
        return self.status in IN_FLIGHT_TASK_STATUSES


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRequest:
    """One entry of the control outbox (O-8)."""

    id: int
    job_id: str
    reason: str
    source: str | None = None
    requested_at: int
    enqueued_at: int | None = None
    consumed_at: int | None = None
    consumed_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    at: int
    by: str | None
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRef:
    """A job the objective dispatched for a phase (tasks, monitors, integration, audit)."""

    job_id: str
    kind: str
    phase: str | None
    task_id: str | None = None
    at: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Integration:
    """O-13. status: none|requested|validating|validated|failed|publish_requested|
    promoted|publish_failed."""

    round: int = 0
    status: str = "none"
    validate_job_id: str | None = None
    results: Any = None
    failure: dict[str, Any] | None = None
    publish_round: int = 0
    publish_job_id: str | None = None
    publish_output: dict[str, Any] | None = None
    promoted_at: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Audit:
    """O-10. status: none|requested|recorded|superseded."""

    round: int = 0
    job_id: str | None = None
    status: str = "none"
    summary: dict[str, Any] | None = None
    artifact: str | None = None
    recorded_at: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectiveState:
    objective_id: str
    title: str
    prompt: str | None = None
    mode: str = "delivery"
    severity: int = 3
    status: str = "planning"
    phase: str = "plan"
    archived: bool = False
    organization_id: str | None = None
    user_id: str | None = None
    auth_context: dict[str, Any]
    channel: str | None = None
    scope: Any = None
    evidence: Any = None
    done_when: Any = None
    publish_command: str | None = None
    input_tasks: Any = None
    checks: tuple[Check, ...] = ()
    policy: Policy = field(default_factory=Policy)
    plan_revision: int = 0
    plan_source: str | None = None
    tasks: tuple[Task, ...] = ()
    slot_held: bool = False
    blocked_reason: str | None = None
    blocked_kind: str | None = None
    blocked_at: int | None = None
    cancel_requested: bool = False
    promote_requested: bool = False
    notes: tuple[Note, ...] = ()
    reacts: int = 0
    control_requests: tuple[ControlRequest, ...] = ()
    control_requests_total: int = 0
    control_passes: int = 0
    last_pass_at: int | None = None
    jobs: tuple[JobRef, ...] = ()
    integration: Integration = field(default_factory=Integration)
    audit: Audit = field(default_factory=Audit)
    result_summary: str | None = None
    terminal_reason: str | None = None
    workspace_cleaned: bool = False
    created_by: str | None = None
    active_since: int
    created_at: int
    updated_at: int
    completed_at: int | None = None
    receipt_count: int = 0
    head: str = ""

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_OBJECTIVE_STATUSES

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_OBJECTIVE_STATUSES

    @property
    def is_blocked(self) -> bool:
        return self.status == "blocked"

    def task(self, task_id: str) -> Task | None:
        return next((t for t in self.tasks if t.id == task_id), None)

    @property
    def pending_requests(self) -> tuple[ControlRequest, ...]:
        return tuple(r for r in self.control_requests if r.consumed_at is None)

    @property
    def unenqueued_requests(self) -> tuple[ControlRequest, ...]:
        return tuple(r for r in self.control_requests if r.enqueued_at is None)

    @property
    def awaiting_promotion(self) -> bool:
        return (
            self.status == "integrating"
            and self.integration.status == "validated"
            and not (self.policy.auto_promote or self.promote_requested)
        )

    def ref(self, job_id: str) -> JobRef | None:
        return next((r for r in self.jobs if r.job_id == job_id), None)


def objective_to_wire(state: ObjectiveState) -> dict[str, Any]:
    wire: dict[str, Any] = to_wire(state)
    return wire


def objective_from_wire(wire: dict[str, Any]) -> ObjectiveState:
    return from_wire(ObjectiveState, wire)
