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
