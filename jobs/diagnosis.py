"""Gathers the facts for `jobs.core.diagnosis.diagnose` (D-12).

Every query is one job's rows or a bounded slice of the active set: counts over the queue
stop at COUNT_CAP + 1 (a LIMIT inside the COUNT), never a COUNT(*) over all jobs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.conf import settings

from jobs import handlers, limits, queue, queues, selectors
from jobs.core.contracts import routed_group
from jobs.core.diagnosis import (
    BUSY_SHOWN,
    COUNT_CAP,
    Capacity,
    Facts,
    HeldDelivery,
    PendingDelivery,
    diagnose,
)
from jobs.core.names import recovery_generation_id
from jobs.core.state import JobState
from jobs.errors import JobNotFound
from jobs.models import WorkerProcess
from jobs.runtime import processes, promises
from jobs.runtime.dispatch import MAX_GENERATIONS
from jobs.timing_config import current_timing
from receipts.clock import now_ms as wall_clock_ms


def facts_for(job_id: str, *, now_ms: int | None = None) -> Facts:
    now = wall_clock_ms() if now_ms is None else now_ms
    job = queue.get(job_id)
    if job is None:
        raise JobNotFound(job_id)
    config = settings.RECEIPT
    live_rows = processes.live(now_ms=now)
    live = Counter(p.role for p in live_rows)
    pending = tuple(PendingDelivery(*row) for row in promises.awaiting_delivery(job_id, now_ms=now))
    last_driver = promises.last_driver_start(job_id)
    peers: tuple[str, ...] = ()
    if job.session_key:
        peers = selectors.active_session_peers(job.session_key, exclude=job_id)
    exhausted = bool(promises.existing([recovery_generation_id(job_id, MAX_GENERATIONS)]))
    return Facts(
        job=job,
        now_ms=now,
        has_handler=handlers.has_handler(job.agent_id),
        generations_exhausted=exhausted,
        live_processes=dict(live),
        pending=pending,
        last_driver_start_ms=last_driver,
        min_age_ms=config.queued_redrive_min_age_ms,
        cooldown_ms=config.queued_redrive_cooldown_ms,
        session_peers=peers,
        capacity=capacity_of(job, slots=_slots(live_rows, job)),
        holder_gone=_holder_gone(job, live_rows, now),
        groups=current_timing().group_names(),
        paused=_paused(job),
        held=_held(job),
    )


def _held(job: JobState) -> HeldDelivery | None:
    found = limits.held_for(job.job_id) if job.status == "queued" else None
    if found is None:
        return None
    held_by, due_at = found
    kind, key = held_by.split(":", 1)
    limit = limits.by_name(key.split(":", 1)[0])
    name = limit.name if limit is not None else key.split(":", 1)[0]
    if kind == "cap":
        value = key.split(":", 1)[1] if ":" in key else None
        of = limit.concurrency or 0 if limit is not None else 0
        return HeldDelivery(name, kind, due_at, value, limits.running(key), of)
    rate = limit.rate_text if limit is not None else None
    return HeldDelivery(name, kind, due_at, rate=rate or "removed")


def _paused(job: JobState) -> tuple[str, int] | None:
    if job.is_terminal:
        return None
    row = queues.paused(routed_group(job.agent_id, job.kind, job.queue))
    return (row.paused_by or "?", row.paused_at or 0) if row is not None else None


def _holder_gone(job: JobState, live_rows: list[WorkerProcess], now: int) -> tuple[str, int] | None:
    """The runworker a lease's worker id names, when the registry no longer sees it live."""
    if not job.holds_lease or not job.worker_id:
        return None
    if any(processes.holds(job.worker_id, p) for p in live_rows):
        return None
    group, host, pid = [*job.worker_id.split(":"), "", "", ""][:3]
    row = (
        WorkerProcess.objects.filter(group=group, host=host, pid=int(pid) if pid.isdigit() else -1)
        .order_by("-started_at")
        .first()
    )
    if row is None:
        return None
    return row.id, now - row.last_seen


def _slots(live_rows: list[WorkerProcess], job: JobState) -> int:
    group = routed_group(job.agent_id, job.kind, job.queue)
    return sum(p.concurrency or 0 for p in live_rows if p.group == group)


def capacity_of(job: JobState, *, slots: int, cap: int = COUNT_CAP) -> Capacity | None:
    """The job's routed group: its busy jobs and, for a queued job, how many queued jobs
    of the group were enqueued before it; both counts stop at cap + 1. None once terminal."""
    if job.is_terminal:
        return None
    group = routed_group(job.agent_id, job.kind, job.queue)
    # partial indexes job_group_busy / job_active_cells: active rows of the group only
    busy_jobs, busy = selectors.busy_in_group(group, shown=BUSY_SHOWN, cap=cap)
    ahead = selectors.queued_ahead(group, job, cap=cap) if job.status == "queued" else 0
    return Capacity(group=group, busy=busy, slots=slots, busy_jobs=busy_jobs, queued_ahead=ahead)


def diagnosis(job_id: str, *, now_ms: int | None = None) -> dict[str, Any]:
    facts = facts_for(job_id, now_ms=now_ms)
    blockers = diagnose(facts)
    return {
        "jobId": job_id,
        "status": facts.job.status,
        "blockers": [b.to_wire() for b in blockers],
        "facts": {
            "now": facts.now_ms,
            "attempt": facts.job.attempt,
            "maxAttempts": facts.job.max_attempts,
            "attemptsUsed": facts.job.attempts_used,
            "retries": facts.job.retries,
            "retriedBy": facts.job.retried_by,
            "retriedAt": facts.job.retried_at,
            "leaseUntil": facts.job.lease_until,
            "runAt": facts.job.run_at,
            "retryAt": facts.job.retry_at,
            "priority": facts.job.priority,
            "workerId": facts.job.worker_id,
            "hasHandler": facts.has_handler,
            "liveProcesses": facts.live_processes,
            "pendingDeliveries": [
                {
                    "id": p.id,
                    "function": p.function,
                    "createdAt": p.created_at,
                    "timeoutAt": p.timeout_at,
                }
                for p in facts.pending
            ],
            "lastDriverStart": facts.last_driver_start_ms,
            "updatedAt": facts.job.updated_at,
            "sessionPeers": list(facts.session_peers),
            "capacity": facts.capacity.to_wire() if facts.capacity else None,
        },
    }
