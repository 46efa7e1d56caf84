"""Errors of the jobs app: each has an API code, an HTTP status and a sentence with ids."""

from __future__ import annotations

from jobs.core.vocabulary import LEASED_STATUSES
from receipts.core.errors import AppError


class JobsError(AppError):
    code = "jobs_error"
    status = 409


class InvalidRequest(JobsError):
    """Bad input: nothing was written."""

    status = 400

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class MissingCommandsScope(JobsError):
    """A payload carries shell commands and the credential lacks their scope (Q-5)."""

    code, status = "missing_scope", 403

    def __init__(self, scope: str, paths: list[str]) -> None:
        shown = ", ".join(paths[:3]) + (" ..." if len(paths) > 3 else "")
        super().__init__(
            f"this credential lacks the {scope} scope, which payloads that carry "
            f"commands need ({shown})"
        )
        self.paths = paths


class JobIdTaken(JobsError):
    """An organization-bound enqueue named another organization's job id."""

    code, status = "job_id_taken", 409

    def __init__(self, job_id: str, *, index: int | None = None) -> None:
        super().__init__(f"jobId {job_id} is already taken by another organization's job")
        self.index = index  # which request of a batch


class SessionKeyConflict(JobsError):
    """An organization-bound singleton enqueue would touch another organization's jobs."""

    code, status = "session_key_conflict", 409

    def __init__(self, session_key: str, *, index: int | None = None) -> None:
        super().__init__(
            f"sessionKey {session_key!r} has active jobs of another organization; "
            f"a singleton enqueue cannot touch them"
        )
        self.index = index


class JobNotFound(JobsError):
    code, status = "job_not_found", 404

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class JobTerminal(JobsError):
    code, status = "job_terminal", 409

    def __init__(self, job_id: str, status: str, *, message: str | None = None) -> None:
        super().__init__(message or f"job is {status}; continue through its objective")
        self.job_id = job_id
        self.job_status = status


class JobNotQueued(JobsError):
    """An operator redrive of a job that is not queued: nothing was started or recorded."""

    code, status = "job_not_queued", 409

    def __init__(self, job_id: str, status: str) -> None:
        hint = (
            " (an expired lease is requeued by the lease expiry loop)"
            if status in LEASED_STATUSES
            else ""
        )
        super().__init__(f"job {job_id} is {status}; only a queued job can be redriven{hint}")
        self.job_id = job_id
        self.job_status = status


class ScheduleNotFound(JobsError):
    """No schedule of that name, or it is no longer declared (removed)."""

    code, status = "schedule_not_found", 404

    def __init__(self, name: str, *, removed: bool = False) -> None:
        why = "is no longer declared" if removed else "not found"
        super().__init__(f"schedule {name} {why}")
        self.name = name


class JobNotRetryable(JobsError):
    """An operator retry of a job that may not be retried (`bodies.retry_refusal`):
    nothing was written. `refusal` is the rule's code."""

    code, status = "job_not_retryable", 409
    _WHY = {
        "active": "is {status}; only a failed or canceled job can be retried",
        "completed": "completed; only a failed or canceled job can be retried",
        "canceled": (
            "is canceled; a canceled job is retried only when asked explicitly "
            "(includeCanceled in the API, --include-canceled in the CLI)"
        ),
        "objective": "belongs to objective {objective}; its objective decides what runs again",
    }

    def __init__(
        self, job_id: str, status: str, refusal: str, *, objective_id: str | None = None
    ) -> None:
        why = self._WHY[refusal].format(status=status, objective=objective_id)
        super().__init__(f"job {job_id} {why}")
        self.job_id = job_id
        self.job_status = status
        self.refusal = refusal
