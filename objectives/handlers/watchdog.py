"""`factory.objective.watchdog` on `factory-control` (L-4).

Scans at most RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_SCAN_LIMIT (clamped 1..2000) active
objectives from their summary rows, least recently updated first, and requests control
with reason `reconcile` for each that needs it (objectives.core.watchdog names the three
reasons). The scan stops at its timeout (RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_TIMEOUT_MS,
floor 10 s). A payload may lower the staleness floors (`liveStaleMs`, `computerStaleMs`),
the quiet window (`quietMs`) and the scan limit, for operators and tests; a job is still
stale only after two missed beats of its own heartbeat (objectives.core.facts).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings

from jobs.core.state import JobState
from jobs.handler_contract import HandlerContext, JobResult
from objectives import selectors, services
from objectives.core.facts import COMPUTER_STALE_MS, LIVE_STALE_MS, Staleness
from objectives.core.state import objective_from_wire
from objectives.core.watchdog import RECONCILE, assess
from objectives.models import ObjectiveSummary
from observability.logs import log_event
from receipts.clock import now_ms as wall_clock_ms

logger = logging.getLogger("receipt.factory")
MIN_TIMEOUT_MS = 10_000


def scan_limit(value: Any = None) -> int:
    raw = value if isinstance(value, int) and not isinstance(value, bool) else None
    return max(1, min(2000, raw if raw is not None else settings.RECEIPT.watchdog_scan_limit))


def _int(payload: dict[str, Any], key: str, default: int) -> int:
    value = payload.get(key)
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )


def scan(
    *,
    now_ms: int | None = None,
    limit: int | None = None,
    staleness: Staleness | None = None,
    quiet_ms: int | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    now = wall_clock_ms() if now_ms is None else now_ms
    judge = selectors.staleness() if staleness is None else staleness
    rows = (
        ObjectiveSummary.objects.filter(active=True)
        .order_by("updated_at")
        .values_list("id", "state")[: scan_limit(limit)]
    )
    scanned, reconciled = 0, []
    for objective_id, wire in rows:
        if deadline is not None and time.monotonic() > deadline:
            break
        scanned += 1
        try:
            state = objective_from_wire(wire)
            reason = assess(
                state,
                selectors.active_job_facts(objective_id),
                now,
                staleness=judge,
                quiet_ms=quiet_ms,
            )
            if reason is None:
                continue
            job_id = services.request_control(objective_id, RECONCILE, source=reason)
            services.ensure_control_enqueued(objective_id)
        except Exception as error:  # per objective: log and carry on
            log_event(
                logger,
                "factory.watchdog_error",
                f"watchdog on {objective_id} failed: {error}",
                level=logging.WARNING,
                objectiveId=objective_id,
            )
            continue
        reconciled.append({"objectiveId": objective_id, "reason": reason, "jobId": job_id})
        log_event(
            logger,
            "factory.watchdog_reconcile",
            f"reconciling {objective_id}: {reason}",
            objectiveId=objective_id,
            reason=reason,
            jobId=job_id,
        )
    return {"scanned": scanned, "reconciled": reconciled}


def handle(job: JobState, ctx: HandlerContext) -> JobResult:
    payload = job.payload if isinstance(job.payload, dict) else {}
    timeout_ms = max(MIN_TIMEOUT_MS, settings.RECEIPT.watchdog_timeout_ms)
    deadline = min(ctx.deadline, time.monotonic() + timeout_ms / 1000)
    quiet = payload.get("quietMs")
    result = scan(
        limit=payload.get("scanLimit"),
        deadline=deadline,
        staleness=selectors.staleness(
            live_ms=_int(payload, "liveStaleMs", LIVE_STALE_MS),
            computer_ms=_int(payload, "computerStaleMs", COMPUTER_STALE_MS),
        ),
        quiet_ms=quiet if isinstance(quiet, int) and quiet >= 0 else None,
    )
    return JobResult.success(result)
