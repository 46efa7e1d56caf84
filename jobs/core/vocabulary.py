"""The job vocabulary (J-1, J-2): lanes, statuses, command types, receipt types, ids.

Strings here are the wire contract and never change spelling. This module owns the
names and the job-id rule; it must not know how jobs are stored or run.
"""

from __future__ import annotations

import re
from typing import Final, Literal, TypeGuard, get_args

# J-1 lanes: four of them; `chat` is a real lane.
Lane = Literal["chat", "collect", "steer", "follow_up"]
LANES: Final[tuple[Lane, ...]] = ("chat", "collect", "steer", "follow_up")
DEFAULT_LANE: Final[Lane] = "collect"

# J-1 statuses.
Status = Literal["queued", "leased", "running", "completed", "failed", "canceled"]
STATUSES: Final[tuple[Status, ...]] = get_args(Status)
ACTIVE_STATUSES: Final[frozenset[Status]] = frozenset({"queued", "leased", "running"})
TERMINAL_STATUSES: Final[frozenset[Status]] = frozenset({"completed", "failed", "canceled"})
# ...the same in STATUSES order, as the dashboard, /metrics and the counts list them
ACTIVE_ORDER: Final = tuple(s for s in STATUSES if s in ACTIVE_STATUSES)
TERMINAL_ORDER: Final = tuple(s for s in STATUSES if s in TERMINAL_STATUSES)
# A retry (`job.retried`) reopens a job only from these: a completed job is done.
RETRYABLE_STATUSES: Final[frozenset[Status]] = frozenset({"failed", "canceled"})
# A lease is held (and a fence can match) only in these statuses.
LEASED_STATUSES: Final[frozenset[Status]] = frozenset({"leased", "running"})

# J-1 queue commands.
CommandType = Literal["steer", "follow_up", "abort"]
COMMAND_TYPES: Final[tuple[CommandType, ...]] = ("steer", "follow_up", "abort")

# J-2 receipt types on `jobs/<jobId>` (body.type).
JOB_ENQUEUED: Final = "job.enqueued"
JOB_LEASED: Final = "job.leased"
JOB_HEARTBEAT: Final = "job.heartbeat"
JOB_PROGRESS: Final = "job.progress"
JOB_COMPLETED: Final = "job.completed"
JOB_FAILED: Final = "job.failed"
JOB_CANCELED: Final = "job.canceled"
QUEUE_COMMAND: Final = "queue.command"
QUEUE_COMMAND_CONSUMED: Final = "queue.command.consumed"
JOB_LEASE_EXPIRED: Final = "job.lease_expired"
# An operator's retry of a failed (or canceled) job: back to the queue, a fresh budget.
JOB_RETRIED: Final = "job.retried"
RECEIPT_TYPES: Final[tuple[str, ...]] = (
    JOB_ENQUEUED,
    JOB_LEASED,
    JOB_HEARTBEAT,
    JOB_PROGRESS,
    JOB_COMPLETED,
    JOB_FAILED,
    JOB_CANCELED,
    QUEUE_COMMAND,
    QUEUE_COMMAND_CONSUMED,
    JOB_LEASE_EXPIRED,
    JOB_RETRIED,
)

# J-6 / J-7 / J-8 singleton modes.
SingletonMode = Literal["allow", "cancel", "steer"]
SINGLETON_MODES: Final[tuple[SingletonMode, ...]] = ("allow", "cancel", "steer")
DEFAULT_SINGLETON_MODE: Final[SingletonMode] = "allow"

# J-6 attempts: default and clamp range.
DEFAULT_MAX_ATTEMPTS: Final = 2
MIN_MAX_ATTEMPTS: Final = 1
MAX_MAX_ATTEMPTS: Final = 8

JOB_STREAM_PREFIX: Final = "jobs/"
MAX_JOB_ID_LENGTH: Final = 128
_JOB_ID = re.compile(r"[A-Za-z0-9._:-]+")


def is_status(value: object) -> TypeGuard[Status]:
    return isinstance(value, str) and value in STATUSES


def validate_job_id(value: object) -> str:
    """Return `value` if it is a valid job id, else raise ValueError saying why.

    A job id is a string of 1..128 characters from ``[A-Za-z0-9._:-]``, so it is safe
    in a stream name, a URL path segment and a delivery promise key.
    """
    if not isinstance(value, str):
        raise ValueError(f"job id must be a string, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_JOB_ID_LENGTH:
        raise ValueError(f"job id must be 1..{MAX_JOB_ID_LENGTH} characters long, got {len(value)}")
    if _JOB_ID.fullmatch(value) is None:
        raise ValueError(
            f"job id {value!r} may contain only ASCII letters, digits, '.', '_', ':' and '-'"
        )
    return value


def is_job_id(value: object) -> TypeGuard[str]:
    try:
        validate_job_id(value)
    except ValueError:
        return False
    return True


def job_stream(job_id: str) -> str:
    """The receipt stream of a job: ``jobs/<jobId>`` (J-2). Raises ValueError on a bad id."""
    return JOB_STREAM_PREFIX + validate_job_id(job_id)


def job_id_from_stream(stream: str) -> str | None:
    """The job id named by a ``jobs/<jobId>`` stream, or None for any other stream."""
    if not stream.startswith(JOB_STREAM_PREFIX):
        return None
    candidate = stream[len(JOB_STREAM_PREFIX) :]
    return candidate if is_job_id(candidate) else None
