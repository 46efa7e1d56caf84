"""D-8 callbacks, pure: which event a job write causes, the body posted for it, and when
a failed delivery is tried again. No Django, no clock, no I/O."""

from __future__ import annotations

from typing import Any

from jobs.core.state import JobState

EVENTS = ("dispatched", "completed", "failed", "canceled")
STATES = ("pending", "delivered", "gave_up")
FIRST_RETRY_MS = 1_000
MAX_RETRY_MS = 300_000


def settlement_event(before: JobState | None, after: JobState | None) -> str | None:
    """`completed`, `failed` or `canceled` when this write settled the job, else None.

    Every settlement is a transition into a terminal status, whoever wrote it (a worker,
    a cancel, a lease expiry that used up the attempts), and happens once per job and
    retry cycle: a retried job's next settlement is an event again.
    """
    if after is None or not after.is_terminal:
        return None
    if before is not None and before.is_terminal:
        return None
    return after.status


def body(event: str, job: JobState, *, at_ms: int) -> dict[str, Any]:
    """The JSON posted, fixed when the event is recorded: a retry posts the same body.
    A job an operator retried adds `retries`, which tells its cycles' events apart:
    (jobId, event, attempt, retries) names one event, since a job canceled while queued,
    retried and canceled again keeps its attempt. A job never retried posts D-8's
    fields exactly."""
    posted: dict[str, Any] = {
        "event": event,
        "jobId": job.job_id,
        "stream": job.stream,
        "status": job.status,
        "attempt": job.attempt,
        "agentId": job.agent_id,
        "kind": job.kind,
        "at": at_ms,
    }
    return {**posted, "retries": job.retries} if job.retries else posted


def retry_delay_ms(failures: int) -> int:
    """The wait after the n-th failed try: 1 s, 2 s, 4 s ... capped at 5 minutes."""
    return int(min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** min(max(failures, 1) - 1, 20)))


def next_try_ms(failures: int, *, now_ms: int, give_up_at_ms: int) -> int | None:
    """When to try again after the n-th failed try, or None to give up. The last try
    lands on the deadline itself, so a receiver back just before it still gets the post."""
    if now_ms >= give_up_at_ms:
        return None
    return min(now_ms + retry_delay_ms(failures), give_up_at_ms)
