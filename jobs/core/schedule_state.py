"""The fold of a schedule's stream `schedules/<name>`: its definition, whether it runs,
its next tick and its last run. Pure: the shell writes the next tick into each receipt
(`nextRunAt`), so the fold needs no cron library and no clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

from jobs.core import flat_wire
from jobs.core.schedules import (
    DECLARED,
    FIRED,
    PAUSED,
    REMOVED,
    RESUMED,
    RUN_NOW,
    SKIPPED,
)
from receipts.core.chain import Receipt

ACTIVE: Final = "active"
PAUSED_STATUS: Final = "paused"
REMOVED_STATUS: Final = "removed"


@dataclass(frozen=True)
class ScheduleState:
    name: str
    definition: dict[str, Any]  # jobs.core.schedules.Schedule.to_wire()
    source: str | None  # "settings" or "code"
    status: str  # active | paused | removed
    next_run_at: int | None  # the first tick not fired yet (None once removed)
    last_tick_at: int | None  # the last tick fired
    last_run_at: int | None  # when the last tick or run-now enqueued
    last_job_id: str | None  # that run's job
    last_error: str | None  # the last tick's enqueue was refused: why
    paused_by: str | None
    paused_at: int | None
    created_at: int
    updated_at: int
    receipt_count: int
    head: str


def _declared(state: ScheduleState | None, b: dict[str, Any], r: Receipt) -> ScheduleState:
    if state is None:
        return ScheduleState(
            name=b["name"],
            definition=b["definition"],
            source=b.get("source"),
            status=ACTIVE,
            next_run_at=b["nextRunAt"],
            last_tick_at=None,
            last_run_at=None,
            last_job_id=None,
            last_error=None,
            paused_by=None,
            paused_at=None,
            created_at=r.ts,
            updated_at=r.ts,
            receipt_count=0,
            head=r.hash,
        )
    # a paused schedule stays paused when its definition changes
    status = PAUSED_STATUS if state.status == PAUSED_STATUS else ACTIVE
    return replace(
        state,
        definition=b["definition"],
        source=b.get("source"),
        status=status,
        next_run_at=b["nextRunAt"],
    )


def _removed(state: ScheduleState, b: dict[str, Any], r: Receipt) -> ScheduleState:
    return replace(state, status=REMOVED_STATUS, next_run_at=None)


def _paused(state: ScheduleState, b: dict[str, Any], r: Receipt) -> ScheduleState:
    return replace(state, status=PAUSED_STATUS, paused_by=b.get("by"), paused_at=r.ts)


def _resumed(state: ScheduleState, b: dict[str, Any], r: Receipt) -> ScheduleState:
    return replace(state, status=ACTIVE, next_run_at=b["nextRunAt"], paused_by=None, paused_at=None)


def _fired(state: ScheduleState, b: dict[str, Any], r: Receipt) -> ScheduleState:
    return replace(
        state,
        next_run_at=b["nextRunAt"],
        last_tick_at=b["tick"],
        last_run_at=r.ts,
        last_job_id=b.get("jobId"),
        last_error=b.get("error"),
    )


def _skipped(state: ScheduleState, b: dict[str, Any], r: Receipt) -> ScheduleState:
    return replace(state, next_run_at=b["nextRunAt"])


def _run_now(state: ScheduleState, b: dict[str, Any], r: Receipt) -> ScheduleState:
    return replace(state, last_run_at=r.ts, last_job_id=b.get("jobId"), last_error=b.get("error"))


_APPLY: dict[str, Callable[[Any, dict[str, Any], Receipt], ScheduleState]] = {
    DECLARED: _declared,
    REMOVED: _removed,
    PAUSED: _paused,
    RESUMED: _resumed,
    FIRED: _fired,
    SKIPPED: _skipped,
    RUN_NOW: _run_now,
}


def reduce(state: ScheduleState | None, receipt: Receipt) -> ScheduleState | None:
    apply = _APPLY.get(receipt.type)
    if apply is None or (state is None and receipt.type != DECLARED):
        return state  # nothing to fold before a declaration
    after = apply(state, receipt.body, receipt)
    return replace(
        after, updated_at=receipt.ts, receipt_count=after.receipt_count + 1, head=receipt.hash
    )


def to_wire(state: ScheduleState) -> dict[str, Any]:
    return flat_wire.to_wire(state)


def from_wire(wire: dict[str, Any]) -> ScheduleState:
    return flat_wire.from_wire(ScheduleState, wire)
