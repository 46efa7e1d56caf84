"""Recovery loops (L-1, L-2, L-5): small named passes that each return a report.

Every pass is idempotent and safe in many processes at once: redrive uses dispatch keys
(one observed queue state is redriven once), lease expiry is a fenced append. Passes
cost O(candidates): each is one indexed query with a LIMIT.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db.models import OuterRef

from jobs import queue
from jobs.core.state import Fence
from jobs.core.vocabulary import LEASED_STATUSES
from jobs.core.wire import job_from_wire
from jobs.models import Job
from jobs.runtime import counters, processes, promises
from jobs.runtime.dispatch import MAX_GENERATIONS, redrive_key, start_driver
from jobs.runtime.loops import Report
from observability.logs import log_event

logger = logging.getLogger("receipt.recovery")
BATCH = 200


def redrive_queued(
    *,
    now_ms: int,
    min_age_ms: int | None = None,
    cooldown_ms: int | None = None,
) -> Report:
    """L-1: queued jobs older than min age, not redriven within the cooldown and with no
    pending delivery, get a driver start keyed `<jobId>:redrive:<attempt>:<updatedAt>`."""
    config = settings.RECEIPT
    min_age = config.queued_redrive_min_age_ms if min_age_ms is None else min_age_ms
    cooldown = config.queued_redrive_cooldown_ms if cooldown_ms is None else cooldown_ms
    # A job whose delivery generations are used up (D-3) needs an operator redrive; it
    # must not take a place in every batch and starve the others (diagnosis names it).
    idle = promises.no_delivery_under_way(
        OuterRef("id"),
        now_ms=now_ms,
        cooldown_ms=cooldown,
        last_generation=MAX_GENERATIONS,
    )
    # Oldest first on job_status_newest: a job's last receipt is never older than its
    # first, so `created_at` bounds the range that `updated_at` filters.
    cutoff = now_ms - min_age
    rows = (
        Job.objects.filter(status="queued", created_at__lte=cutoff, updated_at__lte=cutoff)
        .filter(*idle)
        .order_by("created_at", "id")
        .values_list("state", flat=True)[:BATCH]
    )
    report = Report("queued_redrive")
    for wire in rows:
        report.examined += 1
        job = job_from_wire(wire)
        try:
            started = start_driver(job, dispatch_key=redrive_key(job), now_ms=now_ms)
        except Exception as error:  # per item: log the id and carry on
            report.errors.append(f"{job.job_id}: {error}")
            log_event(
                logger,
                "delivery.queued_redrive_loop_error",
                f"redrive of {job.job_id} failed: {error}",
                level=logging.WARNING,
                jobId=job.job_id,
            )
            continue
        if started.created:
            report.acted += 1
            counters.incr("receipt_redrives_total")
            log_event(
                logger,
                "delivery.queued_redrive",
                f"redrove {job.job_id}",
                jobId=job.job_id,
                promiseId=started.promise_id,
            )
    return report


def expire_leases(*, now_ms: int, limit: int = BATCH) -> Report:
    """L-2: active leases that passed get `job.lease_expired` (J-4); a requeued job is
    redriven at once under the same key L-1 would use."""
    ids = list(
        Job.objects.filter(status__in=LEASED_STATUSES, lease_until__lt=now_ms)
        .order_by("lease_until")
        .values_list("id", flat=True)[:limit]
    )
    report = Report("lease_expiry")
    for job_id in ids:
        report.examined += 1
        try:
            expired = queue.expire_lease(job_id, now_ms=now_ms)
            if not expired.applied:
                continue
            report.acted += 1
            counters.incr("receipt_lease_expiries_total")
            log_event(
                logger,
                "delivery.lease_expired",
                f"lease of {job_id} expired",
                jobId=job_id,
                status=expired.job.status if expired.job else None,
            )
            if expired.job is not None and expired.job.status == "queued":
                start_driver(expired.job, dispatch_key=redrive_key(expired.job), now_ms=now_ms)
        except Exception as error:
            report.errors.append(f"{job_id}: {error}")
            log_event(
                logger,
                "delivery.lease_expiry_error",
                f"expiry of {job_id} failed: {error}",
                level=logging.WARNING,
                jobId=job_id,
            )
    return report


def release_holder(job_id: str, holder: Fence, *, now_ms: int, reason: str) -> queue.WriteResult:
    """Give a job back whose lease holder is known gone (a dead worker process, a stopped
    or vanished runworker), then redrive it at once as L-2 would."""
    released = queue.release_lease(job_id, holder=holder, reason=reason, now_ms=now_ms)
    if released.applied:
        counters.incr("receipt_lease_releases_total")
        if released.job is not None and released.job.status == "queued":
            start_driver(released.job, dispatch_key=redrive_key(released.job), now_ms=now_ms)
    return released


def release_gone_holders(*, now_ms: int, limit: int = 50) -> Report:
    """D-11/L-2: a runworker the registry declares gone (unseen for three beats) no longer
    holds anything: every lease of its attempts is released (fenced), so its jobs run
    again within seconds instead of when their leases run out (15 minutes for codex)."""
    report = Report("holder_release")
    for row in processes.gone_unreleased(now_ms=now_ms, limit=limit):
        prefix = processes.worker_prefix(row)
        for job_id, fence in processes.attempts_held_by(row):
            report.examined += 1
            try:
                if release_holder(
                    job_id,
                    fence,
                    now_ms=now_ms,
                    reason=f"{prefix} is gone (last seen {now_ms - row.last_seen} ms ago)",
                ).applied:
                    report.acted += 1
            except Exception as error:
                report.errors.append(f"{job_id}: {error}")
        processes.mark_released(row, now_ms=now_ms)
    return report


def sweep_promises(*, now_ms: int, limit: int = 1000) -> Report:
    """Mark pending promises past their timeout as `timedout`, so the pending set stays
    small (they already read as timedout; this is bookkeeping). No settled_at: nobody
    settled them, and a late delivery may still claim one (promises.claim)."""
    examined, acted = promises.sweep_timed_out(now_ms=now_ms, limit=limit)
    return Report("promise_sweep", examined=examined, acted=acted)
