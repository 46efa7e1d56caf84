"""O-8: jobs whose contract says reconcileOnTerminalOrExpiredLease request objective control
when they settle or their lease expires. A queue mutation listener: it runs after the
job's receipt committed, best-effort (the watchdog, L-4, covers a lost request)."""

from __future__ import annotations

import logging
from typing import Any

from jobs.core.contracts import contract_for
from jobs.core.state import JobState
from objectives import services
from observability.logs import log_event

logger = logging.getLogger("receipt.factory")
SETTLING = frozenset({"job.completed", "job.failed", "job.canceled", "job.lease_expired"})


def on_job_mutation(kind: str, job: JobState, body: dict[str, Any]) -> None:
    if kind not in SETTLING or job.objective_id is None:
        return
    contract = contract_for(job.kind)
    if contract is None or not contract.reconcile_on_terminal_or_expired_lease:
        return
    if kind != "job.lease_expired" and not job.is_terminal:
        return  # a failure that requeues the job is not a settlement
    try:
        services.job_settled(
            job.job_id,
            objective_id=job.objective_id,
            task_id=job.task_id,
            status=job.status if job.is_terminal else "lease_expired",
            kind=job.kind,
        )
    except Exception as error:
        log_event(
            logger,
            "factory.control_request_failed",
            f"control request for {job.objective_id} after {kind} of {job.job_id} failed: {error}",
            level=logging.WARNING,
            objectiveId=job.objective_id,
            jobId=job.job_id,
        )
