"""The objective vocabulary (O-1 .. O-13): statuses, modes, task statuses, receipt types, ids.

Strings here are the wire contract. This module owns the names, the stream and job-id
rules; it must not know how objectives are stored or run.
"""

from __future__ import annotations

import re
from typing import Final

OBJECTIVE_STREAM_PREFIX: Final = "factory/objectives/"
RUN_STREAM_PREFIX: Final = "agents/factory/runs/"

# O-2 objective statuses.
OBJECTIVE_STATUSES: Final[tuple[str, ...]] = (
    "planning",
    "waiting_for_slot",
    "collecting_evidence",
    "evidence_ready",
    "synthesizing",
    "executing",
    "integrating",
    "promoting",
    "blocked",
    "completed",
    "failed",
    "canceled",
)
TERMINAL_OBJECTIVE_STATUSES: Final[frozenset[str]] = frozenset({"completed", "failed", "canceled"})
# every status but the terminal ones and `blocked` (which waits for an operator)
ACTIVE_OBJECTIVE_STATUSES: Final[frozenset[str]] = (
    frozenset(OBJECTIVE_STATUSES) - TERMINAL_OBJECTIVE_STATUSES - {"blocked"}
)

MODES: Final[tuple[str, ...]] = ("delivery", "investigation")
DEFAULT_MODE: Final = "delivery"
MIN_SEVERITY, MAX_SEVERITY, DEFAULT_SEVERITY = 1, 5, 3

# O-3 task statuses: pending, ready, running, reviewing, approved, integrated, blocked,
# superseded.
DONE_TASK_STATUSES: Final[frozenset[str]] = frozenset({"approved", "integrated", "superseded"})
IN_FLIGHT_TASK_STATUSES: Final[frozenset[str]] = frozenset({"running", "reviewing"})

# O-6 task outcomes (result.json) plus the executor's own.
OUTCOMES: Final[tuple[str, ...]] = ("approved", "changes_requested", "blocked", "partial")
FAILED_OUTCOME: Final = "failed"  # non-zero exit without result.json, or the job failed
CANCELED_OUTCOME: Final = "canceled"  # Factory stopped the job itself (stalled, superseded)
ABORTED_OUTCOME: Final = "aborted"  # someone else aborted the job: the task stops there

# Phases: the step inside a status; jobs record the phase they serve (L-4 supersession).
PHASE_PLAN, PHASE_SLOT, PHASE_EXECUTE = "plan", "slot", "execute"
PHASE_VALIDATE, PHASE_PROMOTION, PHASE_PUBLISH = "validate", "promotion", "publish"
PHASE_SYNTHESIZE, PHASE_AUDIT, PHASE_DONE = "synthesize", "audit", "done"

# Objective receipt types (body.type) on factory/objectives/<objectiveId>.
OBJECTIVE_CREATED: Final = "objective.created"
OBJECTIVE_PLANNED: Final = "objective.planned"
SLOT_WAITING: Final = "objective.slot.waiting"
SLOT_ACQUIRED: Final = "objective.slot.acquired"
TASKS_READY: Final = "tasks.ready"
TASK_DISPATCHED: Final = "task.dispatched"
TASK_JOB_SETTLED: Final = "task.job.settled"
TASK_OUTCOME: Final = "task.outcome.recorded"
MONITOR_CHECKPOINT: Final = "monitor.checkpoint"
OBJECTIVE_BLOCKED: Final = "objective.blocked"
NOTE_ADDED: Final = "objective.note.added"
REACT_REQUESTED: Final = "objective.react.requested"
PROMOTE_REQUESTED: Final = "objective.promote.requested"
ARCHIVED: Final = "objective.archived"
CANCEL_REQUESTED: Final = "objective.cancel.requested"
CANCELED: Final = "objective.canceled"
FAILED: Final = "objective.failed"
COMPLETED: Final = "objective.completed"
EVIDENCE_READY: Final = "objective.evidence.ready"
SYNTHESIZED: Final = "objective.synthesized"
INTEGRATION_REQUESTED: Final = "integration.requested"
INTEGRATION_VALIDATING: Final = "integration.validating"
INTEGRATION_VALIDATED: Final = "integration.validated"
INTEGRATION_VALIDATION_FAILED: Final = "integration.validation.failed"
PUBLISH_REQUESTED: Final = "integration.publish.requested"
INTEGRATION_PROMOTED: Final = "integration.promoted"
PUBLISH_FAILED: Final = "integration.publish.failed"
CONTROL_REQUESTED: Final = "objective.control.enqueue.requested"
CONTROL_ENQUEUED: Final = "objective.control.enqueued"
CONTROL_PASS: Final = "objective.control.pass"
AUDIT_REQUESTED: Final = "objective.audit.requested"
AUDIT_RECORDED: Final = "objective.audit.recorded"
AUDIT_SUPERSEDED: Final = "objective.audit.superseded"
WORKSPACE_CLEANED: Final = "objective.workspace.cleaned"
JOB_COMMAND_SENT: Final = "objective.job.command"

# Agent ids (K-4) and kinds (K-1) Factory dispatches.
FACTORY_AGENT, CONTROL_AGENT, MONITOR_AGENT, CODEX_AGENT = (
    "factory",
    "factory-control",
    "factory-monitor",
    "codex",
)
KIND_DISPATCH, KIND_RUN = "factory.dispatch", "factory.run"
KIND_CONTROL, KIND_WATCHDOG, KIND_AUDIT = (
    "factory.objective.control",
    "factory.objective.watchdog",
    "factory.objective.audit",
)
KIND_TASK_RUN, KIND_MONITOR = "factory.task.run", "factory.task.monitor"
KIND_VALIDATE, KIND_PUBLISH = "factory.integration.validate", "factory.integration.publish"

OBJECTIVE_ID_MAX = 40
TASK_ID_MAX = 40
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # objective and task ids alike


def objective_stream(objective_id: str) -> str:
    return f"{OBJECTIVE_STREAM_PREFIX}{objective_id}"


def objective_id_from_stream(stream: str) -> str | None:
    if not stream.startswith(OBJECTIVE_STREAM_PREFIX):
        return None
    rest = stream[len(OBJECTIVE_STREAM_PREFIX) :]
    return rest if rest and "/" not in rest else None


def run_stream(run_id: str) -> str:
    return f"{RUN_STREAM_PREFIX}{run_id}"


def is_objective_id(value: object) -> bool:
    return _is_id(value, OBJECTIVE_ID_MAX)


def is_task_id(value: object) -> bool:
    return _is_id(value, TASK_ID_MAX)


def _is_id(value: object, max_length: int) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= max_length and bool(_ID.fullmatch(value))


# Deterministic job ids: a redispatch of the same intent is the same job (J-6).
def task_job_id(objective_id: str, task_id: str, pass_no: int) -> str:
    return f"task-{objective_id}-{task_id}-p{pass_no}"


def monitor_job_id(objective_id: str, task_id: str, pass_no: int) -> str:
    return f"mon-{objective_id}-{task_id}-p{pass_no}"


def control_job_id(objective_id: str, request_no: int) -> str:
    return f"ctl-{objective_id}-r{request_no}"


def validate_job_id(objective_id: str, round_no: int) -> str:
    return f"validate-{objective_id}-r{round_no}"


def publish_job_id(objective_id: str, round_no: int) -> str:
    return f"publish-{objective_id}-r{round_no}"


def audit_job_id(objective_id: str, round_no: int) -> str:
    return f"audit-{objective_id}" if round_no <= 1 else f"audit-{objective_id}-r{round_no}"
