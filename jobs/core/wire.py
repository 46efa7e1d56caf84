"""The one translation of a job to and from its camelCase wire form (A-2).

`job_from_wire(job_to_wire(state)) == state` for every state the fold produces; the read
model stores the wire form. Pure: no Django, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.core.state import Command, JobState, is_int
from jobs.core.vocabulary import is_status


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value (what `copy.deepcopy` gives for one, at a fraction of
    its cost: no memo, JSON has no shared or cyclic parts)."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def _same(value: Any) -> Any:
    return value


def command_to_wire(command: Command, *, share: bool = False) -> dict[str, Any]:
    keep = _same if share else _copy
    return {
        "id": command.id,
        "command": command.command,
        "lane": command.lane,
        "payload": keep(command.payload),
        "by": command.by,
        "createdAt": command.created_at,
        "consumedAt": command.consumed_at,
    }


def job_to_wire(state: JobState, *, share: bool = False) -> dict[str, Any]:
    """The camelCase JSON form of a job (A-2) that the read model stores. Its payload,
    result and command payloads are copies, unless `share` (a caller that only writes the
    form as JSON text, like the projector: nothing to copy for).

    Beyond A-2's list it carries ``abortReason``, ``settledBy``, ``cancelReason``,
    ``organizationId``, ``objectiveId``, ``taskId``, ``queue`` and the retry fields
    (``retries``, ``retriedBy``, ``retriedAt``, ``retriedAfterAttempt``) so `job_from_wire`
    can rebuild the state exactly, and ``runAt``, ``priority``, ``retryAt`` and
    ``limitKey`` only when set (G-3, G-4; the API shows their defaults). ``contractGroup``/``routedGroup`` are derived by the
    API, not stored.
    """
    keep = _same if share else _copy
    wire: dict[str, Any] = {
        "id": state.job_id,
        "agentId": state.agent_id,
        "lane": state.lane,
        "kind": state.kind,
        "status": state.status,
        "attempt": state.attempt,
        "maxAttempts": state.max_attempts,
        "sessionKey": state.session_key,
        "singletonMode": state.singleton_mode,
        "payload": keep(state.payload),
        "workerId": state.worker_id,
        "leaseUntil": state.lease_until,
        "leaseMs": state.lease_ms,
        "abortRequested": state.abort_requested,
        "abortReason": state.abort_reason,
        "commands": [command_to_wire(c, share=share) for c in state.commands],
        "result": keep(state.result),
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
        "queue": state.queue,
        "retries": state.retries,
        "retriedBy": state.retried_by,
        "retriedAt": state.retried_at,
        "retriedAfterAttempt": state.retried_after_attempt,
    }
    # Only when set: rows stored before jobs had them stay equal to their fold.
    if state.run_at is not None:
        wire["runAt"] = state.run_at
    if state.priority:
        wire["priority"] = state.priority
    if state.retry_at is not None:
        wire["retryAt"] = state.retry_at
    if state.limit_key is not None:
        wire["limitKey"] = state.limit_key
    return wire


def command_from_wire(wire: Mapping[str, Any]) -> Command:
    reader = _WireReader(wire, "command")
    return Command(
        id=reader.text("id"),
        command=reader.text("command"),
        lane=reader.opt_text("lane"),
        payload=_copy(reader.any("payload")),
        by=reader.opt_text("by"),
        created_at=reader.integer("createdAt"),
        consumed_at=reader.opt_integer("consumedAt"),
    )


def job_from_wire(wire: Mapping[str, Any]) -> JobState:
    """Rebuild a `JobState` from `job_to_wire` output; raise ValueError on a bad form.

    Every key `job_to_wire` writes is required except the derived ``stream``, ``queue``
    (absent from rows written before queues existed), the optional ``runAt`` and
    ``priority``, and the retry fields (rows written before retries existed lack them: a
    job never retried); keys it does not write (``contractGroup``, ``routedGroup`` ...)
    are ignored.
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
        payload=_copy(reader.any("payload")),
        worker_id=reader.opt_text("workerId"),
        lease_until=reader.opt_integer("leaseUntil"),
        lease_ms=reader.opt_integer("leaseMs"),
        abort_requested=reader.flag("abortRequested"),
        abort_reason=reader.opt_text("abortReason"),
        commands=tuple(command_from_wire(c) for c in commands),
        result=_copy(reader.any("result")),
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
        queue=reader.opt_text("queue") if "queue" in wire else None,  # older rows lack it
        run_at=reader.opt_integer("runAt") if "runAt" in wire else None,
        priority=reader.integer("priority") if "priority" in wire else 0,
        retries=reader.integer("retries", default=0),
        retried_by=reader.opt_text("retriedBy", default=None),
        retried_at=reader.opt_integer("retriedAt", default=None),
        retried_after_attempt=reader.integer("retriedAfterAttempt", default=0),
        retry_at=reader.opt_integer("retryAt") if "retryAt" in wire else None,
        limit_key=reader.opt_text("limitKey") if "limitKey" in wire else None,
    )


_REQUIRED: Any = object()  # no default: the key must be present


class _WireReader:
    """Typed access to a wire mapping; every failure names the form and the key."""

    def __init__(self, wire: Mapping[str, Any], what: str) -> None:
        if not isinstance(wire, Mapping):
            raise ValueError(f"{what} wire form must be an object, got {type(wire).__name__}")
        self._wire = wire
        self._what = what

    def any(self, key: str, default: Any = _REQUIRED) -> Any:
        if key not in self._wire:
            if default is not _REQUIRED:
                return default
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

    def opt_text(self, key: str, default: Any = _REQUIRED) -> str | None:
        value = self.any(key, default)
        if value is not None and not isinstance(value, str):
            raise self._fail(key, "a string or null")
        return value

    def integer(self, key: str, default: Any = _REQUIRED) -> int:
        value = self.any(key, default)
        if not is_int(value):
            raise self._fail(key, "an integer")
        return value

    def opt_integer(self, key: str, default: Any = _REQUIRED) -> int | None:
        value = self.any(key, default)
        if value is None:
            return None
        return self.integer(key)

    def flag(self, key: str) -> bool:
        value = self.any(key)
        if not isinstance(value, bool):
            raise self._fail(key, "a boolean")
        return value
