"""The shell around one control pass (O-7): gather facts, decide purely, compare-and-append.

Facts are read fresh on every attempt (a moved head means something happened); the
planner runs at most once per pass. A pass that takes a repo slot re-checks the pool
inside its transaction under a lock, so two passes cannot both take the last slot.
After a pass that settles an objective, the freed slot wakes the longest-waiting one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection

from objectives import planners, selectors, services
from objectives.core import vocabulary as v
from objectives.core import wire
from objectives.core.control import PassInput, PassPlan, PlanOutcome, decide, needs_plan, needs_slot
from objectives.core.state import ObjectiveState
from objectives.core.watchdog import RECONCILE
from receipts.clock import now_ms as wall_clock_ms

SLOT_LOCK = "receipt:factory:repo-slots"


@dataclass(frozen=True)
class PassReport:
    objective_id: str
    status: str | None
    events: list[str]
    effects: int

    def to_wire(self) -> dict[str, Any]:
        return wire.to_wire(self)


def _slot_free() -> bool:
    return selectors.held_slots() < settings.RECEIPT.repo_slot_concurrency


def _lock_slots() -> None:
    # SQLite needs nothing: IMMEDIATE transactions already hold the database write lock.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [SLOT_LOCK])


def _check_slot() -> None:
    _lock_slots()
    if not _slot_free():
        raise services.Retry()


def run(
    objective_id: str,
    *,
    pass_job_id: str | None,
    reconcile: bool = False,
    deadline_s: float | None = None,
) -> PassReport:
    plans: dict[Any, PlanOutcome] = {}
    outcome: dict[str, PassPlan] = {}

    def plan_once(state: ObjectiveState) -> PlanOutcome:
        key = (state.plan_revision, repr(state.input_tasks), state.reacts)
        if key not in plans:
            budget = planners.DEFAULT_TIMEOUT_S
            if deadline_s is not None:
                budget = max(1.0, min(budget, deadline_s - time.monotonic() - 2))
            plans[key] = planners.plan_for(state, timeout_s=budget)
        return plans[key]

    def decide_pass(state: ObjectiveState | None) -> services.Mutation | None:
        if state is None:
            return None
        facts = selectors.job_facts(ref.job_id for ref in state.jobs)
        wants_slot = needs_slot(state)
        result = decide(
            PassInput(
                state=state,
                facts=facts,
                now_ms=wall_clock_ms(),
                pass_job_id=pass_job_id,
                plan=plan_once(state) if needs_plan(state) else None,
                slot_free=_slot_free() if wants_slot else False,
                reconcile=reconcile or any(r.reason == RECONCILE for r in state.pending_requests),
                staleness=selectors.staleness(),
            )
        )
        outcome["plan"] = result
        takes_slot = any(e["type"] == v.SLOT_ACQUIRED for e in result.events)
        after: list[Any] = []
        if result.state.is_terminal and not state.is_terminal and state.slot_held:
            after.append(services.release_slots)
        if not result.events and result.effects:
            services.apply_effects(result.effects)  # repairs only: nothing to record
        return services.Mutation(
            list(result.events),
            result.effects,
            guard=_check_slot if takes_slot else None,
            after_commit=after,
        )

    written = services.mutate(objective_id, decide_pass, job_id=pass_job_id, actor=v.CONTROL_AGENT)
    plan = outcome.get("plan")
    state = written.state or selectors.get(objective_id)
    return PassReport(
        objective_id,
        state.status if state else None,
        [e["type"] for e in plan.events] if plan else [],
        len(plan.effects) if plan else 0,
    )
