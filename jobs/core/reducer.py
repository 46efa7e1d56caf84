"""The job fold (J-3, J-4): a pure ``reduce(state, receipt)`` over a ``jobs/<jobId>`` stream.

It builds the `JobState` of `jobs.core.state` (whose wire form is `jobs.core.wire`) and
must not import Django, read a clock or touch I/O: every time it records is a receipt's
``ts`` or a value carried in a receipt body.

Rules the spec leaves open, decided here:

- Bookkeeping. ``receipt_count``, ``head`` (hash of the last receipt) and ``updated_at``
  (ts of the last receipt) describe the stream, not the job, so they advance with every
  receipt folded into an existing job, inert ones included (an ignored second lease, a
  write from a superseded attempt, anything after settlement, unknown types). The two
  events ignored on a missing job (``job.failed``, ``job.lease_expired``) return None and
  so leave no bookkeeping behind: there is no job to count them on.
- Terminal jobs. Once ``completed``, ``failed`` or ``canceled`` nothing but bookkeeping
  changes, so a job settles exactly once per retry cycle. ``settled_by`` names the receipt
  type that settled it (``job.lease_expired`` when an expired lease used up the last attempt).
- ``job.retried`` (an operator's retry) is the one receipt that reopens a settled job, and
  only a ``failed`` or ``canceled`` one: back to ``queued`` with a fresh budget of
  ``max_attempts`` attempts counted after ``afterAttempt`` (`JobState.attempts_used`);
  attempt numbers keep rising, so no fence is ever reused. It clears the lease, the
  result, the settlement, the cancel reason and the abort request (a retried job is not
  still being aborted) and keeps ``last_error``. Its ``retry`` must be the job's retries
  + 1 and its ``afterAttempt`` the job's attempt; anywhere else (an active or completed
  job, a repeated or skipped cycle) it raises `InvariantError`, so it is never written.
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
  records it, with the body's ``retryAt`` (a retry policy's backoff; absent: none) as
  ``retry_at``, which the next lease clears. ``last_error`` is the body's ``error`` (a non-string error is stored as its
  canonical JSON text); ``result`` is replaced only when the body has a ``result`` key.
- ``job.lease_expired`` decides from ``attempts_used < max_attempts`` (J-4), not from the body's
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
- ``job.enqueued`` may carry ``runAt`` (G-3) and ``priority`` (G-4); a body without
  them is a job due at once with priority 0. The fold records them as given: whether a
  ``runAt`` still lies ahead is a question of the time asked (`JobState.scheduled_for`).
- A second ``job.enqueued`` and unknown receipt types change only bookkeeping. On a
  missing job every type except ``job.failed`` and ``job.lease_expired`` raises, unknown
  types included (J-3).
- ``job.enqueued`` may carry ``queue``, the worker group its enqueue chose; it is written
  only when it differs from the default route, so a job's group is ``queue`` if present,
  else its agent id's and kind's (`contracts.routed_group`).
- ``job.leased`` on a queued job must carry an attempt greater than the job's (the queue
  uses attempt + 1): reusing an attempt number would let a superseded attempt's late
  writes match the new fence, so such a lease raises `InvariantError`.
- The stream names the job: after ``job.enqueued`` a body's ``jobId`` is used only in
  error messages. Bodies that would change state but are malformed (a lease without an
  integer attempt, an enqueue without an agentId) raise `InvariantError`; projectors run
  inside the append (S-5), so such a receipt is never written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Final, TypeVar

from jobs.core.bodies import will_retry
from jobs.core.state import Command, Fence, FenceOutcome, JobState, evolve, is_int
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
    JOB_RETRIED,
    QUEUE_COMMAND,
    QUEUE_COMMAND_CONSUMED,
    RETRYABLE_STATUSES,
    job_id_from_stream,
    validate_job_id,
)
from receipts.core import chain
from receipts.core.chain import Receipt

LEASE_EXPIRED_ERROR: Final = "lease expired"

T = TypeVar("T")

# What one receipt changes in a job (fields and their new values); None: nothing.
Changes = dict[str, Any] | None

# J-3: the two events a fold tolerates for a job that does not exist.
_IGNORED_WHEN_MISSING: Final = frozenset({JOB_FAILED, JOB_LEASE_EXPIRED})


class InvariantError(Exception):
    """A receipt that the job fold cannot accept (J-3); the message names job and type."""

    code = "job_invariant"

    def __init__(self, message: str, *, job_id: str, receipt_type: str) -> None:
        super().__init__(message)
        self.job_id = job_id
        self.receipt_type = receipt_type


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
    changes: Changes = None
    if not state.is_terminal:  # J-3: a job settles exactly once (per retry cycle)
        changes = _APPLY.get(kind, _unchanged)(state, receipt)
    elif kind == JOB_RETRIED:  # the one receipt that reopens a settled job
        changes = _retried(state, receipt)
    counted = {
        "receipt_count": state.receipt_count + 1,
        "head": receipt.hash,
        "updated_at": receipt.ts,
    }
    return evolve(state, {**changes, **counted} if changes else counted)


def fold_job(receipts: Iterable[Receipt]) -> JobState | None:
    """The state of a job after all of `receipts` (S-7), None if it never existed."""
    return chain.fold(receipts, reduce)


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
        queue=_optional_str(receipt, job_id, "queue"),
        run_at=_optional_int(receipt, job_id, "runAt"),
        priority=_or_default(_optional_int(receipt, job_id, "priority"), 0),
    )


def _unchanged(job: JobState, receipt: Receipt) -> Changes:
    return None  # a second job.enqueued, or a type the fold does not know


def _leased(job: JobState, receipt: Receipt) -> Changes:
    if job.status != "queued":  # a second lease changes nothing (J-3)
        return None
    attempt = _required_int(receipt, job.job_id, "attempt")
    if attempt <= job.attempt:  # a reused attempt number would revive a superseded fence
        raise _malformed(
            receipt, job.job_id, f"attempt {attempt} must exceed the job's attempt {job.attempt}"
        )
    return {
        "status": "leased",
        "attempt": attempt,
        "worker_id": _required_str(receipt, job.job_id, "workerId"),
        "lease_until": _required_int(receipt, job.job_id, "leaseUntil"),
        "retry_at": None,  # waited for: this is the attempt it held back
        "limit_key": _optional_str(receipt, job.job_id, "limitKey"),
    }


def _heartbeat(job: JobState, receipt: Receipt) -> Changes:
    if not _matches_lease(job, receipt):  # a superseded attempt's beat is inert (J-3)
        return None
    lease_until = _required_int(receipt, job.job_id, "leaseUntil")
    if job.lease_until is not None:
        lease_until = max(lease_until, job.lease_until)
    return {"status": "running", "lease_until": lease_until}


def _progress(job: JobState, receipt: Receipt) -> Changes:
    if not _matches_lease(job, receipt):
        return None
    return {"status": "running"}


def _completed(job: JobState, receipt: Receipt) -> Changes:
    if not _matches_lease(job, receipt):
        return None
    return {
        "status": "completed",
        "result": receipt.body.get("result"),
        "lease_until": None,
        "settled_by": JOB_COMPLETED,
    }


def _failed(job: JobState, receipt: Receipt) -> Changes:
    if not _matches_lease(job, receipt):
        return None
    body = receipt.body
    error = _error_text(body.get("error"))
    if body.get("willRetry") is True:  # J-4: back to the queue, attempt kept
        return {
            "status": "queued",
            "worker_id": None,
            "lease_until": None,
            "last_error": error,
            "retry_at": _optional_int(receipt, job.job_id, "retryAt"),  # a policy's backoff
        }
    return {
        "status": "failed",
        "last_error": error,
        "result": body.get("result", job.result),
        "lease_until": None,
        "settled_by": JOB_FAILED,
    }


def _lease_expired(job: JobState, receipt: Receipt) -> Changes:
    if not _matches_lease(job, receipt):
        return None
    if will_retry(job):  # J-4: attempts remain
        return {
            "status": "queued",
            "worker_id": None,
            "lease_until": None,
            "last_error": LEASE_EXPIRED_ERROR,
        }
    return {
        "status": "failed",
        "lease_until": None,
        "last_error": LEASE_EXPIRED_ERROR,
        "settled_by": JOB_LEASE_EXPIRED,
    }


def _canceled(job: JobState, receipt: Receipt) -> Changes:
    body = receipt.body
    fenced = body.get("workerId") is not None or body.get("attempt") is not None
    if fenced and not _matches_lease(job, receipt):
        return None
    return {
        "status": "canceled",
        "cancel_reason": _str_or_none(body.get("reason")),
        "lease_until": None,
        "settled_by": JOB_CANCELED,
    }


def _retried(job: JobState, receipt: Receipt) -> Changes:
    if job.status not in RETRYABLE_STATUSES:
        raise _malformed(
            receipt, job.job_id, f"only a failed or canceled job is retried, not a {job.status} one"
        )
    retry = _required_int(receipt, job.job_id, "retry")
    if retry != job.retries + 1:  # each cycle once, in order
        raise _malformed(receipt, job.job_id, f"retry {retry} must be {job.retries + 1}")
    after = _required_int(receipt, job.job_id, "afterAttempt")
    if after != job.attempt:  # the fresh budget counts from the attempt that settled
        raise _malformed(receipt, job.job_id, f"afterAttempt {after} must be {job.attempt}")
    return {
        "status": "queued",
        "worker_id": None,
        "lease_until": None,
        "result": None,
        "settled_by": None,
        "cancel_reason": None,
        "abort_requested": False,
        "abort_reason": None,
        "retries": retry,
        "retried_by": _required_str(receipt, job.job_id, "by"),
        "retried_at": receipt.ts,
        "retried_after_attempt": after,
        "retry_at": None,  # an operator's retry runs now
    }


def _command(job: JobState, receipt: Receipt) -> Changes:
    body = receipt.body
    command_id = _required_str(receipt, job.job_id, "commandId")
    if any(existing.id == command_id for existing in job.commands):
        return None  # the same command twice is one command
    command = Command(
        id=command_id,
        command=_required_str(receipt, job.job_id, "command"),
        lane=_optional_str(receipt, job.job_id, "lane"),
        payload=body.get("payload"),
        by=_optional_str(receipt, job.job_id, "by"),
        created_at=receipt.ts,
    )
    changes: dict[str, Any] = {"commands": (*job.commands, command)}
    if command.command != "abort":
        return changes
    payload = command.payload if isinstance(command.payload, dict) else {}
    reason = _str_or_none(payload.get("reason")) or _str_or_none(body.get("reason"))
    return {**changes, "abort_requested": True, "abort_reason": reason or job.abort_reason}


def _consumed(job: JobState, receipt: Receipt) -> Changes:
    ids = receipt.body.get("commandIds")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise _malformed(receipt, job.job_id, "commandIds must be a list of strings")
    wanted = set(ids)
    commands = tuple(
        replace(c, consumed_at=receipt.ts) if c.pending and c.id in wanted else c
        for c in job.commands
    )
    return {"commands": commands}


_APPLY: Final[dict[str, Callable[[JobState, Receipt], Changes]]] = {
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
    JOB_RETRIED: _retried,  # on an active job: refused (it retries only a settled one)
}


def _matches_lease(job: JobState, receipt: Receipt) -> bool:
    fence = Fence.from_body(receipt.body)
    return fence is not None and fence.check(job) is FenceOutcome.OK


# --- body access ----------------------------------------------------------------------


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
    if not is_int(value):
        raise _malformed(receipt, job_id, f"{key} must be an integer, got {value!r}")
    return value


def _optional_int(receipt: Receipt, job_id: str, key: str) -> int | None:
    value = receipt.body.get(key)
    if value is None:
        return None
    if not is_int(value):
        raise _malformed(receipt, job_id, f"{key} must be an integer or null, got {value!r}")
    return value
