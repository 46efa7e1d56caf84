"""O-7: the decision of one control pass, driven with simulated job facts."""

from __future__ import annotations

from objectives.core import vocabulary as v
from objectives.core.control import Abort, Enqueue, PlanOutcome
from tests.support import present
from tests.unit.objectives.helpers import Chain, created, diamond, fact, run_pass

T = v.task_job_id


def types(plan) -> list[str]:
    return [e["type"] for e in plan.events]


def enqueued(plan) -> list[str]:
    return [e.job_id for e in plan.effects if isinstance(e, Enqueue)]


def done(job_id: str, outcome: str = "approved", **result) -> dict:
    """The task job settled; its monitor exists too."""
    monitor = job_id.replace("task-", "mon-", 1)
    return {job_id: fact(job_id, result={"outcome": outcome, **result}), monitor: fact(monitor)}


def test_first_pass_plans_takes_a_slot_and_dispatches_the_roots():
    chain = Chain()
    chain.append(
        created(tasks=diamond()),
        {"type": v.CONTROL_REQUESTED, "requestId": 1, "jobId": "ctl-1", "reason": "created"},
    )
    plan = run_pass(chain, pass_job_id="ctl-1")
    assert types(plan) == [
        v.CONTROL_PASS,
        v.OBJECTIVE_PLANNED,
        v.SLOT_ACQUIRED,
        v.TASKS_READY,
        v.TASK_DISPATCHED,
    ]
    assert enqueued(plan) == [T("obj-1", "a", 1), v.monitor_job_id("obj-1", "a", 1)]
    task_run = plan.effects[0]
    assert isinstance(task_run, Enqueue)
    assert task_run.agent_id == "codex" and task_run.payload["kind"] == "factory.task.run"
    assert task_run.payload["command"] == "true" and task_run.payload["authContext"]["userId"]
    assert chain.state.status == "executing" and not chain.state.pending_requests


def test_the_diamond_runs_in_dependency_order_within_max_active_tasks():
    chain = Chain()
    chain.append(created(tasks=diamond(), policy={"maxActiveTasks": 1}))
    run_pass(chain)
    plan = run_pass(chain, done(T("obj-1", "a", 1)))
    assert types(plan) == [v.TASK_OUTCOME, v.TASKS_READY, v.TASK_DISPATCHED]
    assert enqueued(plan)[0] == T("obj-1", "b", 1)  # c waits: one task at a time
    plan = run_pass(chain, done(T("obj-1", "b", 1)))
    assert enqueued(plan)[0] == T("obj-1", "c", 1)
    plan = run_pass(chain, done(T("obj-1", "c", 1)))
    assert enqueued(plan)[0] == T("obj-1", "d", 1)
    plan = run_pass(chain, done(T("obj-1", "d", 1)))
    # no checks: validated at once; autoPromote: publish
    assert types(plan) == [v.TASK_OUTCOME, v.INTEGRATION_VALIDATED, v.PUBLISH_REQUESTED]
    assert enqueued(plan) == [v.publish_job_id("obj-1", 1)]
    assert {t.status for t in chain.state.tasks} == {"integrated"}
    chain.append({"type": v.INTEGRATION_PROMOTED, "jobId": v.publish_job_id("obj-1", 1)})
    plan = run_pass(chain, {v.publish_job_id("obj-1", 1): fact("x")})
    assert types(plan) == [v.COMPLETED, v.AUDIT_REQUESTED]
    assert enqueued(plan) == [v.audit_job_id("obj-1", 1)]
    assert chain.state.status == "completed" and not chain.state.slot_held
    assert types(run_pass(chain)) == []  # exactly one audit


def test_parallel_branches_dispatch_together_up_to_the_limit():
    chain = Chain()
    chain.append(created(tasks=diamond(), policy={"maxActiveTasks": 5}))
    run_pass(chain)
    plan = run_pass(chain, done(T("obj-1", "a", 1)))
    assert [e["taskId"] for e in plan.events if e["type"] == v.TASK_DISPATCHED] == ["b", "c"]


def test_max_dispatches_per_react_caps_one_pass():
    tasks = [{"id": f"t{i}", "title": "x", "command": "true"} for i in range(6)]
    chain = Chain()
    chain.append(created(tasks=tasks, policy={"maxActiveTasks": 10, "maxDispatchesPerReact": 4}))
    plan = run_pass(chain)
    assert len([e for e in plan.events if e["type"] == v.TASK_DISPATCHED]) == 4
    plan = run_pass(chain)
    assert len([e for e in plan.events if e["type"] == v.TASK_DISPATCHED]) == 2


def test_checks_run_before_promotion_and_a_failure_blocks():
    chain = Chain()
    chain.append(created(tasks=diamond()[:1], checks=["make test"]))
    run_pass(chain)
    plan = run_pass(chain, done(T("obj-1", "a", 1)))
    validate = v.validate_job_id("obj-1", 1)
    assert types(plan)[-1] == v.INTEGRATION_REQUESTED and enqueued(plan) == [validate]
    assert chain.state.phase == v.PHASE_VALIDATE
    # the validate job died without a verdict: recorded as a failure, the objective blocks
    plan = run_pass(
        chain,
        {
            validate: fact(validate, "failed", last_error="lease expired"),
            **done(T("obj-1", "a", 1)),
        },
    )
    assert types(plan) == [v.INTEGRATION_VALIDATION_FAILED]
    assert chain.state.status == "blocked" and "lease expired" in present(
        chain.state.blocked_reason
    )


def test_without_auto_promote_the_objective_waits_for_promote():
    chain = Chain()
    chain.append(created(tasks=diamond()[:1], policy={"autoPromote": False}))
    run_pass(chain)
    run_pass(chain, done(T("obj-1", "a", 1)))
    assert chain.state.awaiting_promotion
    assert types(run_pass(chain)) == []
    chain.append({"type": v.PROMOTE_REQUESTED, "by": "op"})
    assert types(run_pass(chain)) == [v.PUBLISH_REQUESTED]


def test_investigation_takes_no_slot_runs_no_checks_and_never_promotes():
    chain = Chain()
    chain.append(
        created(
            mode="investigation",
            tasks=diamond()[:1],
            checks=["make test"],
            policy={"autoPromote": True},
        )
    )
    plan = run_pass(chain, slot_free=False)
    assert v.SLOT_ACQUIRED not in types(plan) and chain.state.status == "collecting_evidence"
    plan = run_pass(chain, done(T("obj-1", "a", 1), summary="found it"), slot_free=False)
    assert types(plan) == [
        v.TASK_OUTCOME,
        v.EVIDENCE_READY,
        v.SYNTHESIZED,
        v.COMPLETED,
        v.AUDIT_REQUESTED,
    ]
    assert "found it" in present(chain.state.result_summary)
    assert chain.state.integration.status == "none"


def test_no_free_slot_waits_once_and_acquires_later():
    chain = Chain()
    chain.append(created(tasks=diamond()))
    assert types(run_pass(chain, slot_free=False)) == [v.OBJECTIVE_PLANNED]
    assert chain.state.status == "waiting_for_slot"
    assert types(run_pass(chain, slot_free=False)) == []
    assert types(run_pass(chain, slot_free=True))[:2] == [v.SLOT_ACQUIRED, v.TASKS_READY]


def test_a_plan_error_blocks_with_the_message():
    chain = Chain()
    chain.append(created())
    plan = run_pass(chain, plan=PlanOutcome(error="plan rejected: no tasks; supply tasks"))
    assert types(plan) == [v.OBJECTIVE_BLOCKED]
    assert chain.state.blocked_reason == "plan rejected: no tasks; supply tasks"


def test_failing_task_blocks_the_objective_after_its_passes():
    chain = Chain()
    chain.append(created(tasks=diamond()[:1], policy={"maxCandidatePassesPerTask": 2}))
    run_pass(chain)
    failed = {"exitCode": 3, "stderrTail": "missing file"}
    plan = run_pass(chain, done(T("obj-1", "a", 1), "failed", **failed))
    assert enqueued(plan)[0] == T("obj-1", "a", 2)
    plan = run_pass(chain, done(T("obj-1", "a", 2), "failed", **failed))
    assert types(plan) == [v.TASK_OUTCOME, v.OBJECTIVE_BLOCKED]
    assert "stderr tail: missing file" in present(chain.state.blocked_reason)


def test_a_recorded_job_that_does_not_exist_is_enqueued_again():
    chain = Chain()
    chain.append(created(tasks=diamond()))
    run_pass(chain)
    plan = run_pass(chain, {})  # neither the task job nor its monitor exists
    assert types(plan) == []
    assert enqueued(plan) == [T("obj-1", "a", 1), v.monitor_job_id("obj-1", "a", 1)]


def test_reconcile_aborts_a_stalled_task_job():
    """O-7, L-4: a task job silent past two missed beats (430 s at the codex lease)."""
    chain = Chain()
    chain.append(created(tasks=diamond()))
    run_pass(chain)
    job = T("obj-1", "a", 1)
    facts = {
        job: fact(job, "running", updated_at=0, lease_ms=900_000),
        v.monitor_job_id("obj-1", "a", 1): fact("m", "running", updated_at=499_000),
    }
    plan = run_pass(chain, facts, now=500_000, reconcile=True)
    aborts = [e for e in plan.effects if isinstance(e, Abort)]
    assert [a.job_id for a in aborts] == [job]
    assert aborts[0].reason.startswith("stalled: no heartbeat or progress for 500 s")
    assert not run_pass(chain, facts, now=500_000).effects  # only on a reconcile


def test_reconcile_never_aborts_healthy_jobs_between_beats_at_default_cadences():
    """O-7, L-4, K-7: with the production cadences (a beat every 100 s on a 300 s lease,
    every 200 s on a codex lease), a monitor between beats, a task whose executor reports
    no progress and a long audit of an earlier phase are all healthy."""
    chain = Chain()
    chain.append(created(tasks=diamond()[:1], checks=["make test"]))
    run_pass(chain)
    task, monitor = T("obj-1", "a", 1), v.monitor_job_id("obj-1", "a", 1)
    now = 1_000_000
    facts = {
        task: fact(task, "running", updated_at=now - 399_000, lease_ms=900_000),
        monitor: fact(monitor, "running", updated_at=now - 150_000),
    }
    assert not [
        e for e in run_pass(chain, facts, now=now, reconcile=True).effects if isinstance(e, Abort)
    ]
    # the task settled and validation began: the monitor is of an earlier phase now
    plan = run_pass(chain, {**done(task), monitor: facts[monitor]}, now=now, reconcile=True)
    assert chain.state.phase == v.PHASE_VALIDATE
    assert not [e for e in plan.effects if isinstance(e, Abort)]
    plan = run_pass(
        chain, {**done(task), monitor: facts[monitor]}, now=now + 81_000, reconcile=True
    )
    assert [e.job_id for e in plan.effects if isinstance(e, Abort)] == [monitor]


def test_the_time_budget_fails_the_objective_and_aborts_its_jobs():
    chain = Chain()
    chain.append(created(tasks=diamond(), policy={"maxObjectiveMinutes": 1}))
    run_pass(chain)
    job = T("obj-1", "a", 1)
    plan = run_pass(chain, {job: fact(job, "running", updated_at=60_000)}, now=70_000)
    assert types(plan) == [v.FAILED, v.AUDIT_REQUESTED]
    assert [e.job_id for e in plan.effects if isinstance(e, Abort)] == [job]
    assert chain.state.terminal_reason == "objective exceeded maxObjectiveMinutes (1 min)"


def test_max_task_runs_fails_the_objective():
    chain = Chain()
    chain.append(created(tasks=diamond()[:1], policy={"maxTaskRuns": 1}))
    run_pass(chain)
    failed = {T("obj-1", "a", 1): fact(T("obj-1", "a", 1), result={"outcome": "failed"})}
    plan = run_pass(chain, failed)
    assert types(plan) == [v.TASK_OUTCOME, v.FAILED, v.AUDIT_REQUESTED]
    assert chain.state.terminal_reason == "objective reached maxTaskRuns (1)"


def test_a_superseded_audit_is_requested_again_a_bounded_number_of_times():
    chain = Chain()
    chain.append(created(), {"type": v.CANCELED, "reason": "stopped by the user"})
    assert types(run_pass(chain)) == [v.AUDIT_REQUESTED]
    for round_no in (1, 2):
        chain.append({"type": v.AUDIT_SUPERSEDED, "jobId": v.audit_job_id("obj-1", round_no)})
        assert enqueued(run_pass(chain)) == [v.audit_job_id("obj-1", round_no + 1)]
    chain.append({"type": v.AUDIT_SUPERSEDED, "jobId": v.audit_job_id("obj-1", 3)})
    assert types(run_pass(chain)) == []


def test_cancel_in_progress_stops_the_pass():
    chain = Chain()
    chain.append(created(tasks=diamond()), {"type": v.CANCEL_REQUESTED, "by": "op"})
    assert types(run_pass(chain)) == []


def test_an_operator_abort_blocks_the_task_and_nothing_is_redispatched():
    """O-7, J-10: an operator who aborts a task's job means stop: the task and the
    objective block with who and why, and no new pass is dispatched."""
    chain = Chain()
    chain.append(created(tasks=diamond()[:1]))
    run_pass(chain)
    job = T("obj-1", "a", 1)
    aborted = {
        job: fact(
            job,
            "canceled",
            aborted_by="op",
            cancel_reason="wrong branch",
            last_error="wrong branch",
        ),
        v.monitor_job_id("obj-1", "a", 1): fact("m"),
    }
    plan = run_pass(chain, aborted)
    assert types(plan) == [v.TASK_OUTCOME, v.OBJECTIVE_BLOCKED]
    assert plan.events[0]["outcome"] == v.ABORTED_OUTCOME
    assert enqueued(plan) == []
    task = chain.state.task("a")
    assert (task.status, task.blocked_reason) == ("blocked", "aborted by op: wrong branch")
    assert chain.state.status == "blocked"
    assert chain.state.blocked_reason == "aborted by op: wrong branch"
    assert types(run_pass(chain, aborted)) == [] and enqueued(run_pass(chain, aborted)) == []


def test_an_abort_without_a_name_or_reason_still_says_aborted():
    """O-7: the blocked reason names an unknown aborter and the default reason."""
    chain = Chain()
    chain.append(created(tasks=diamond()[:1]))
    run_pass(chain)
    job = T("obj-1", "a", 1)
    run_pass(chain, {job: fact(job, "canceled")})
    assert chain.state.task("a").blocked_reason == "aborted by unknown: abort requested"


def test_a_task_aborted_by_control_itself_is_tried_again():
    """O-7, L-4: control's own abort of a stalled task job is a failed pass, retried."""
    chain = Chain()
    chain.append(created(tasks=diamond()[:1]))
    run_pass(chain)
    job = T("obj-1", "a", 1)
    stalled = fact(
        job,
        "canceled",
        aborted_by=v.CONTROL_AGENT,
        cancel_reason="stalled: no heartbeat or progress for 500 s",
    )
    plan = run_pass(chain, {job: stalled, v.monitor_job_id("obj-1", "a", 1): fact("m")})
    assert plan.events[0]["outcome"] == v.CANCELED_OUTCOME
    assert enqueued(plan)[0] == T("obj-1", "a", 2)


def test_a_react_runs_an_aborted_task_again():
    """O-2, O-11: react is how an operator re-runs a task they aborted."""
    chain = Chain()
    chain.append(created(tasks=diamond()[:1]))
    run_pass(chain)
    job = T("obj-1", "a", 1)
    run_pass(chain, {job: fact(job, "canceled", aborted_by="op", cancel_reason="pause")})
    chain.append({"type": v.REACT_REQUESTED, "by": "op"})
    plan = run_pass(chain, {job: fact(job, "canceled", aborted_by="op")})
    assert enqueued(plan)[0] == T("obj-1", "a", 2)
    assert chain.state.task("a").status == "running"
