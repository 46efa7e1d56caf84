"""Manual redrive (U-3, P-4): an operator starts a fresh delivery of a queued job now.

The one code path behind the admin job page, the changelist's bulk action and
`manage.py jobs redrive`: it refuses a job that is not queued, starts the driver under
`dispatch.manual_redrive_key`, records `operator.redriven` with `by` on the job's audit
stream and logs `jobs.redriven`. It writes no job receipt (so L-1's keys and ages, which
read the job's `updated_at`, are untouched) and knows nothing of HTTP or the admin.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction

from jobs import queue
from jobs.core.state import JobState
from jobs.errors import JobNotQueued
from jobs.runtime import dispatch, promises
from observability.logs import log_event
from receipts import audit
from receipts.clock import now_ms as wall_clock_ms
from receipts.core.chain import Receipt

logger = logging.getLogger("receipt.redrive")


@dataclass(frozen=True)
class RedriveResult:
    job: JobState
    started: dispatch.StartResult
    earlier_pending: tuple[str, ...]  # driver deliveries already pending, newest first
    record: Receipt  # the operator.redriven receipt on the job's audit stream

    @property
    def message(self) -> str:
        """One sentence for the operator: the delivery started, or why none was."""
        if not self.started.created:
            return f"No new delivery: {self.started.reason} ({self.started.promise_id})."
        text = f"Driver delivery {self.started.promise_id} started."
        if self.earlier_pending:
            earlier = ", ".join(self.earlier_pending[:3])
            text += f" {len(self.earlier_pending)} earlier delivery(ies) still pending: {earlier}."
        return text


def redrive_now(job_id: str, *, by: str, now_ms: int | None = None) -> RedriveResult:
    """Start a driver delivery of queued job `job_id` now, on record as `by`.

    Raises JobNotFound, JobNotQueued (nothing written) or DeliveryRecoveryExceeded.
    """
    job = queue.require(job_id)
    if job.status != "queued":
        raise JobNotQueued(job_id, job.status)
    now = wall_clock_ms() if now_ms is None else now_ms
    pending = tuple(p.id for p in promises.pending_for_job(job_id, now_ms=now))
    # The delivery and its audit receipt commit together: no redrive goes unrecorded.
    with transaction.atomic():
        started = dispatch.start_driver(
            job, dispatch_key=dispatch.manual_redrive_key(job_id, now_ms=now), now_ms=now
        )
        record = audit.record_redrive(job.stream, started, by=by, now_ms=now)
    log_event(
        logger,
        "jobs.redriven",
        f"{job_id} redriven by {by}",
        jobId=job_id,
        by=by,
        started=started.created,
        promiseId=started.promise_id,
        reason=started.reason,
    )
    return RedriveResult(job, started, pending, record)
