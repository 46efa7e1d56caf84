"""O-1 .. O-3, O-8, O-13: the objective fold."""

from __future__ import annotations

import pytest

from objectives.core import vocabulary as v
from objectives.core.reducer import InvariantError, apply, reduce
from objectives.core.state import objective_from_wire, objective_to_wire
from receipts.core.chain import fold
from tests.unit.objectives.helpers import Chain, created, diamond


def test_only_creation_may_start_a_stream():
    with pytest.raises(InvariantError) as error:
        apply(None, {"type": v.NOTE_ADDED, "text": "hi"}, 1, stream="factory/objectives/o-9")
    assert str(error.value) == "Invariant: no objective o-9 for objective.note.added"


def test_created_objective_is_planning_with_its_policy_and_org():
    state = Chain().append(created(tasks=diamond(), policy={"maxActiveTasks": 2}))
    assert (state.status, state.phase, state.organization_id, state.mode) == (
        "planning",
        "plan",
        "org-1",
        "delivery",
    )
    assert state.policy.max_active_tasks == 2
    assert state.receipt_count == 1 and state.head


def test_delivery_plan_waits_for_a_slot_and_investigation_does_not():
    chain = Chain()
    chain.append(created(tasks=diamond()))
    planned = chain.append(
        {"type": v.OBJECTIVE_PLANNED, "tasks": [{"id": "a", "title": "A", "command": "true"}]}
    )
    assert (planned.status, planned.phase) == ("waiting_for_slot", "slot")
    assert chain.append({"type": v.SLOT_ACQUIRED}).status == "executing"
    other = Chain("obj-2")
    other.append(created("obj-2", mode="investigation", tasks=diamond()))
    planned = other.append(
        {"type": v.OBJECTIVE_PLANNED, "tasks": [{"id": "a", "title": "A", "command": "true"}]}
    )
    assert planned.status == "collecting_evidence" and not planned.slot_held


def _running_task(chain: Chain, passes: int = 4):
    chain.append(
        created(
            tasks=[{"id": "a", "title": "A", "command": "false"}],
            policy={"maxCandidatePassesPerTask": passes},
        )
    )
    chain.append(
        {"type": v.OBJECTIVE_PLANNED, "tasks": [{"id": "a", "title": "A", "command": "false"}]},
        {"type": v.SLOT_ACQUIRED},
        {"type": v.TASKS_READY, "taskIds": ["a"]},
    )


def _attempt(chain: Chain, pass_no: int, outcome: str, **extra):
    job = v.task_job_id("obj-1", "a", pass_no)
    chain.append({"type": v.TASK_DISPATCHED, "taskId": "a", "pass": pass_no, "jobId": job})
    return chain.append(
        {
            "type": v.TASK_OUTCOME,
            "taskId": "a",
            "jobId": job,
            "pass": pass_no,
            "outcome": outcome,
            **extra,
        }
    )


def test_failed_passes_retry_until_the_budget_then_block_with_the_stderr_tail():
    chain = Chain()
    _running_task(chain, passes=2)
    state = _attempt(chain, 1, "failed", exitCode=1, stderrTail="boom 1")
    assert state.task("a").status == "ready"
    state = _attempt(chain, 2, "failed", exitCode=1, stderrTail="boom 2\n")
    task = state.task("a")
    assert task.status == "blocked"
    assert task.blocked_reason == (
        "task 'a' failed 2 of 2 candidate passes (last: failed, exit 1); stderr tail: boom 2"
    )


def test_react_unblocks_with_a_fresh_pass_budget():
    chain = Chain()
    _running_task(chain, passes=1)
    _attempt(chain, 1, "failed", stderrTail="nope")
    state = chain.append({"type": v.OBJECTIVE_BLOCKED, "reason": "r", "kind": "task"})
    assert state.status == "blocked"
    state = chain.append({"type": v.REACT_REQUESTED, "by": "op", "message": "fixed"}, ts=5_000)
    assert (state.status, state.task("a").status, state.task("a").pass_base) == (
        "executing",
        "ready",
        1,
    )
    assert state.active_since == 5_000 and state.notes[-1].text == "fixed"
    assert _attempt(chain, 2, "approved").task("a").status == "approved"


def test_an_aborted_pass_blocks_its_task_at_once_and_a_canceled_one_retries():
    """O-3, O-7: `aborted` (an operator's abort) stops the task whatever its pass budget;
    `canceled` (control's own abort, and every such receipt written before) retries."""
    chain = Chain()
    _running_task(chain, passes=4)
    assert _attempt(chain, 1, "canceled", error="stalled").task("a").status == "ready"
    task = _attempt(chain, 2, "aborted", abortedBy="op", abortReason="wrong input").task("a")
    assert (task.status, task.blocked_reason) == ("blocked", "aborted by op: wrong input")
    assert task.runs[-1].outcome == "aborted"


def test_job_settled_marks_the_task_reviewing_only_for_its_open_run():
    chain = Chain()
    _running_task(chain)
    job = v.task_job_id("obj-1", "a", 1)
    chain.append({"type": v.TASK_DISPATCHED, "taskId": "a", "pass": 1, "jobId": job})
    state = chain.append({"type": v.TASK_JOB_SETTLED, "taskId": "a", "jobId": "other"})
    assert state.task("a").status == "running"
    state = chain.append({"type": v.TASK_JOB_SETTLED, "taskId": "a", "jobId": job})
    assert state.task("a").status == "reviewing"


def test_validation_failure_blocks_and_react_retries_it():
    chain = Chain()
    chain.append(created(tasks=diamond(), checks=["make test"]))
    chain.append({"type": v.INTEGRATION_REQUESTED, "jobId": "validate-1", "round": 1})
    state = chain.append(
        {
            "type": v.INTEGRATION_VALIDATION_FAILED,
            "jobId": "validate-1",
            "check": "check-1",
            "reason": "check check-1 failed",
        }
    )
    assert (state.status, state.blocked_kind, state.integration.status) == (
        "blocked",
        "validation",
        "failed",
    )
    state = chain.append({"type": v.REACT_REQUESTED})
    assert (state.status, state.integration.status) == ("planning", "none")


def test_terminal_objectives_ignore_status_changes_but_keep_the_outbox():
    chain = Chain()
    chain.append(created(tasks=diamond()))
    chain.append({"type": v.CANCELED, "reason": "stopped by the user"})
    state = chain.append(
        {"type": v.OBJECTIVE_BLOCKED, "reason": "late"},
        {"type": v.CONTROL_REQUESTED, "requestId": 1, "jobId": "c1", "reason": "x"},
    )
    assert state.status == "canceled" and state.blocked_reason is None
    assert [r.id for r in state.pending_requests] == [1]


def test_control_outbox_requested_enqueued_consumed():
    chain = Chain()
    chain.append(
        created(), {"type": v.CONTROL_REQUESTED, "requestId": 1, "jobId": "c1", "reason": "created"}
    )
    state = chain.state
    assert [r.id for r in state.unenqueued_requests] == [1]
    state = chain.append({"type": v.CONTROL_ENQUEUED, "requestId": 1, "jobId": "c1"})
    assert not state.unenqueued_requests and state.pending_requests
    state = chain.append({"type": v.CONTROL_PASS, "jobId": "c1", "requestIds": [1]})
    assert not state.pending_requests and state.control_passes == 1


def test_the_wire_form_round_trips_and_equals_a_refold():
    chain = Chain()
    _running_task(chain, passes=3)
    _attempt(chain, 1, "failed", stderrTail="x", completion={"changed": ["f"]})
    chain.append({"type": v.NOTE_ADDED, "text": "hello", "by": "op"})
    state = chain.state
    assert objective_from_wire(objective_to_wire(state)) == state
    assert fold(chain.receipts, reduce) == state
