"""Gathers the facts for `jobs.core.diagnosis.diagnose` (D-12)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.conf import settings

from jobs import handlers, queue
from jobs.core.diagnosis import Facts, PendingDelivery, diagnose
from jobs.core.vocabulary import ACTIVE_STATUSES
from jobs.errors import JobNotFound
from jobs.models import DeliveryPromise, Job
from jobs.runtime import processes
from jobs.runtime.dispatch import MAX_GENERATIONS
from receipts.clock import now_ms as wall_clock_ms


def facts_for(job_id: str, *, now_ms: int | None = None) -> Facts:
    now = wall_clock_ms() if now_ms is None else now_ms
    job = queue.get(job_id)
    if job is None:
        raise JobNotFound(job_id)
    config = settings.RECEIPT
    live = Counter(p.role for p in processes.live(now_ms=now))
    pending = tuple(
        PendingDelivery(p.id, p.function, p.created_at, p.timeout_at)
        for p in DeliveryPromise.objects.filter(job_id=job_id, state="pending",
                                                timeout_at__gt=now).order_by("created_at"))
    last_driver = (DeliveryPromise.objects.filter(job_id=job_id, function="driver")
                   .order_by("-created_at").values_list("created_at", flat=True).first())
    peers: tuple[str, ...] = ()
    if job.session_key:
        peers = tuple(Job.objects.filter(session_key=job.session_key, status__in=ACTIVE_STATUSES)
                      .exclude(pk=job_id).order_by("created_at").values_list("id", flat=True)[:10])
    exhausted = DeliveryPromise.objects.filter(pk=f"{job_id}:recovery:{MAX_GENERATIONS}").exists()
    return Facts(job=job, now_ms=now, has_handler=handlers.has_handler(job.agent_id),
                 generations_exhausted=exhausted,
                 live_processes=dict(live), pending=pending, last_driver_start_ms=last_driver,
                 min_age_ms=config.queued_redrive_min_age_ms,
                 cooldown_ms=config.queued_redrive_cooldown_ms, session_peers=peers)


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
            "leaseUntil": facts.job.lease_until,
            "workerId": facts.job.worker_id,
            "hasHandler": facts.has_handler,
            "liveProcesses": facts.live_processes,
            "pendingDeliveries": [{"id": p.id, "function": p.function, "createdAt": p.created_at,
                                   "timeoutAt": p.timeout_at} for p in facts.pending],
            "lastDriverStart": facts.last_driver_start_ms,
            "updatedAt": facts.job.updated_at,
            "sessionPeers": list(facts.session_peers),
        },
    }
