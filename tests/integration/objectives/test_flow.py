"""O-5 .. O-8, O-11, O-13 end to end in one process: jobs run by the stand-in worker."""

from __future__ import annotations

import pytest

from jobs import queue
from objectives.core import vocabulary as v
from receipts import store
from tests.integration.objectives.conftest import (
    configure,
    create,
    diamond,
    dispatch,
    drain,
    objective,
    queued,
    work,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_diamond_completes_in_dependency_order_and_is_audited(factory):
    log = factory / "order.log"
    tasks = [dict(t, command=f"echo {t['id']} >> {log}") for t in diamond()]
    oid = create(title="Diamond", tasks=tasks, checks=["test -s " + str(log)])
    drain()
    state = objective(oid)
    assert state.status == "completed", (state.status, state.blocked_reason)
    order = log.read_text().split()
    assert order[0] == "a" and order[-1] == "d" and sorted(order[1:3]) == ["b", "c"]
    assert {t.status for t in state.tasks} == {"integrated"}
    assert state.integration.status == "promoted"
    assert state.audit.status == "recorded" and state.audit.summary["verified"]["ok"]
    assert store.verify(v.objective_stream(oid)).ok
    audit = queue.get(v.audit_job_id(oid, 1))
    assert audit.status == "completed" and audit.result["status"] == "recorded"


def test_a_failing_task_retries_then_blocks_and_note_plus_react_unblocks_it(factory):
    flag = factory / "fixed.flag"
    command = f"test -f {flag} || {{ echo missing {flag.name} >&2; exit 3; }}"
    oid = create(
        title="Flaky",
        tasks=[{"id": "t", "title": "T", "command": command}],
        policy={"maxCandidatePassesPerTask": 2},
    )
    drain()
    state = objective(oid)
    assert state.status == "blocked"
    assert state.blocked_reason == (
        "task 't' failed 2 of 2 candidate passes (last: failed, "
        "exit 3); stderr tail: missing fixed.flag"
    )
    assert [r.job_id for r in state.task("t").runs] == [
        v.task_job_id(oid, "t", 1),
        v.task_job_id(oid, "t", 2),
    ]
    flag.write_text("ok")
    assert dispatch("note", objectiveId=oid, text="created the flag").status == "completed"
    assert objective(oid).status == "blocked"  # a note alone does not unblock
    assert dispatch("react", objectiveId=oid).status == "completed"
    drain()
    state = objective(oid)
    assert state.status == "completed", state.blocked_reason
    assert len(state.task("t").runs) == 3 and state.notes[-1].text == "created the flag"


def test_cancel_stops_queued_work_and_cancels_the_objective(factory):
    oid = create(title="Stop me", tasks=diamond())
    work(queued()[0])  # the first control pass dispatches task a (and its monitor)
    task_job = v.task_job_id(oid, "a", 1)
    assert queue.get(task_job).status == "queued"
    settled = dispatch("cancel", objectiveId=oid)
    assert settled.status == "completed" and settled.result["status"] == "canceled"
    job = queue.get(task_job)
    assert (job.status, job.cancel_reason) == ("canceled", "stopped by the user")
    assert queue.get(v.monitor_job_id(oid, "a", 1)).status == "canceled"
    drain()
    state = objective(oid)
    assert state.status == "canceled" and state.audit.status == "recorded"
    assert [t.status for t in state.tasks] == ["reviewing", "pending", "pending", "pending"]


def test_investigation_takes_no_slot_runs_no_checks_and_never_promotes(factory, monkeypatch):
    configure(monkeypatch, repo_slot_concurrency=1)
    blocker = create(
        title="Holds the only slot",
        tasks=[{"title": "x", "command": "true"}],
        policy={"autoPromote": False},
    )
    drain()
    assert objective(blocker).slot_held and objective(blocker).awaiting_promotion
    oid = create(
        title="Look around",
        mode="investigation",
        checks=["false"],
        tasks=[{"title": "look", "command": "echo found the bug"}],
        policy={"autoPromote": True},
    )
    drain()
    state = objective(oid)
    assert state.status == "completed" and not state.slot_held
    assert state.integration.status == "none" and not state.policy.auto_promote
    assert "found the bug" in state.result_summary
    types = [r.type for r in store.read(v.objective_stream(oid))]
    assert v.SLOT_ACQUIRED not in types and v.INTEGRATION_REQUESTED not in types
    assert v.PUBLISH_REQUESTED not in types


def test_a_full_slot_pool_queues_delivery_objectives_until_one_settles(factory, monkeypatch):
    configure(monkeypatch, repo_slot_concurrency=1)
    first = create(
        title="First", tasks=[{"title": "x", "command": "true"}], policy={"autoPromote": False}
    )
    drain()
    second = create(title="Second", tasks=[{"title": "y", "command": "true"}])
    drain()
    assert objective(second).status == "waiting_for_slot"
    dispatch("promote", objectiveId=first)
    drain()
    assert objective(first).status == "completed"
    assert objective(second).status == "completed"


def test_no_plan_blocks_with_how_to_supply_one_and_react_with_tasks_plans(factory):
    oid = create(title="Vague", prompt="make it better")
    drain()
    state = objective(oid)
    assert state.status == "blocked" and state.blocked_kind == "plan"
    assert "RECEIPT_FACTORY_PLANNER_COMMAND is not set" in state.blocked_reason
    assert "react (objectiveId, tasks)" in state.blocked_reason
    dispatch("react", objectiveId=oid, tasks=[{"title": "do it", "command": "true"}])
    drain()
    assert objective(oid).status == "completed"


def test_an_invalid_plan_blocks_with_the_validation_message(factory):
    oid = create(
        title="Loop",
        tasks=[
            {"id": "a", "title": "A", "command": "true", "dependsOn": ["b"]},
            {"id": "b", "title": "B", "command": "true", "dependsOn": ["a"]},
        ],
    )
    drain()
    state = objective(oid)
    assert (state.status, state.blocked_reason) == (
        "blocked",
        "plan rejected: dependency cycle a -> b -> a",
    )


def test_the_planner_command_reads_the_objective_and_prints_a_plan(factory, monkeypatch):
    script = factory / "planner.py"
    script.write_text(
        "import json, sys\n"
        "objective = json.load(sys.stdin)\n"
        "print(json.dumps({'tasks': [{'id': 'only', 'title': objective['prompt'],"
        " 'command': 'true'}]}))\n"
    )
    configure(monkeypatch, factory_planner_command=f"python3 {script}")
    oid = create(prompt="write the docs")
    drain()
    state = objective(oid)
    assert state.status == "completed" and state.plan_source == "planner_command"
    assert state.tasks[0].title == "write the docs"


def test_a_failing_check_blocks_with_its_output_tail_and_react_revalidates(factory):
    flag = factory / "green"
    oid = create(
        title="Checked",
        tasks=[{"title": "x", "command": "true"}],
        checks=[
            {"name": "suite", "command": f"test -f {flag} || {{ echo 3 tests failed; exit 1; }}"}
        ],
    )
    drain()
    state = objective(oid)
    assert state.status == "blocked" and state.blocked_kind == "validation"
    assert state.blocked_reason == "check suite failed (exit 1): 3 tests failed"
    flag.write_text("")
    dispatch("react", objectiveId=oid)
    drain()
    state = objective(oid)
    assert state.status == "completed" and state.integration.round == 2


def test_publish_command_runs_and_a_failure_blocks(factory):
    out = factory / "published"
    oid = create(
        title="Ship", tasks=[{"title": "x", "command": "true"}], publish=f"echo shipped > {out}"
    )
    drain()
    assert objective(oid).status == "completed" and out.read_text().strip() == "shipped"
    assert objective(oid).integration.publish_output["exitCode"] == 0
    bad = create(
        title="Ship badly",
        tasks=[{"title": "x", "command": "true"}],
        publish="echo no credentials >&2; exit 2",
    )
    drain()
    state = objective(bad)
    assert state.status == "blocked" and state.blocked_kind == "publish"
    assert "no credentials" in state.blocked_reason
