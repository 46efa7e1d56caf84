"""Runs a runworker's maintenance loops and records each run (L-6).

Two schedules, each on a thread that already has its database connection (the budget of
a runworker is its concurrency + 3):
- the maintenance loops share ONE thread of their own; a pass there may be long (a
  retention batch-set, a redrive of many jobs);
- time-critical loops (`Loop.time_critical`: due delayed jobs, lease expiry, gone-holder
  release, the callbacks pump) run on the lease keeper's thread, between its passes, so they never
  wait behind a slow maintenance pass: a gone holder's leases are released within 30 s
  (T-8) whatever retention is doing. Their passes are short and bounded by construction.
Each loop is single-flight: ticks that fall due while a pass runs coalesce into the next
one instead of piling up; a schedule runs whichever of its loops is due first.

A loop's pass is `(now_ms) -> Report`; `each_pass` makes one of a `run(*, now_ms)`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections

from jobs.models import LoopRun
from jobs.runtime import counters
from observability.logs import log_event
from receipts.clock import now_ms as wall_clock_ms

logger = logging.getLogger("receipt.loops")


@dataclass
class Report:
    """What one pass of a loop did: candidates examined, acted on, and per-item errors."""

    name: str
    examined: int = 0
    acted: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Loop:
    name: str
    interval_ms: int
    startup_delay_ms: int
    run: Callable[[int], Report]  # now_ms -> report
    once: bool = False  # L-5: startup passes run one time
    time_critical: bool = False  # on the keeper's thread: short passes, never queued


def each_pass(run: Callable[..., Report]) -> Callable[[int], Report]:
    """A loop's pass: `run(now_ms=now)`."""
    return lambda now: run(now_ms=now)


# Apps add role-specific loops here: provider(config, cluster) -> loops (e.g. Factory's
# control outbox redrive, L-3, on worker-control). See runworker.maintenance_loops.
providers: list[Callable[[Any, str], list[Loop]]] = []


def record(
    loop: str,
    process_id: str,
    *,
    started_ms: int,
    finished_ms: int,
    report: Report | None,
    error: str | None,
) -> None:
    row, _ = LoopRun.objects.get_or_create(
        loop=loop, process_id=process_id, defaults={"last_started_at": started_ms}
    )
    row.last_started_at = started_ms
    row.last_finished_at = finished_ms
    row.duration_ms = finished_ms - started_ms
    row.runs += 1
    row.acted = report.acted if report else 0
    if error or (report and report.errors):
        row.last_error = error or "; ".join(report.errors[:5])  # type: ignore[union-attr]
        row.last_error_at = finished_ms
    row.save()


def run_once(loop: Loop, process_id: str) -> Report | None:
    started = wall_clock_ms()
    report, error = None, None
    try:
        report = loop.run(started)
    except Exception as exc:  # a loop never dies of one bad pass
        error = f"{type(exc).__name__}: {exc}"
        log_event(
            logger,
            f"loop.{loop.name}_error",
            f"{loop.name} pass failed: {exc}",
            level=logging.ERROR,
            loop=loop.name,
            exc_info=True,
        )
    finished = wall_clock_ms()
    counters.incr("receipt_loop_seconds_total", (finished - started) / 1000, loop=loop.name)
    counters.incr("receipt_loop_runs_total", loop=loop.name)
    try:
        record(
            loop.name,
            process_id,
            started_ms=started,
            finished_ms=finished,
            report=report,
            error=error,
        )
        counters.flush()
    except Exception as exc:
        log_event(
            logger,
            "loop.record_failed",
            f"could not record {loop.name}: {exc}",
            level=logging.WARNING,
            loop=loop.name,
        )
    finally:
        close_old_connections()
    return report


class Schedule:
    """Loops and when each is next due; `run_due` runs those whose time has come."""

    def __init__(self, loops: list[Loop], process_id: str) -> None:
        self.loops = loops
        self.process_id = process_id
        start = time.monotonic()
        self.due = {index: start + loop.startup_delay_ms / 1000 for index, loop in enumerate(loops)}

    def next_in_s(self) -> float | None:
        """Seconds until the next loop is due (0 when one is), None when none is left."""
        if not self.due:
            return None
        return max(0.0, min(self.due.values()) - time.monotonic())

    def run_next(self) -> None:
        """Run the loop due first (whether or not its time has come)."""
        index = min(self.due, key=lambda i: (self.due[i], i))
        loop = self.loops[index]
        run_once(loop, self.process_id)
        if loop.once:
            del self.due[index]
        else:  # the next tick counts from the end of this pass: ticks never pile up
            self.due[index] = time.monotonic() + loop.interval_ms / 1000

    def run_due(self) -> None:
        """Run every loop whose time has come, each once."""
        for _ in range(len(self.due)):
            if self.next_in_s() != 0.0:
                return
            self.run_next()


def split(loops: list[Loop]) -> tuple[list[Loop], list[Loop]]:
    """(maintenance loops, time-critical loops)."""
    return [lp for lp in loops if not lp.time_critical], [lp for lp in loops if lp.time_critical]


def _schedule(loops: list[Loop], process_id: str, stop: threading.Event) -> None:
    schedule = Schedule(loops, process_id)
    while (wait_s := schedule.next_in_s()) is not None and not stop.is_set():
        if stop.wait(wait_s):
            return
        schedule.run_next()


def start(loops: list[Loop], process_id: str, stop: threading.Event) -> list[threading.Thread]:
    """The maintenance thread for `loops` (time-critical ones belong to the keeper's)."""
    thread = threading.Thread(
        target=_schedule, args=(loops, process_id, stop), name="maintenance-loops", daemon=True
    )
    thread.start()
    return [thread]


def summary(
    *, process_ids: Collection[str] | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """The last run of each loop in each process; only those of `process_ids` when given
    (the live processes': a gone process's row would report a loop nobody runs, L-6)."""
    rows = LoopRun.objects.order_by("loop", "process_id")
    if process_ids is not None:
        rows = rows.filter(process_id__in=list(process_ids))
    rows = rows[:limit]
    return [
        {
            "loop": r.loop,
            "process": r.process_id,
            "lastStartedAt": r.last_started_at,
            "lastFinishedAt": r.last_finished_at,
            "durationMs": r.duration_ms,
            "acted": r.acted,
            "runs": r.runs,
            "lastError": r.last_error,
            "lastErrorAt": r.last_error_at,
        }
        for r in rows
    ]
