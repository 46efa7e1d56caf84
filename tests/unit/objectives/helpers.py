"""Builders for the objective core's unit tests: receipts without a database."""

from __future__ import annotations

import secrets
from typing import Any

from objectives.core import vocabulary as v
from objectives.core.control import PassInput, PassPlan, PlanOutcome, decide
from objectives.core.dag import validate_plan
from objectives.core.facts import JobFact
from objectives.core.intake import read_input
from objectives.core.reducer import reduce
from objectives.core.state import ObjectiveState
from objectives.core.wire import to_wire
from receipts.core.chain import Receipt, seal

OID = "obj-1"
AUTH = {"userId": "u-1", "organizationId": "org-1"}


class Chain:
    """An objective stream in memory: append bodies, fold as the projector would."""

    def __init__(self, objective_id: str = OID) -> None:
        self.stream = v.objective_stream(objective_id)
        self.receipts: list[Receipt] = []
        self._state: ObjectiveState | None = None

    @property
    def state(self) -> ObjectiveState:
        """The fold so far (a chain is read after its first append)."""
        assert self._state is not None
        return self._state

    def append(self, *bodies: dict[str, Any], ts: int = 1_000) -> ObjectiveState:
        for body in bodies:
            prev = self.receipts[-1].hash if self.receipts else None
            receipt = seal(
                stream=self.stream, prev=prev, body=body, ts=ts, random_hex16=secrets.token_hex(8)
            )
            self.receipts.append(receipt)
            self._state = reduce(self._state, receipt)
        return self.state


def created(objective_id: str = OID, **fields: Any) -> dict[str, Any]:
    spec = read_input({"title": "Ship it", **fields})
    return {
        "type": v.OBJECTIVE_CREATED,
        "objectiveId": objective_id,
        "title": spec.title,
        "prompt": spec.prompt,
        "mode": spec.mode,
        "severity": spec.severity,
        "checks": [to_wire(c) for c in spec.checks],
        "tasks": spec.tasks,
        "policy": to_wire(spec.policy),
        "publishCommand": spec.publish_command,
        "authContext": dict(AUTH),
        "createdBy": "tester",
    }


def diamond() -> list[dict[str, Any]]:
    return [
        {"id": "a", "title": "A", "command": "true"},
        {"id": "b", "title": "B", "command": "true", "dependsOn": ["a"]},
        {"id": "c", "title": "C", "command": "true", "dependsOn": ["a"]},
        {"id": "d", "title": "D", "command": "true", "dependsOn": ["b", "c"]},
    ]


def plan_of(state: ObjectiveState) -> PlanOutcome:
    return PlanOutcome(tasks=tuple(validate_plan(state.input_tasks)))


def run_pass(
    chain: Chain,
    facts: dict[str, JobFact] | None = None,
    *,
    now: int = 2_000,
    slot_free: bool = True,
    **extra: Any,
) -> PassPlan:
    state = chain.state
    plan = extra.pop("plan", None)
    if plan is None and state.status == "planning" and state.input_tasks is not None:
        plan = plan_of(state)
    result = decide(
        PassInput(
            state=state, facts=facts or {}, now_ms=now, plan=plan, slot_free=slot_free, **extra
        )
    )
    if result.events:
        chain.append(*result.events, ts=now)
    return result


def fact(job_id: str, status: str = "completed", **fields: Any) -> JobFact:
    return JobFact(job_id=job_id, status=status, **fields)
