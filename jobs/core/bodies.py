"""The bodies of the receipts the queue appends to a job's stream (J-1 to J-11), and the
retry rule they carry (`will_retry`, J-4).

Pure: each builder takes what was decided (ids, fence, times, the job as read) and
returns the body; no Django, no clock, no I/O. Deciding whether to write, and writing,
stay in `jobs.queue`. A body's keys keep their order: it is part of the stored text.
"""

from __future__ import annotations

from typing import Any

from jobs.core.state import Fence, JobState
from jobs.core.vocabulary import (
    ACTIVE_STATUSES,
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
)

MAX_ERROR_CHARS = 8000


def will_retry(job: JobState, *, no_retry: bool = False) -> bool:
    """J-4: an attempt that ends without success sends the job back to the queue unless
    the handler said not to or the job's attempts are used up (since its latest retry)."""
    return not no_retry and job.attempts_used < job.max_attempts


def retry_refusal(job: JobState, *, include_canceled: bool = False) -> str | None:
    """Why an operator may not retry `job`, as a code (None: it may). A failed job is
    retried; a canceled one only when asked explicitly (someone stopped it on purpose); a
    job of a Factory objective never (its objective decides what runs again); an active
    or completed one has nothing to retry."""
    if job.status in ACTIVE_STATUSES:
        return "active"
    if job.status == "completed":
        return "completed"
    if job.status == "canceled" and not include_canceled:
        return "canceled"
    if job.objective_id is not None:
        return "objective"
    return None


def enqueued(
    job_id: str,
    *,
    agent_id: str,
    lane: str,
    payload: dict[str, Any],
    max_attempts: int,
    session_key: str | None,
    singleton_mode: str,
    lease_ms: int,
    queue: str | None = None,
    run_at: int | None = None,
    priority: int = 0,
) -> dict[str, Any]:
    """A new job's first receipt (J-1). `queue` only when the enqueue routed the job away
    from its default group; `runAt` (G-3) and `priority` (G-4) only when set: so a plain
    job's body (and hash) is what it always was."""
    body: dict[str, Any] = {
        "type": JOB_ENQUEUED,
        "jobId": job_id,
        "agentId": agent_id,
        "lane": lane,
        "payload": payload,
        "maxAttempts": max_attempts,
        "sessionKey": session_key,
        "singletonMode": singleton_mode,
        "leaseMs": lease_ms,
    }
    if queue is not None:
        body["queue"] = queue
    if run_at is not None:
        body["runAt"] = run_at
    if priority:
        body["priority"] = priority
    return body


def leased(
    job_id: str, fence: Fence, *, lease_until: int, start: bool, limit_key: str | None = None
) -> list[dict[str, Any]]:
    """A lease under `fence`; with `start`, its first heartbeat in the same append
    (leased -> running). `limit_key`: the concurrency cap's key it runs under."""
    kinds = (JOB_LEASED, JOB_HEARTBEAT) if start else (JOB_LEASED,)
    bodies = [
        {"type": kind, "jobId": job_id, **fence.body(), "leaseUntil": lease_until} for kind in kinds
    ]
    if limit_key is not None:
        bodies[0]["limitKey"] = limit_key
    return bodies


def heartbeat(job_id: str, fence: Fence, *, lease_until: int) -> dict[str, Any]:
    return {"type": JOB_HEARTBEAT, "jobId": job_id, **fence.body(), "leaseUntil": lease_until}


def progress(job_id: str, fence: Fence, data: Any) -> dict[str, Any]:
    return {"type": JOB_PROGRESS, "jobId": job_id, **fence.body(), "progress": data}


def completed(job_id: str, fence: Fence, result: Any) -> dict[str, Any]:
    return {"type": JOB_COMPLETED, "jobId": job_id, **fence.body(), "result": result}


def failed(
    job: JobState,
    fence: Fence,
    error: str,
    *,
    no_retry: bool,
    result: Any = None,
    retry_at: int | None = None,
) -> dict[str, Any]:
    """A failed attempt, with whether it is retried; `result` only when there is one;
    `retryAt` (a retry policy's backoff) only when it is retried after a wait."""
    body: dict[str, Any] = {
        "type": JOB_FAILED,
        "jobId": job.job_id,
        **fence.body(),
        "error": str(error)[:MAX_ERROR_CHARS],
        "noRetry": no_retry,
        "willRetry": will_retry(job, no_retry=no_retry),
    }
    if result is not None:
        body["result"] = result
    if retry_at is not None and body["willRetry"]:
        body["retryAt"] = retry_at
    return body


def canceled(
    job_id: str, *, reason: str, by: str | None, fence: Fence | None = None
) -> dict[str, Any]:
    """A cancel: by a worker honouring an abort (fenced) or of a queued job (unfenced)."""
    body: dict[str, Any] = {"type": JOB_CANCELED, "jobId": job_id, "reason": reason, "by": by}
    return body if fence is None else {**body, **fence.body()}


def lease_expired(job: JobState, *, reason: str | None = None) -> dict[str, Any]:
    """The end of the job's current lease (passed, or its holder known gone: `reason`)."""
    body: dict[str, Any] = {
        "type": JOB_LEASE_EXPIRED,
        "jobId": job.job_id,
        "workerId": job.worker_id,
        "attempt": job.attempt,
        "willRetry": will_retry(job),
    }
    return body if reason is None else {**body, "reason": reason}


def retried(job: JobState, *, by: str, reason: str | None = None) -> dict[str, Any]:
    """An operator's retry of a failed or canceled job: `retry` numbers the cycle (1 for
    the first retry) and `afterAttempt` the last attempt before it; no fence fields, so
    no reader mistakes it for a worker's write."""
    body: dict[str, Any] = {
        "type": JOB_RETRIED,
        "jobId": job.job_id,
        "retry": job.retries + 1,
        "afterAttempt": job.attempt,
        "fromStatus": job.status,
        "by": by,
    }
    return body if reason is None else {**body, "reason": reason}


def command(
    job_id: str,
    *,
    command_id: str,
    command: str,
    payload: Any,
    by: str | None,
) -> dict[str, Any]:
    """A command to a job (J-10): steer, follow-up or abort; the first two go on the
    command lane named after them."""
    body: dict[str, Any] = {
        "type": QUEUE_COMMAND,
        "jobId": job_id,
        "commandId": command_id,
        "command": command,
        "payload": payload,
        "by": by,
    }
    return body if command == "abort" else {**body, "lane": command}


def commands_consumed(job_id: str, fence: Fence, command_ids: list[str]) -> dict[str, Any]:
    return {
        "type": QUEUE_COMMAND_CONSUMED,
        "jobId": job_id,
        "commandIds": command_ids,
        **fence.body(),
    }
