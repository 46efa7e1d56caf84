"""The one translation of a job to and from its camelCase wire form (A-2).

`job_from_wire(job_to_wire(state)) == state` for every state the fold produces; the read
model stores the wire form. Pure: no Django, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


class _Kind:
    """What a wire key may hold: `exact` types pass at a glance (the JSON decoder's own),
    anything else is asked of `accepts` (a `str` enum, an `int` subclass)."""

    __slots__ = ("accepts", "exact", "expected")

    def __init__(self, exact: set[type], accepts: Callable[[Any], bool], expected: str) -> None:
        self.exact, self.accepts, self.expected = frozenset(exact), accepts, expected


_REQUIRED: Any = object()  # no default: the key must be present
_TEXT = _Kind({str}, lambda v: isinstance(v, str), "a string")
_OPT_TEXT = _Kind({str, type(None)}, lambda v: v is None or isinstance(v, str), "a string or null")
_INT = _Kind({int}, is_int, "an integer")
_OPT_INT = _Kind({int, type(None)}, lambda v: v is None or is_int(v), "an integer")
_FLAG = _Kind({bool}, lambda v: isinstance(v, bool), "a boolean")
_ANY = _Kind(set(), lambda v: v is not _REQUIRED, "present")

# (field, wire key, kind, value when the key is absent: _REQUIRED refuses the form)
_COMMAND = (
    ("id", "id", _TEXT, _REQUIRED),
    ("command", "command", _TEXT, _REQUIRED),
    ("lane", "lane", _OPT_TEXT, _REQUIRED),
    ("payload", "payload", _ANY, _REQUIRED),
    ("by", "by", _OPT_TEXT, _REQUIRED),
    ("created_at", "createdAt", _INT, _REQUIRED),
    ("consumed_at", "consumedAt", _OPT_INT, _REQUIRED),
)
# Every key `job_to_wire` writes is required except the derived ``stream`` (not read),
# ``queue`` (absent from rows written before queues existed), the optional ``runAt``,
# ``priority``, ``retryAt`` and ``limitKey``, and the retry fields (rows written before
# retries existed lack them: a job never retried).
_JOB = (
    ("job_id", "id", _TEXT, _REQUIRED),
    ("agent_id", "agentId", _TEXT, _REQUIRED),
    ("lane", "lane", _TEXT, _REQUIRED),
    ("kind", "kind", _OPT_TEXT, _REQUIRED),
    ("status", "status", _TEXT, _REQUIRED),
    ("attempt", "attempt", _INT, _REQUIRED),
    ("max_attempts", "maxAttempts", _INT, _REQUIRED),
    ("session_key", "sessionKey", _OPT_TEXT, _REQUIRED),
    ("singleton_mode", "singletonMode", _TEXT, _REQUIRED),
    ("payload", "payload", _ANY, _REQUIRED),
    ("worker_id", "workerId", _OPT_TEXT, _REQUIRED),
    ("lease_until", "leaseUntil", _OPT_INT, _REQUIRED),
    ("lease_ms", "leaseMs", _OPT_INT, _REQUIRED),
    ("abort_requested", "abortRequested", _FLAG, _REQUIRED),
    ("abort_reason", "abortReason", _OPT_TEXT, _REQUIRED),
    ("commands", "commands", _ANY, _REQUIRED),
    ("result", "result", _ANY, _REQUIRED),
    ("last_error", "lastError", _OPT_TEXT, _REQUIRED),
    ("created_at", "createdAt", _INT, _REQUIRED),
    ("updated_at", "updatedAt", _INT, _REQUIRED),
    ("organization_id", "organizationId", _OPT_TEXT, _REQUIRED),
    ("objective_id", "objectiveId", _OPT_TEXT, _REQUIRED),
    ("task_id", "taskId", _OPT_TEXT, _REQUIRED),
    ("receipt_count", "receiptCount", _INT, _REQUIRED),
    ("head", "head", _TEXT, _REQUIRED),
    ("settled_by", "settledBy", _OPT_TEXT, _REQUIRED),
    ("cancel_reason", "cancelReason", _OPT_TEXT, _REQUIRED),
    ("queue", "queue", _OPT_TEXT, None),
    ("run_at", "runAt", _OPT_INT, None),
    ("priority", "priority", _INT, 0),
    ("retries", "retries", _INT, 0),
    ("retried_by", "retriedBy", _OPT_TEXT, None),
    ("retried_at", "retriedAt", _OPT_INT, None),
    ("retried_after_attempt", "retriedAfterAttempt", _INT, 0),
    ("retry_at", "retryAt", _OPT_INT, None),
    ("limit_key", "limitKey", _OPT_TEXT, None),
)


def _read(wire: Any, fields: tuple[tuple[str, str, _Kind, Any], ...], what: str) -> dict[str, Any]:
    """The fields of a wire mapping by their names, each checked; ValueError naming the
    form and the key otherwise. One table walk: a worker reads a job's form per task."""
    if not isinstance(wire, Mapping):
        raise ValueError(f"{what} wire form must be an object, got {type(wire).__name__}")
    values: dict[str, Any] = {}
    get = wire.get
    for field, key, kind, absent in fields:
        value = get(key, absent)
        if type(value) not in kind.exact and not kind.accepts(value):
            if value is _REQUIRED:
                raise ValueError(f"{what} wire form lacks {key!r}")
            raise ValueError(f"{what} wire form: {key!r} must be {kind.expected}, got {value!r}")
        values[field] = value
    return values


def command_from_wire(wire: Mapping[str, Any]) -> Command:
    values = _read(wire, _COMMAND, "command")
    values["payload"] = _copy(values["payload"])
    return Command(**values)


def job_from_wire(wire: Mapping[str, Any]) -> JobState:
    """Rebuild a `JobState` from `job_to_wire` output; raise ValueError on a bad form.
    Keys it does not write (``contractGroup``, ``routedGroup`` ...) are ignored."""
    values = _read(wire, _JOB, "job")
    if not is_status(values["status"]):
        raise ValueError(f"job wire form: 'status' {values['status']!r} is not a job status")
    commands = values["commands"]
    if not isinstance(commands, list) or not all(isinstance(c, Mapping) for c in commands):
        raise ValueError("job wire form: 'commands' must be a list of objects")
    values["commands"] = tuple(command_from_wire(c) for c in commands)
    values["payload"] = _copy(values["payload"])
    values["result"] = _copy(values["result"])
    return JobState(**values)
