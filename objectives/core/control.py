"""One objective control pass (O-7), decided purely.

`decide(PassInput) -> PassPlan`: given the objective's fold, facts about the jobs it
spawned, the planner's answer (when it was planning), whether a repo slot is free and
the time, return the receipts to compare-and-append on the head that was read and the
effects (idempotent enqueues with deterministic job ids, aborts) to perform in the same
transaction. The pass looks ahead with the reducer, so one pass takes every step that
needs nothing from outside: planned -> slot -> ready -> dispatch, or
evidence ready -> synthesized -> completed -> audit requested.

Order of a pass:
 1. consume the pending control requests (`objective.control.pass`);
 2. repair: enqueue again any recorded job that does not exist (a crash between the
    receipt and the enqueue), and on a watchdog reconcile abort stale work that is
    superseded or stalled;
 3. then, step by step until nothing applies: a terminal objective gets its audit; a
    cancel in progress waits for the canceller; settled jobs' outcomes are recorded; a
    blocked objective stops there; the time budget; a blocked task blocks the objective;
    planning; the repo slot (delivery); marking ready; dispatching up to
    maxActiveTasks running and maxDispatchesPerReact per pass, within maxTaskRuns;
    then integration (delivery: validate -> promotion gate -> publish -> completed;
    investigation: evidence ready -> synthesizing -> completed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from objectives.core import dag
from objectives.core import vocabulary as v
from objectives.core.facts import JobFact, Staleness, is_stale
from objectives.core.reducer import apply
from objectives.core.state import ObjectiveState, Task, TaskRun
from objectives.core.wire import to_wire

MAX_STEPS: Final = 24
MAX_AUDIT_ROUNDS: Final = 3
Body = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanOutcome:
    """The planner's answer for an objective in `planning` (O-5)."""

    tasks: tuple[dag.TaskSpec, ...] = ()
    error: str | None = None
    source: str = "input"


@dataclass(frozen=True, slots=True, kw_only=True)
class Enqueue:
    agent_id: str
    job_id: str
    payload: dict[str, Any]
    lane: str = "collect"
    max_attempts: int = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Abort:
    job_id: str
    reason: str


Effect = Enqueue | Abort


@dataclass(frozen=True, slots=True, kw_only=True)
class PassInput:
    state: ObjectiveState
    facts: Mapping[str, JobFact]
    now_ms: int
    pass_job_id: str | None = None
    plan: PlanOutcome | None = None
    slot_free: bool = False
    reconcile: bool = False
    staleness: Staleness = field(default_factory=Staleness)


@dataclass(frozen=True, slots=True)
class PassPlan:
    events: tuple[Body, ...]
    effects: tuple[Effect, ...]
    state: ObjectiveState  # the fold after `events`


@dataclass
class _Pass:
    inp: PassInput
    state: ObjectiveState
    events: list[Body] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    dispatched: int = 0

    def emit(self, *bodies: Body) -> None:
        for body in bodies:
            self.state = apply(self.state, body, self.inp.now_ms)
            self.events.append(body)


def needs_plan(state: ObjectiveState) -> bool:
    return state.status == "planning" and not state.tasks and not state.cancel_requested


def needs_slot(state: ObjectiveState) -> bool:
    return (
        state.mode == "delivery"
        and not state.slot_held
        and state.status in ("planning", "waiting_for_slot")
    )


def control_requested(objective_id: str, number: int, reason: str, source: str | None) -> Body:
    """`objective.control.enqueue.requested`: the outbox receipt of request `number` (O-8)."""
    body = {"type": v.CONTROL_REQUESTED, "requestId": number, "reason": reason}
    body["jobId"] = v.control_job_id(objective_id, number)
    return {**body, "source": source} if source else body


def decide(inp: PassInput) -> PassPlan:
    run = _Pass(inp=inp, state=inp.state)
    pending = [r.id for r in inp.state.pending_requests]
    if inp.pass_job_id and pending:
        reasons = sorted({r.reason for r in inp.state.pending_requests})
        run.emit(
            {
                "type": v.CONTROL_PASS,
                "jobId": inp.pass_job_id,
                "requestIds": pending,
                "reasons": reasons,
            }
        )
    _repairs(run)
    for _ in range(MAX_STEPS):
        if not _step(run):
            break
    return PassPlan(tuple(run.events), tuple(run.effects), run.state)


# ---- repairs ----------------------------------------------------------------------------


def _repairs(run: _Pass) -> None:
    s, facts = run.state, run.inp.facts
    for enqueue in current_jobs(s):
        if enqueue.job_id not in facts:  # recorded but never enqueued (or lost): again
            run.effects.append(enqueue)
    if not run.inp.reconcile:
        return
    open_runs = {t.open_run.job_id for t in s.tasks if t.open_run}
    for ref in s.jobs:
        fact = facts.get(ref.job_id)
        if (
            fact is None
            or fact.abort_requested
            or not is_stale(fact, run.inp.now_ms, run.inp.staleness)
        ):
            continue
        if s.is_terminal or s.is_blocked:
            why = f"superseded: the objective is {s.status}"
        elif ref.phase != s.phase:
            why = f"superseded by phase {s.phase}"
        elif ref.job_id in open_runs or ref.kind != v.KIND_TASK_RUN:
            why = "stalled"
        else:
            continue
        seconds = (run.inp.now_ms - fact.updated_at) // 1000
        run.effects.append(
            Abort(
                job_id=ref.job_id,
                reason=(f"{why}: no heartbeat or progress for {seconds} s (watchdog reconcile)"),
            )
        )


def current_jobs(s: ObjectiveState) -> list[Enqueue]:
    """Every job the objective's receipts say should exist right now, as its enqueue."""
    out: list[Enqueue] = []
    if not s.is_terminal and not s.cancel_requested:
        for task in s.tasks:
            if task.open_run is not None:
                out += _task_enqueues(s, task, task.open_run)
        if s.integration.status in ("requested", "validating") and s.integration.validate_job_id:
            out.append(
                _round_job(s, v.KIND_VALIDATE, s.integration.round, s.integration.validate_job_id)
            )
        if s.integration.status == "publish_requested" and s.integration.publish_job_id:
            out.append(
                _round_job(
                    s, v.KIND_PUBLISH, s.integration.publish_round, s.integration.publish_job_id
                )
            )
    if s.is_terminal and s.audit.status == "requested" and s.audit.job_id:
        out.append(_round_job(s, v.KIND_AUDIT, s.audit.round, s.audit.job_id))
    return out


# ---- steps --------------------------------------------------------------------------------


def _step(run: _Pass) -> bool:
    s = run.state
    if s.is_terminal:
        return _audit_step(run)
    if s.cancel_requested:
        return False  # the cancel action aborts the jobs and settles the objective
    if _record_outcomes(run):
        return True
    if s.is_blocked:
        return False
    for step in (_budget, _blocked_task, _plan, _slot, _mark_ready, _dispatch, _finish):
        if step(run):
            return True
    return False


def _audit_step(run: _Pass) -> bool:
    s = run.state
    audit = s.audit
    if audit.status == "none" or (audit.status == "superseded" and audit.round < MAX_AUDIT_ROUNDS):
        round_no = audit.round + 1
        job_id = v.audit_job_id(s.objective_id, round_no)
        run.emit({"type": v.AUDIT_REQUESTED, "jobId": job_id, "round": round_no})
        run.effects.append(_round_job(s, v.KIND_AUDIT, round_no, job_id))
        return True
    return False


def _record_outcomes(run: _Pass) -> bool:
    s, facts = run.state, run.inp.facts
    bodies: list[Body] = []
    for task in s.tasks:
        open_run = task.open_run
        fact = facts.get(open_run.job_id) if open_run else None
        if open_run is not None and fact is not None and fact.is_terminal:
            bodies.append(outcome_body(task, open_run, fact))
    integration = s.integration
    validate = facts.get(integration.validate_job_id or "")
    if integration.status in ("requested", "validating") and validate and validate.is_terminal:
        bodies.append(_no_verdict(v.INTEGRATION_VALIDATION_FAILED, "validate", validate))
    publish = facts.get(integration.publish_job_id or "")
    if integration.status == "publish_requested" and publish and publish.is_terminal:
        bodies.append(_no_verdict(v.PUBLISH_FAILED, "publish", publish))
    run.emit(*bodies)
    return bool(bodies)


def _no_verdict(body_type: str, what: str, fact: JobFact) -> Body:
    """A validate or publish job that settled without reporting its verdict."""
    return {
        "type": body_type,
        "jobId": fact.job_id,
        "reason": f"{what} job {fact.job_id} {fact.status} without a verdict: "
        f"{fact.last_error or 'no error recorded'}",
    }


def outcome_body(task: Task, open_run: TaskRun, fact: JobFact) -> Body:
    """`task.outcome.recorded` from a settled task job (O-6).

    A job canceled by anyone but control itself was aborted by an operator (admin, API,
    CLI, an `abort-job` action): that pass is `aborted` and the task stops there. Control's
    own aborts (stalled, superseded) are `canceled`, a failed pass that is tried again."""
    result = fact.result if isinstance(fact.result, dict) else {}
    extra: Body = {}
    if fact.status == "completed":
        outcome = result.get("outcome")
        if outcome not in (*v.OUTCOMES, v.FAILED_OUTCOME):
            outcome = v.FAILED_OUTCOME
    elif fact.status == "canceled" and fact.aborted_by != v.CONTROL_AGENT:
        outcome = v.ABORTED_OUTCOME
        extra = {"abortedBy": fact.aborted_by, "abortReason": fact.cancel_reason}
    elif fact.status == "canceled":
        outcome = v.CANCELED_OUTCOME
    else:
        outcome = v.FAILED_OUTCOME
    return {
        "type": v.TASK_OUTCOME,
        "taskId": task.id,
        "pass": open_run.pass_no,
        "jobId": fact.job_id,
        "jobStatus": fact.status,
        "outcome": outcome,
        "summary": result.get("summary"),
        "exitCode": result.get("exitCode"),
        "stdoutTail": result.get("stdoutTail"),
        "stderrTail": result.get("stderrTail"),
        "completion": result.get("completion"),
        "error": fact.last_error if fact.status != "completed" else None,
        **extra,
    }


def _budget(run: _Pass) -> bool:
    s, now = run.state, run.inp.now_ms
    limit_ms = s.policy.max_objective_minutes * 60_000
    if now - s.active_since <= limit_ms:
        return False
    reason = f"objective exceeded maxObjectiveMinutes ({s.policy.max_objective_minutes} min)"
    _fail(run, reason)
    return True


def _fail(run: _Pass, reason: str) -> None:
    for ref in run.state.jobs:
        fact = run.inp.facts.get(ref.job_id)
        if fact is not None and fact.is_active and not fact.abort_requested:
            run.effects.append(Abort(job_id=ref.job_id, reason=f"objective failed: {reason}"))
    run.emit({"type": v.FAILED, "reason": reason})


def _blocked_task(run: _Pass) -> bool:
    task = next((t for t in run.state.tasks if t.status == "blocked"), None)
    if task is None:
        return False
    run.emit(
        {
            "type": v.OBJECTIVE_BLOCKED,
            "kind": "task",
            "taskId": task.id,
            "reason": task.blocked_reason or f"task '{task.id}' is blocked",
        }
    )
    return True


def _plan(run: _Pass) -> bool:
    if not needs_plan(run.state) or run.inp.plan is None:
        return False
    plan = run.inp.plan
    if plan.error is not None or not plan.tasks:
        run.emit(
            {
                "type": v.OBJECTIVE_BLOCKED,
                "kind": "plan",
                "reason": plan.error or "plan rejected: no tasks",
            }
        )
    else:
        run.emit(
            {
                "type": v.OBJECTIVE_PLANNED,
                "source": plan.source,
                "tasks": [to_wire(t) for t in plan.tasks],
            }
        )
    return True


def _slot(run: _Pass) -> bool:
    s = run.state
    if not needs_slot(s) or not s.tasks:
        return False
    if run.inp.slot_free:
        run.emit({"type": v.SLOT_ACQUIRED})
        return True
    if s.status != "waiting_for_slot":
        run.emit({"type": v.SLOT_WAITING})
        return True
    return False


def _working(s: ObjectiveState) -> bool:
    return s.status in ("executing", "collecting_evidence")


def _depends(s: ObjectiveState) -> dict[str, tuple[str, ...]]:
    return {t.id: t.depends_on for t in s.tasks}


def _mark_ready(run: _Pass) -> bool:
    s = run.state
    if not _working(s):
        return False
    ready = dag.ready_set(_depends(s), {t.id: t.status for t in s.tasks}, v.DONE_TASK_STATUSES)
    if not ready:
        return False
    run.emit({"type": v.TASKS_READY, "taskIds": ready})
    return True


def _dispatch(run: _Pass) -> bool:
    s = run.state
    if not _working(s):
        return False
    by_id = {t.id: t for t in s.tasks}
    ready = [by_id[i] for i in dag.topological_order(_depends(s)) if by_id[i].status == "ready"]
    if not ready:
        return False
    total_runs = sum(len(t.runs) for t in s.tasks)
    if total_runs >= s.policy.max_task_runs:
        _fail(run, f"objective reached maxTaskRuns ({s.policy.max_task_runs})")
        return True
    in_flight = sum(1 for t in s.tasks if t.in_flight)
    capacity = min(
        s.policy.max_active_tasks - in_flight,
        s.policy.max_dispatches_per_react - run.dispatched,
        s.policy.max_task_runs - total_runs,
    )
    if capacity <= 0:
        return False
    for task in ready[:capacity]:
        pass_no = len(task.runs) + 1
        job_id = v.task_job_id(s.objective_id, task.id, pass_no)
        monitor = v.monitor_job_id(s.objective_id, task.id, pass_no)
        run.emit(
            {
                "type": v.TASK_DISPATCHED,
                "taskId": task.id,
                "pass": pass_no,
                "jobId": job_id,
                "monitorJobId": monitor,
                "phase": v.PHASE_EXECUTE,
            }
        )
        open_run = run.state.task(task.id).open_run  # type: ignore[union-attr]
        assert open_run is not None
        run.effects += _task_enqueues(run.state, task, open_run)
        run.dispatched += 1
    return True


def _finish(run: _Pass) -> bool:
    s = run.state
    if not s.tasks or not all(t.done for t in s.tasks):
        return False
    if s.mode == "investigation":
        return _finish_investigation(run)
    integration = s.integration
    if s.status == "executing" or (s.status == "integrating" and integration.status == "none"):
        round_no = integration.round + 1
        if not s.checks:
            run.emit(
                {"type": v.INTEGRATION_VALIDATED, "jobId": None, "skipped": True, "results": []}
            )
            return True
        job_id = v.validate_job_id(s.objective_id, round_no)
        run.emit({"type": v.INTEGRATION_REQUESTED, "jobId": job_id, "round": round_no})
        run.effects.append(_round_job(run.state, v.KIND_VALIDATE, round_no, job_id))
        return True
    if (
        s.status == "integrating"
        and integration.status == "validated"
        and (s.policy.auto_promote or s.promote_requested)
    ):
        round_no = integration.publish_round + 1
        job_id = v.publish_job_id(s.objective_id, round_no)
        run.emit({"type": v.PUBLISH_REQUESTED, "jobId": job_id, "round": round_no})
        run.effects.append(_round_job(run.state, v.KIND_PUBLISH, round_no, job_id))
        return True
    if s.status == "promoting" and integration.status == "promoted":
        run.emit({"type": v.COMPLETED, "summary": synthesis(s)})
        return True
    return False


def _finish_investigation(run: _Pass) -> bool:
    s = run.state
    if s.status == "collecting_evidence":
        run.emit({"type": v.EVIDENCE_READY})
    elif s.status == "evidence_ready":
        run.emit({"type": v.SYNTHESIZED, "summary": synthesis(s)})
    elif s.status == "synthesizing":
        run.emit({"type": v.COMPLETED, "summary": s.result_summary or synthesis(s)})
    else:
        return False
    return True


def synthesis(s: ObjectiveState) -> str:
    """A plain summary of what each task found or did (its last run's summary)."""
    lines = [f"{s.title}: {len(s.tasks)} task(s)"]
    for task in s.tasks:
        last = task.runs[-1] if task.runs else None
        said = (last.summary or "").strip() if last else ""
        if not said and last is not None:
            said = (last.stdout_tail or "").strip()[-300:]
        lines.append(f"- {task.id} ({task.status}): {task.title}" + (f" — {said}" if said else ""))
    return "\n".join(lines)


# ---- job requests -----------------------------------------------------------------------


def _base(s: ObjectiveState, kind: str) -> dict[str, Any]:
    return {"kind": kind, "objectiveId": s.objective_id, "authContext": dict(s.auth_context)}


def _task_enqueues(s: ObjectiveState, task: Task, open_run: TaskRun) -> list[Enqueue]:
    payload = {
        **_base(s, v.KIND_TASK_RUN),
        "taskId": task.id,
        "pass": open_run.pass_no,
        "title": task.title,
    }
    for key, value in (
        ("command", task.command),
        ("prompt", task.prompt),
        ("timeoutMs", task.timeout_ms),
        ("executor", task.executor),
    ):
        if value is not None:
            payload[key] = value
    out = [Enqueue(agent_id=v.CODEX_AGENT, job_id=open_run.job_id, payload=payload)]
    if open_run.monitor_job_id:
        out.append(
            Enqueue(
                agent_id=v.MONITOR_AGENT,
                job_id=open_run.monitor_job_id,
                payload={
                    **_base(s, v.KIND_MONITOR),
                    "taskId": task.id,
                    "pass": open_run.pass_no,
                    "taskJobId": open_run.job_id,
                },
            )
        )
    return out


def _round_job(s: ObjectiveState, kind: str, round_no: int, job_id: str) -> Enqueue:
    """The validate, publish or audit job of round `round_no` (an audit runs on control)."""
    agent = v.CONTROL_AGENT if kind == v.KIND_AUDIT else v.CODEX_AGENT
    return Enqueue(agent_id=agent, job_id=job_id, payload={**_base(s, kind), "round": round_no})
