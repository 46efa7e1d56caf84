"""Schedules (cron and interval): the only writer of `schedules/<name>` receipts.

A schedule is declared in settings (RECEIPT_SCHEDULES) or in code with `schedule(...)`
in a handler module. Every runworker runs the `schedules` loop on its lease keeper's
thread: its first pass records each declaration that is new or changed
(`schedule.declared`) and each stored schedule no longer declared (`schedule.removed`);
every pass fires the due ticks. A tick's job id is derived from the schedule and the
tick (`sched-<name>-<tick>`), and the tick is fired under the lock of the schedule's
stream, so however many processes run the loop a tick makes one job and one
`schedule.fired` receipt. Operators pause, resume and run a schedule now from the
admin, the CLI or here, each on record with `by`.

The pure rules (job ids, the missed-tick policy, the fold) are in `jobs.core.schedules`
and `jobs.core.schedule_state`, the cron arithmetic in `jobs.ticks`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from jobs import handlers, queue, ticks
from jobs.core import schedules as core
from jobs.core.schedule_state import ACTIVE, PAUSED_STATUS, REMOVED_STATUS, ScheduleState
from jobs.core.schedules import Schedule, ScheduleError, schedule
from jobs.core.state import JobState
from jobs.errors import JobsError, ScheduleNotFound
from jobs.models import Job
from jobs.models import Schedule as ScheduleRow
from jobs.runtime.loops import Loop, Report
from jobs.schedule_projector import CACHE_KEY, load_state
from jobs.validation import MAX_BY, build_request, check_text
from observability.logs import log_event
from receipts import store
from receipts.clock import now_ms as wall_clock_ms

__all__ = ["Schedule", "ScheduleError", "fire_due", "pause", "resume", "run_now", "schedule"]

logger = logging.getLogger("receipt.schedules")
SCHEDULER = "scheduler"  # `by` of what the scheduler records itself
POLL_MS = 1_000  # how often each runworker looks for due ticks (one indexed query)
PASS_LIMIT = 100  # schedules fired per pass; the rest are due at the next one
SETTINGS, CODE = "settings", "code"


# ---- declarations ------------------------------------------------------------------------


def declarations(config: Any) -> tuple[list[tuple[Schedule, str]], list[str]]:
    """(schedule, source) for every schedule declared in settings or in code, and the
    problems found. A name declared in both is the settings' (an operator overrides)."""
    handlers.load()  # handler modules declare the code's schedules as they are imported
    found = [(s, SETTINGS) for s in config.schedules]
    problems = []
    named = {s.name for s in config.schedules}
    for declared in core.declared_in_code():
        if declared.name in named:
            problems.append(f"{declared.name}: declared in settings and in code; settings win")
            continue
        found.append((declared, CODE))
    return found, problems


def sync(
    declared: Sequence[tuple[Schedule, str]], *, now_ms: int | None = None, by: str = SCHEDULER
) -> Report:
    """Record each declaration that is new or changed, and remove stored schedules that
    are not declared. A new or changed schedule's next run is its first tick after now;
    a paused one stays paused."""
    now = wall_clock_ms() if now_ms is None else now_ms
    report = Report("schedules_sync")
    for item, source in declared:
        report.examined += 1
        try:
            _check_enqueue(item)
            report.acted += _declare(item, source, now=now, by=by)
        except (JobsError, ScheduleError) as error:
            report.errors.append(f"{item.name}: {error}")
            log_event(
                logger,
                "schedules.declaration_refused",
                f"schedule {item.name} refused: {error}",
                level=logging.ERROR,
                schedule=item.name,
            )
    names = {item.name for item, _ in declared}
    stored = ScheduleRow.objects.exclude(status=REMOVED_STATUS).values_list("name", flat=True)
    for name in sorted(set(stored) - names):
        report.acted += _remove(name, now=now, by=by)
    return report


def _check_enqueue(item: Schedule) -> None:
    """The enqueue's own validation (agent id, registered kind, payload, options), with a
    tick's job id: a schedule that could never enqueue is refused when it is declared."""
    build_request(
        item.agent_id, item.payload, job_id=core.tick_job_id(item.name, 0), **item.options
    )


def _declare(item: Schedule, source: str, *, now: int, by: str) -> int:
    wire = item.to_wire()
    with transaction.atomic(), _locked(item.name) as (handle, state):
        if state is not None and state.status != REMOVED_STATUS and state.definition == wire:
            return 0
        body = {
            "type": core.DECLARED,
            "name": item.name,
            "definition": wire,
            "source": source,
            "nextRunAt": ticks.next_after(item, now),
            "by": by,
        }
        handle.append(body, now_ms=now, context={"actor": by})
    log_event(logger, "schedules.declared", f"schedule {item.name} declared", schedule=item.name)
    return 1


def _remove(name: str, *, now: int, by: str) -> int:
    with transaction.atomic(), _locked(name) as (handle, state):
        if state is None or state.status == REMOVED_STATUS:
            return 0
        handle.append(
            {"type": core.REMOVED, "name": name, "by": by}, now_ms=now, context={"actor": by}
        )
    log_event(logger, "schedules.removed", f"schedule {name} removed", schedule=name)
    return 1


# ---- ticks -------------------------------------------------------------------------------


def fire_due(*, now_ms: int | None = None, limit: int = PASS_LIMIT) -> Report:
    """Fire every active schedule whose next run has come (one indexed query)."""
    now = wall_clock_ms() if now_ms is None else now_ms
    report = Report("schedules")
    due = (
        ScheduleRow.objects.filter(status=ACTIVE, next_run_at__lte=now)
        .order_by("next_run_at")
        .values_list("name", flat=True)[:limit]
    )
    for name in list(due):
        report.examined += 1
        try:
            report.acted += fire(name, now_ms=now) is not None
        except Exception as error:  # one schedule's failure never stops the others
            report.errors.append(f"{name}: {type(error).__name__}: {error}")
            log_event(
                logger,
                "schedules.fire_failed",
                f"schedule {name} failed to fire: {error}",
                level=logging.ERROR,
                schedule=name,
                exc_info=True,
            )
    return report


def fire(name: str, *, now_ms: int) -> str | None:
    """Fire `name`'s due tick under its stream's lock: the tick's job id, or None when
    nothing was due (another process fired it) or the missed ticks were skipped."""
    with transaction.atomic(), _locked(name) as (handle, state):
        if (
            state is None
            or state.status != ACTIVE
            or state.next_run_at is None
            or state.next_run_at > now_ms
        ):
            return None
        item = core.from_wire(state.definition)
        latest = ticks.latest_at_or_before(item, now_ms)
        tick = core.tick_to_fire(
            next_run_ms=state.next_run_at, latest_due_ms=latest, now_ms=now_ms, missed=item.missed
        )
        # the latest due tick is at or before now, so the one after it is in the future
        after = ticks.next_after(item, max(latest, state.next_run_at))
        if tick is None:
            body = {
                "type": core.SKIPPED,
                "name": name,
                "firstDue": state.next_run_at,
                "lastDue": latest,
                "nextRunAt": after,
                "by": SCHEDULER,
            }
            handle.append(body, now_ms=now_ms, context={"actor": SCHEDULER})
            return None
        job_id = core.tick_job_id(name, tick)
        body = {
            "type": core.FIRED,
            "name": name,
            "tick": tick,
            "jobId": job_id,
            "firstDue": state.next_run_at,
            "nextRunAt": after,
            "by": SCHEDULER,
        }
        try:
            enqueued = queue.enqueue(
                item.agent_id,
                item.payload,
                job_id=job_id,
                by=SCHEDULER,
                now_ms=now_ms,
                **item.options,
            )
        except JobsError as error:  # e.g. its kind is no longer registered: on record
            body.update(jobId=None, error=f"{error.code}: {error}")
        else:
            body["created"] = enqueued.created
        handle.append(body, now_ms=now_ms, context={"actor": SCHEDULER})
    return job_id if body["jobId"] else None


# ---- operators ---------------------------------------------------------------------------


def pause(name: str, *, by: str, now_ms: int | None = None) -> ScheduleState:
    """Stop firing `name` until it is resumed; pausing a paused schedule changes nothing."""
    with _operated(name, by=by, now_ms=now_ms) as (handle, state, now):
        if state.status != PAUSED_STATUS:
            handle.append(
                {"type": core.PAUSED, "name": name, "by": by}, now_ms=now, context={"actor": by}
            )
        result: ScheduleState = handle.cache[CACHE_KEY]
    _logged("paused", name, by)
    return result


def resume(name: str, *, by: str, now_ms: int | None = None) -> ScheduleState:
    """Fire `name` again from its first tick after now: ticks that fell while it was
    paused do not run."""
    with _operated(name, by=by, now_ms=now_ms) as (handle, state, now):
        if state.status == PAUSED_STATUS:
            after = ticks.next_after(core.from_wire(state.definition), now)
            body = {"type": core.RESUMED, "name": name, "nextRunAt": after, "by": by}
            handle.append(body, now_ms=now, context={"actor": by})
        result: ScheduleState = handle.cache[CACHE_KEY]
    _logged("resumed", name, by)
    return result


@dataclass(frozen=True)
class RunNow:
    job: JobState
    schedule: ScheduleState


def run_now(name: str, *, by: str, now_ms: int | None = None) -> RunNow:
    """Enqueue `name`'s job now, paused or not, under a job id of its own
    (`sched-<name>-now-<n>`); its ticks are unchanged. A refused enqueue writes nothing."""
    with _operated(name, by=by, now_ms=now_ms) as (handle, state, now):
        item = core.from_wire(state.definition)
        job_id = core.run_now_job_id(name, handle.count + 1)
        enqueued = queue.enqueue(
            item.agent_id, item.payload, job_id=job_id, by=by, now_ms=now, **item.options
        )
        body = {"type": core.RUN_NOW, "name": name, "jobId": job_id, "by": by}
        handle.append(body, now_ms=now, context={"actor": by})
        result = RunNow(enqueued.job, handle.cache[CACHE_KEY])
    _logged("run_now", name, by, jobId=job_id)
    return result


@contextmanager
def _operated(
    name: str, *, by: str, now_ms: int | None
) -> Iterator[tuple[store.StreamHandle, ScheduleState, int]]:
    """An operator's action on `name`: `by` checked, the stream locked in a transaction,
    the schedule declared (not removed); yields the handle, its state and the time."""
    check_text("invalid_by", "by", by, MAX_BY, required=True)
    now = wall_clock_ms() if now_ms is None else now_ms
    with transaction.atomic(), _locked(name) as (handle, state):
        if state is None or state.status == REMOVED_STATUS:
            raise ScheduleNotFound(name, removed=state is not None)
        yield handle, state, now


def _logged(action: str, name: str, by: str, **fields: Any) -> None:
    log_event(
        logger,
        f"schedules.{action}",
        f"schedule {name} {action} by {by}",
        schedule=name,
        by=by,
        **fields,
    )


@contextmanager
def _locked(name: str) -> Iterator[tuple[store.StreamHandle, ScheduleState | None]]:
    """Lock `schedules/<name>` (inside the caller's transaction) and read its state."""
    with store.open_stream(core.STREAM_PREFIX + name, savepoint=False) as handle:
        state = load_state(name) if handle.existed else None
        handle.cache[CACHE_KEY] = state  # the projector folds onto it: no second read
        yield handle, state


# ---- reads -------------------------------------------------------------------------------


def listing(
    *, organization_id: str | None = None, after: str | None = None, limit: int = 500
) -> list[dict[str, Any]]:
    """A keyset page of schedules by name (after the name `after`) with each one's last
    outcome (its last run's job status: one query by primary key for the page), as JSON
    for the API and the CLI."""
    rows = ScheduleRow.objects.order_by("name")
    if organization_id is not None:
        rows = rows.filter(organization_id=organization_id)
    if after is not None:
        rows = rows.filter(name__gt=after)
    page = list(rows[:limit])
    outcomes = last_outcomes(page)
    return [schedule_json(row, outcomes.get(row.last_job_id or "")) for row in page]


def last_outcomes(rows: Sequence[ScheduleRow]) -> dict[str, str]:
    """last job id -> that job's status, for the jobs that still exist."""
    ids = [row.last_job_id for row in rows if row.last_job_id]
    return dict(Job.objects.filter(pk__in=ids).values_list("id", "status")) if ids else {}


def schedule_json(row: ScheduleRow, outcome: str | None) -> dict[str, Any]:
    state = row.state
    definition = state.get("definition") or {}
    return {
        "name": row.name,
        "trigger": row.trigger,
        "agentId": row.agent_id,
        "kind": row.kind,
        "status": row.status,
        "missed": definition.get("missed"),
        "source": state.get("source"),
        "nextRunAt": row.next_run_at if row.status == ACTIVE else None,
        "lastRunAt": row.last_run_at,
        "lastJobId": row.last_job_id,
        "lastOutcome": outcome,
        "lastError": state.get("lastError"),
        "pausedBy": state.get("pausedBy"),
        "pausedAt": state.get("pausedAt"),
        "stream": core.STREAM_PREFIX + row.name,
    }


# ---- the loop ----------------------------------------------------------------------------


class Scheduler:
    """The `schedules` loop's pass: the first one records the declarations, every one
    fires the due ticks."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.synced = False

    def __call__(self, now_ms: int) -> Report:
        report = Report("schedules")
        if not self.synced:
            declared, problems = declarations(self.config)
            synced = sync(declared, now_ms=now_ms)
            self.synced = True  # per-schedule problems are reported, not retried each second
            report.examined, report.acted = synced.examined, synced.acted
            report.errors += problems + synced.errors
        fired = fire_due(now_ms=now_ms)
        report.examined += fired.examined
        report.acted += fired.acted
        report.errors += fired.errors
        return report


def loops(config: Any, role: str) -> list[Loop]:
    """A `jobs.runtime.loops.providers` entry: every runworker runs the scheduler, on its
    keeper's thread (a tick is due at its second, never behind a retention pass)."""
    return [Loop("schedules", POLL_MS, 0, Scheduler(config), time_critical=True)]
