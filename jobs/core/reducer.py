"""The job fold (J-3, J-4): a pure ``reduce(state, receipt)`` over a ``jobs/<jobId>`` stream.

This module owns the job's state shape (`JobState`, `Command`), the fold, the attempt
fence (`Fence`) and the one translation of a job to and from its camelCase wire form
(A-2). It must not import Django, read a clock or touch I/O: every time it records is a
receipt's ``ts`` or a value carried in a receipt body.

Rules the spec leaves open, decided here:

- Bookkeeping. ``receipt_count``, ``head`` (hash of the last receipt) and ``updated_at``
  (ts of the last receipt) describe the stream, not the job, so they advance with every
  receipt folded into an existing job, inert ones included (an ignored second lease, a
  write from a superseded attempt, anything after settlement, unknown types). The two
  events ignored on a missing job (``job.failed``, ``job.lease_expired``) return None and
  so leave no bookkeeping behind: there is no job to count them on.
- Terminal jobs. Once ``completed``, ``failed`` or ``canceled`` nothing but bookkeeping
  changes, so a job settles exactly once. ``settled_by`` names the receipt type that
  settled it (``job.lease_expired`` when an expired lease used up the last attempt).
- Active lease. A write "matches the active lease" when the job is ``leased`` or
  ``running`` and the body's ``workerId`` and ``attempt`` equal the job's (see `Fence`).
  ``job.heartbeat``, ``job.progress``, ``job.completed``, ``job.failed`` and
  ``job.lease_expired`` are inert otherwise.
- ``job.heartbeat`` sets ``lease_until`` to the later of the current and the new value
  ("extends": a skewed clock on another machine never shortens a lease). ``job.progress``
  from the active lease promotes ``leased`` to ``running`` (the worker is demonstrably
  executing) but does not touch the lease, which only heartbeats carry.
- Settlement clears ``lease_until`` and keeps ``worker_id`` (the worker that settled).
  A requeue (``job.failed`` with ``willRetry``, or ``job.lease_expired`` with attempts
  left) clears both. ``job.completed`` keeps an earlier attempt's ``last_error``.
- ``job.failed``: only ``willRetry is True`` requeues; the queue decides it, the fold
  records it. ``last_error`` is the body's ``error`` (a non-string error is stored as its
  canonical JSON text); ``result`` is replaced only when the body has a ``result`` key.
- ``job.lease_expired`` decides from ``attempt < max_attempts`` (J-4), not from the body's
  ``willRetry``, and sets ``last_error`` to ``"lease expired"`` whether it requeues or fails.
- ``job.canceled`` on an active job. A body carrying ``workerId`` or ``attempt`` is a
  worker's (fenced) cancel: it applies only when both match the active lease, so it is
  inert on a queued job (a requeued job belongs to its next attempt). A body carrying
  neither is an unfenced cancel by the queue, an operator or the driver (J-7, J-10, D-4)
  and applies to any active job, queued, leased or running: whether an unfenced cancel
  may hit work in flight is the queue service's policy (it sends leased and running jobs
  an abort command instead), and the fold never drops a settlement its only writer chose.
- ``queue.command`` appends a `Command` (``consumed_at`` None); a repeated ``commandId``
  is ignored (first wins). An ``abort`` sets ``abort_requested`` and ``abort_reason``
  from ``payload.reason`` (else the body's ``reason``); a later abort without a reason
  keeps the earlier one. Command types and lanes are validated by the queue, not here.
- ``queue.command.consumed`` stamps ``consumed_at`` (receipt ts) on the listed ids not yet
  consumed; unknown ids are ignored. It takes no fence in the fold: the queue checks
  the fence when it writes (J-11), and a consumption is a fact about the command.
- A second ``job.enqueued`` and unknown receipt types change only bookkeeping. On a
  missing job every type except ``job.failed`` and ``job.lease_expired`` raises, unknown
  types included (J-3).
- ``job.leased`` on a queued job must carry an attempt greater than the job's (the queue
  uses attempt + 1): reusing an attempt number would let a superseded attempt's late
  writes match the new fence, so such a lease raises `InvariantError`.
- The stream names the job: after ``job.enqueued`` a body's ``jobId`` is used only in
  error messages. Bodies that would change state but are malformed (a lease without an
  integer attempt, an enqueue without an agentId) raise `InvariantError`; projectors run
  inside the append (S-5), so such a receipt is never written.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final, TypeGuard, TypeVar

from jobs.core.vocabulary import (
    DEFAULT_LANE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_SINGLETON_MODE,
    JOB_CANCELED,
    JOB_COMPLETED,
    JOB_ENQUEUED,
    JOB_FAILED,
    JOB_HEARTBEAT,
    JOB_LEASE_EXPIRED,
    JOB_LEASED,
    JOB_PROGRESS,
    LEASED_STATUSES,
    QUEUE_COMMAND,
    QUEUE_COMMAND_CONSUMED,
    TERMINAL_STATUSES,
    Status,
    is_status,
    job_id_from_stream,
    job_stream,
    validate_job_id,
)
from receipts.core.chain import Receipt

LEASE_EXPIRED_ERROR: Final = "lease expired"

T = TypeVar("T")

# J-3: the two events a fold tolerates for a job that does not exist.
_IGNORED_WHEN_MISSING: Final = frozenset({JOB_FAILED, JOB_LEASE_EXPIRED})


class InvariantError(Exception):
    """A receipt that the job fold cannot accept (J-3); the message names job and type."""

    code = "job_invariant"

    def __init__(self, message: str, *, job_id: str, receipt_type: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.receipt_type = receipt_type


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

    @property
    def pending_commands(self) -> tuple[Command, ...]:
        return tuple(c for c in self.commands if c.pending)


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
        if isinstance(worker_id, str) and _is_int(attempt):
            return cls(worker_id, attempt)
        return None


# --- the fold -------------------------------------------------------------------------


def reduce(state: JobState | None, receipt: Receipt) -> JobState | None:
    """Apply one receipt to a job's state (J-3, J-4); see the module docstring for rules."""
    kind = receipt.type
    if state is None:
        if kind == JOB_ENQUEUED:
            return _create(receipt)
        if kind in _IGNORED_WHEN_MISSING:
            return None  # a late settlement of a job never appended cannot break a fold
        job_id = _body_job_id(receipt)
        raise InvariantError(
            f"Invariant: no job {job_id} for {kind}", job_id=job_id, receipt_type=kind
        )
    job = state
    if not state.is_terminal:  # J-3: a job settles exactly once
        job = _APPLY.get(kind, _unchanged)(state, receipt)
    return replace(
        job, receipt_count=state.receipt_count + 1, head=receipt.hash, updated_at=receipt.ts
    )


def fold_job(receipts: Iterable[Receipt]) -> JobState | None:
    """The state of a job after all of `receipts` (S-7), None if it never existed."""
    state: JobState | None = None
    for receipt in receipts:
        state = reduce(state, receipt)
    return state


def _create(receipt: Receipt) -> JobState:
    body = receipt.body
    job_id = _body_job_id(receipt)
    try:
        validate_job_id(body.get("jobId"))
    except ValueError as error:
        raise _malformed(receipt, job_id, f"jobId: {error}") from None
    payload = body.get("payload")
    fields = payload if isinstance(payload, dict) else {}
    auth = fields.get("authContext")
    auth_fields = auth if isinstance(auth, dict) else {}
    return JobState(
        job_id=job_id,
        agent_id=_required_str(receipt, job_id, "agentId"),
        lane=_or_default(_optional_str(receipt, job_id, "lane"), DEFAULT_LANE),
        kind=_str_or_none(fields.get("kind")),
        status="queued",
        attempt=0,
        max_attempts=_or_default(
            _optional_int(receipt, job_id, "maxAttempts"), DEFAULT_MAX_ATTEMPTS
        ),
        session_key=_optional_str(receipt, job_id, "sessionKey"),
        singleton_mode=_or_default(
            _optional_str(receipt, job_id, "singletonMode"), DEFAULT_SINGLETON_MODE
        ),
        payload=payload,
        worker_id=None,
        lease_until=None,
        lease_ms=_optional_int(receipt, job_id, "leaseMs"),
        abort_requested=False,
        abort_reason=None,
        commands=(),
        result=None,
        last_error=None,
        created_at=receipt.ts,
        updated_at=receipt.ts,
        organization_id=_str_or_none(auth_fields.get("organizationId")),
        objective_id=_str_or_none(fields.get("objectiveId")),
        task_id=_str_or_none(fields.get("taskId")),
        receipt_count=1,
        head=receipt.hash,
        settled_by=None,
        cancel_reason=None,
    )


def _unchanged(job: JobState, receipt: Receipt) -> JobState:
    return job  # a second job.enqueued, or a type the fold does not know


def _leased(job: JobState, receipt: Receipt) -> JobState:
    if job.status != "queued":  # a second lease changes nothing (J-3)
        return job
    attempt = _required_int(receipt, job.job_id, "attempt")
    if attempt <= job.attempt:  # a reused attempt number would revive a superseded fence
        raise _malformed(
            receipt, job.job_id, f"attempt {attempt} must exceed the job's attempt {job.attempt}"
        )
    return replace(
        job,
        status="leased",
        attempt=attempt,
        worker_id=_required_str(receipt, job.job_id, "workerId"),
        lease_until=_required_int(receipt, job.job_id, "leaseUntil"),
    )


def _heartbeat(job: JobState, receipt: Receipt) -> JobState:
    if not _matches_lease(job, receipt):  # a superseded attempt's beat is inert (J-3)
        return job
    lease_until = _required_int(receipt, job.job_id, "leaseUntil")
    if job.lease_until is not None:
        lease_until = max(lease_until, job.lease_until)
    return replace(job, status="running", lease_until=lease_until)


def _progress(job: JobState, receipt: Receipt) -> JobState:
    if not _matches_lease(job, receipt):
        return job
    return replace(job, status="running")


def _completed(job: JobState, receipt: Receipt) -> JobState:
    if not _matches_lease(job, receipt):
        return job
    return replace(
        job,
        status="completed",
        result=receipt.body.get("result"),
        lease_until=None,
        settled_by=JOB_COMPLETED,
    )


def _failed(job: JobState, receipt: Receipt) -> JobState:
    if not _matches_lease(job, receipt):
        return job
    body = receipt.body
    error = _error_text(body.get("error"))
    if body.get("willRetry") is True:  # J-4: back to the queue, attempt kept
        return replace(job, status="queued", worker_id=None, lease_until=None, last_error=error)
    return replace(
        job,
        status="failed",
        last_error=error,
        result=body.get("result", job.result),
        lease_until=None,
        settled_by=JOB_FAILED,
    )


def _lease_expired(job: JobState, receipt: Receipt) -> JobState:
    if not _matches_lease(job, receipt):
        return job
    if job.attempt < job.max_attempts:  # J-4: attempts remain
        return replace(
            job, status="queued", worker_id=None, lease_until=None, last_error=LEASE_EXPIRED_ERROR
        )
    return replace(
        job,
        status="failed",
        lease_until=None,
        last_error=LEASE_EXPIRED_ERROR,
        settled_by=JOB_LEASE_EXPIRED,
    )


def _canceled(job: JobState, receipt: Receipt) -> JobState:
    body = receipt.body
    fenced = body.get("workerId") is not None or body.get("attempt") is not None
    if fenced and not _matches_lease(job, receipt):
        return job
    return replace(
        job,
        status="canceled",
        cancel_reason=_str_or_none(body.get("reason")),
        lease_until=None,
        settled_by=JOB_CANCELED,
    )


def _command(job: JobState, receipt: Receipt) -> JobState:
    body = receipt.body
    command_id = _required_str(receipt, job.job_id, "commandId")
    if any(existing.id == command_id for existing in job.commands):
        return job  # the same command twice is one command
    command = Command(
        id=command_id,
        command=_required_str(receipt, job.job_id, "command"),
        lane=_optional_str(receipt, job.job_id, "lane"),
        payload=body.get("payload"),
        by=_optional_str(receipt, job.job_id, "by"),
        created_at=receipt.ts,
    )
    job = replace(job, commands=(*job.commands, command))
    if command.command != "abort":
        return job
    payload = command.payload if isinstance(command.payload, dict) else {}
    reason = _str_or_none(payload.get("reason")) or _str_or_none(body.get("reason"))
    return replace(job, abort_requested=True, abort_reason=reason or job.abort_reason)


def _consumed(job: JobState, receipt: Receipt) -> JobState:
    ids = receipt.body.get("commandIds")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _malformed(receipt, job.job_id, "commandIds must be a list of strings")
    wanted = set(ids)
    commands = tuple(
        replace(c, consumed_at=receipt.ts) if c.pending and c.id in wanted else c
        for c in job.commands
    )
    return replace(job, commands=commands)


_APPLY: Final[dict[str, Callable[[JobState, Receipt], JobState]]] = {
    JOB_ENQUEUED: _unchanged,  # an existing job is never disturbed by a second enqueue (J-6)
    JOB_LEASED: _leased,
    JOB_HEARTBEAT: _heartbeat,
    JOB_PROGRESS: _progress,
    JOB_COMPLETED: _completed,
    JOB_FAILED: _failed,
    JOB_CANCELED: _canceled,
    QUEUE_COMMAND: _command,
    QUEUE_COMMAND_CONSUMED: _consumed,
    JOB_LEASE_EXPIRED: _lease_expired,
}


def _matches_lease(job: JobState, receipt: Receipt) -> bool:
    fence = Fence.from_body(receipt.body)
    return fence is not None and fence.check(job) is FenceOutcome.OK


# --- body access ----------------------------------------------------------------------


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _or_default(value: T | None, default: T) -> T:
    return default if value is None else value


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _error_text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _body_job_id(receipt: Receipt) -> str:
    job_id = receipt.body.get("jobId")
    if isinstance(job_id, str):
        return job_id
    return job_id_from_stream(receipt.stream) or "?"


def _malformed(receipt: Receipt, job_id: str, problem: str) -> InvariantError:
    return InvariantError(
        f"Invariant: malformed {receipt.type} for job {job_id}: {problem}",
        job_id=job_id,
        receipt_type=receipt.type,
    )


def _required_str(receipt: Receipt, job_id: str, key: str) -> str:
    value = receipt.body.get(key)
    if not isinstance(value, str):
        raise _malformed(receipt, job_id, f"{key} must be a string, got {value!r}")
    return value


def _optional_str(receipt: Receipt, job_id: str, key: str) -> str | None:
    value = receipt.body.get(key)
    if value is not None and not isinstance(value, str):
        raise _malformed(receipt, job_id, f"{key} must be a string or null, got {value!r}")
    return value


def _required_int(receipt: Receipt, job_id: str, key: str) -> int:
    value = receipt.body.get(key)
    if not _is_int(value):
        raise _malformed(receipt, job_id, f"{key} must be an integer, got {value!r}")
    return value


def _optional_int(receipt: Receipt, job_id: str, key: str) -> int | None:
    value = receipt.body.get(key)
    if value is None:
        return None
    if not _is_int(value):
        raise _malformed(receipt, job_id, f"{key} must be an integer or null, got {value!r}")
    return value


# --- the wire form (A-2) --------------------------------------------------------------


def command_to_wire(command: Command) -> dict[str, Any]:
    return {
        "id": command.id,
        "command": command.command,
        "lane": command.lane,
        "payload": copy.deepcopy(command.payload),
        "by": command.by,
        "createdAt": command.created_at,
        "consumedAt": command.consumed_at,
    }


def job_to_wire(state: JobState) -> dict[str, Any]:
    """The camelCase JSON form of a job (A-2) that the read model stores.

    Beyond A-2's list it carries ``abortReason``, ``settledBy``, ``cancelReason``,
    ``organizationId``, ``objectiveId`` and ``taskId`` so `job_from_wire` can rebuild the
    state exactly. ``contractGroup``/``routedGroup`` are derived by the API, not stored.
    """
    return {
        "id": state.job_id,
        "agentId": state.agent_id,
        "lane": state.lane,
        "kind": state.kind,
        "status": state.status,
        "attempt": state.attempt,
        "maxAttempts": state.max_attempts,
        "sessionKey": state.session_key,
        "singletonMode": state.singleton_mode,
        "payload": copy.deepcopy(state.payload),
        "workerId": state.worker_id,
        "leaseUntil": state.lease_until,
        "leaseMs": state.lease_ms,
        "abortRequested": state.abort_requested,
        "abortReason": state.abort_reason,
        "commands": [command_to_wire(c) for c in state.commands],
        "result": copy.deepcopy(state.result),
        "lastError": state.last_error,
        "createdAt": state.created_at,
        "updatedAt": state.updated_at,
        "stream": state.stream,
        "receiptCount": state.receipt_count,
        "head": state.head,
        "settledBy": state.settled_by,
        "cancelReason": state.cancel_reason,
        "organizationId": state.organization_id,
        "objectiveId": state.objective_id,
        "taskId": state.task_id,
    }


def command_from_wire(wire: Mapping[str, Any]) -> Command:
    reader = _WireReader(wire, "command")
    return Command(
        id=reader.text("id"),
        command=reader.text("command"),
        lane=reader.opt_text("lane"),
        payload=copy.deepcopy(reader.any("payload")),
        by=reader.opt_text("by"),
        created_at=reader.integer("createdAt"),
        consumed_at=reader.opt_integer("consumedAt"),
    )


def job_from_wire(wire: Mapping[str, Any]) -> JobState:
    """Rebuild a `JobState` from `job_to_wire` output; raise ValueError on a bad form.

    Every key `job_to_wire` writes is required except the derived ``stream``; keys it does
    not write (``contractGroup``, ``routedGroup`` ...) are ignored.
    """
    reader = _WireReader(wire, "job")
    status = reader.text("status")
    if not is_status(status):
        raise ValueError(f"job wire form: 'status' {status!r} is not a job status")
    commands = reader.any("commands")
    if not isinstance(commands, list) or not all(isinstance(c, Mapping) for c in commands):
        raise ValueError("job wire form: 'commands' must be a list of objects")
    return JobState(
        job_id=reader.text("id"),
        agent_id=reader.text("agentId"),
        lane=reader.text("lane"),
        kind=reader.opt_text("kind"),
        status=status,
        attempt=reader.integer("attempt"),
        max_attempts=reader.integer("maxAttempts"),
        session_key=reader.opt_text("sessionKey"),
        singleton_mode=reader.text("singletonMode"),
        payload=copy.deepcopy(reader.any("payload")),
        worker_id=reader.opt_text("workerId"),
        lease_until=reader.opt_integer("leaseUntil"),
        lease_ms=reader.opt_integer("leaseMs"),
        abort_requested=reader.flag("abortRequested"),
        abort_reason=reader.opt_text("abortReason"),
        commands=tuple(command_from_wire(c) for c in commands),
        result=copy.deepcopy(reader.any("result")),
        last_error=reader.opt_text("lastError"),
        created_at=reader.integer("createdAt"),
        updated_at=reader.integer("updatedAt"),
        organization_id=reader.opt_text("organizationId"),
        objective_id=reader.opt_text("objectiveId"),
        task_id=reader.opt_text("taskId"),
        receipt_count=reader.integer("receiptCount"),
        head=reader.text("head"),
        settled_by=reader.opt_text("settledBy"),
        cancel_reason=reader.opt_text("cancelReason"),
    )


class _WireReader:
    """Typed access to a wire mapping; every failure names the form and the key."""

    def __init__(self, wire: Mapping[str, Any], what: str) -> None:
        if not isinstance(wire, Mapping):
            raise ValueError(f"{what} wire form must be an object, got {type(wire).__name__}")
        self._wire = wire
        self._what = what

    def any(self, key: str) -> Any:
        if key not in self._wire:
            raise ValueError(f"{self._what} wire form lacks {key!r}")
        return self._wire[key]

    def _fail(self, key: str, expected: str) -> ValueError:
        return ValueError(
            f"{self._what} wire form: {key!r} must be {expected}, got {self._wire[key]!r}"
        )

    def text(self, key: str) -> str:
        value = self.any(key)
        if not isinstance(value, str):
            raise self._fail(key, "a string")
        return value

    def opt_text(self, key: str) -> str | None:
        value = self.any(key)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, "a string or null")
        return value

    def integer(self, key: str) -> int:
        value = self.any(key)
        if not _is_int(value):
            raise self._fail(key, "an integer")
        return value

    def opt_integer(self, key: str) -> int | None:
        value = self.any(key)
        if value is None:
            return None
        return self.integer(key)

    def flag(self, key: str) -> bool:
        value = self.any(key)
        if not isinstance(value, bool):
            raise self._fail(key, "a boolean")
        return value
