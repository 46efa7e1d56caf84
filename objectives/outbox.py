"""L-3: the objective-control outbox redrive, and L-5's objective resume.

`redrive` finds objectives whose control request was recorded but never enqueued (the
summary row's `control_outbox_pending`) and enqueues them idempotently: the job id is
the request's deterministic one, and `objective.control.enqueued` is compare-and-appended
only while the request still lacks it, so two passes at once (in one process or many)
enqueue once. `Redrive` makes it single-flight per process with an observational
deadline: a slow pass keeps ownership until it settles, logs
`factory.control_outbox_redrive_slow`, and ticks meanwhile coalesce.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from jobs.runtime.loops import Report
from objectives import selectors, services
from objectives.core.watchdog import has_work_to_do
from objectives.models import ObjectiveSummary
from observability.logs import log_event

logger = logging.getLogger("receipt.factory")
BATCH = 200


def redrive(*, now_ms: int, limit: int = BATCH, min_age_ms: int = 0) -> Report:
    ids = list(
        ObjectiveSummary.objects.filter(
            control_outbox_pending=True, updated_at__lte=now_ms - min_age_ms
        )
        .order_by("updated_at")
        .values_list("id", flat=True)[:limit]
    )
    report = Report("control_outbox_redrive")
    for objective_id in ids:
        report.examined += 1
        try:
            report.acted += len(services.ensure_control_enqueued(objective_id))
        except Exception as error:  # per item: log the id and carry on
            report.errors.append(f"{objective_id}: {error}")
            log_event(
                logger,
                "factory.control_outbox_redrive_failed",
                f"outbox redrive of {objective_id} failed: {error}",
                level=logging.WARNING,
                objectiveId=objective_id,
            )
    return report


class Redrive:
    """Single-flight runner of `redrive` with an observational deadline (L-3)."""

    def __init__(self, timeout_ms: int, run: Callable[..., Report] = redrive) -> None:
        self.timeout_ms = timeout_ms
        self._run = run
        self._lock = threading.Lock()

    def __call__(self, now_ms: int) -> Report:
        if not self._lock.acquire(blocking=False):
            return Report("control_outbox_redrive")  # a pass is running: this tick coalesces
        watch = threading.Timer(self.timeout_ms / 1000, self._slow, args=(now_ms,))
        watch.daemon = True
        watch.start()
        try:
            return self._run(now_ms=now_ms)
        except Exception as error:
            log_event(
                logger,
                "factory.control_outbox_redrive_failed",
                f"outbox redrive pass failed: {error}",
                level=logging.ERROR,
            )
            raise
        finally:
            watch.cancel()
            self._lock.release()

    def _slow(self, started_ms: int) -> None:
        log_event(
            logger,
            "factory.control_outbox_redrive_slow",
            f"control outbox redrive has run longer than {self.timeout_ms} ms; it keeps "
            "ownership until it settles",
            level=logging.WARNING,
            startedAt=started_ms,
            timeoutMs=self.timeout_ms,
        )


def resume(*, now_ms: int, limit: int = 1000) -> Report:
    """L-5: request control for active objectives with no pending work."""
    report = Report("objective_resume")
    rows = (
        ObjectiveSummary.objects.filter(active=True)
        .order_by("updated_at")
        .values_list("id", flat=True)[:limit]
    )
    for objective_id in rows:
        report.examined += 1
        try:
            state = selectors.get(objective_id)
            if state is None or not has_work_to_do(state):
                continue
            if any(f.is_active for f in selectors.active_job_facts(objective_id)):
                continue
            services.request_control(objective_id, "startup_resume")
            services.ensure_control_enqueued(objective_id)
            report.acted += 1
        except Exception as error:
            report.errors.append(f"{objective_id}: {error}")
            log_event(
                logger,
                "factory.resume_failed",
                f"resume of {objective_id} failed: {error}",
                level=logging.WARNING,
                objectiveId=objective_id,
            )
    return report
