"""O-11 dispatch actions and O-12 factory runs."""

from __future__ import annotations

import pytest

from jobs import queue
from objectives import selectors
from objectives.core import vocabulary as v
from objectives.handlers.dispatch import objective_id_for
from receipts import store
from tests.integration.objectives.conftest import (
    AUTH,
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


def test_create_completes_with_the_objective_id_and_is_idempotent(factory):
    payload = {
        "kind": v.KIND_DISPATCH,
        "action": "create",
        "authContext": dict(AUTH),
        "title": "Once",
        "tasks": diamond(),
        "severity": 2,
    }
    job = queue.enqueue(v.FACTORY_AGENT, payload).job
    settled = work(job.job_id)
    oid = settled.result["objectiveId"]
    assert settled.result == {
        "action": "create",
        "objectiveId": oid,
        "created": True,
        "status": "planning",
    }
    assert oid == objective_id_for(job.job_id)
    state = objective(oid)
    assert (state.title, state.severity, state.created_by) == ("Once", 2, "user:u-1")
    # a retried attempt of the same job finds the objective instead of making another
    from objectives import services

    again, created = services.create(oid, {"title": "Once"}, auth_context=AUTH, by="x")
    assert not created and again.receipt_count == state.receipt_count


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"action": "launch"},
            "unknown factory.dispatch action 'launch'; expected one of create, "
            "react, note, promote, cancel, cleanup, archive, abort-job, steer, "
            "follow-up",
        ),
        (
            {"action": "create", "mode": "fast", "title": "x"},
            "mode must be one of delivery, investigation, got 'fast'",
        ),
        (
            {"action": "create", "title": "x", "policy": {"maxActiveTasks": 0}},
            "policy.maxActiveTasks must be an integer in 1..100, got 0",
        ),
        ({"action": "note", "text": "hi"}, "this action needs an objectiveId"),
        (
            {"action": "note", "objectiveId": "obj-missing", "text": "hi"},
            "objective obj-missing not found",
        ),
    ],
)
def test_refusals_fail_the_job_without_retry(factory, fields, message):
    settled = dispatch(**fields)
    assert (settled.status, settled.last_error) == ("failed", message)
    assert settled.attempt == 1


def test_another_organization_cannot_touch_an_objective(factory):
    oid = create(title="Private", tasks=diamond())
    for action, extra in (("note", {"text": "x"}), ("cancel", {}), ("archive", {}), ("react", {})):
        settled = dispatch(action, org="org-2", objectiveId=oid, **extra)
        assert (settled.status, settled.last_error) == ("failed", f"objective {oid} not found")
    assert objective(oid).status == "planning" and not objective(oid).archived


def test_steer_and_follow_up_reach_the_running_task_jobs(factory):
    oid = create(title="Steerable", tasks=diamond())
    work(queued()[0])  # dispatches task a
    task_job = v.task_job_id(oid, "a", 1)
    queue.lease(task_job, worker_id="w:1")
    settled = dispatch("steer", objectiveId=oid, message="use the other branch")
    assert settled.result["jobIds"] == [task_job]
    dispatch("follow-up", objectiveId=oid, payload={"next": "docs"})
    commands = [(c.command, c.payload) for c in queue.get(task_job).commands]
    assert commands == [
        ("steer", {"message": "use the other branch"}),
        ("follow_up", {"next": "docs"}),
    ]
    types = [r.type for r in store.read(v.objective_stream(oid))]
    assert types.count(v.JOB_COMMAND_SENT) == 2


def test_steer_without_running_work_reaches_the_objective_as_a_react(factory):
    oid = create(title="Idle", tasks=diamond())
    settled = dispatch("steer", objectiveId=oid, message="also update the changelog")
    assert settled.result["reacted"] is True
    assert objective(oid).notes[-1].text == "also update the changelog"


def test_abort_job_needs_a_job_of_the_objective(factory):
    oid = create(title="Abortable", tasks=diamond())
    work(queued()[0])
    other = create(title="Other", tasks=diamond())
    settled = dispatch("abort-job", objectiveId=oid, jobId=v.control_job_id(other, 1))
    assert settled.last_error == (
        f"job {v.control_job_id(other, 1)} does not belong to objective {oid}"
    )
    task_job = v.task_job_id(oid, "a", 1)
    assert dispatch("abort-job", objectiveId=oid, jobId=task_job).status == "completed"
    assert queue.get(task_job).status == "canceled"


def test_cleanup_removes_the_workspace_of_a_settled_objective_only(factory):
    oid = create(title="Messy", tasks=[{"title": "x", "command": "echo hi > out.txt"}])
    refused = dispatch("cleanup", objectiveId=oid)
    assert "cancel it before cleaning up" in refused.last_error
    drain()
    workspace = factory / "workspaces" / oid
    assert (workspace / "out.txt").exists()
    assert dispatch("cleanup", objectiveId=oid).status == "completed"
    assert not workspace.exists() and objective(oid).workspace_cleaned


def test_factory_run_creates_an_objective_and_records_the_run(factory):
    payload = {
        "kind": v.KIND_RUN,
        "authContext": dict(AUTH),
        "runId": "chat-42",
        "prompt": "Tidy the README",
        "tasks": [{"title": "t", "command": "true"}],
    }
    settled = work(queue.enqueue(v.FACTORY_AGENT, payload).job.job_id)
    oid = settled.result["objectiveId"]
    assert settled.result["runId"] == "chat-42" and settled.result["created"] is True
    assert objective(oid).title == "Tidy the README"
    run = store.read(v.run_stream("chat-42"))
    assert [r.type for r in run] == ["run.started", "run.completed"]
    assert run[1].body["objectiveId"] == oid
    assert store.fold(v.run_stream("chat-42"))["status"] == "completed"


def test_factory_run_with_an_objective_notes_and_reacts(factory):
    oid = create(title="Chatty", tasks=diamond())
    payload = {
        "kind": v.KIND_RUN,
        "authContext": dict(AUTH),
        "objectiveId": oid,
        "message": "how is it going?",
    }
    settled = work(queue.enqueue(v.FACTORY_AGENT, payload).job.job_id)
    assert settled.result["objectiveId"] == oid and settled.result["created"] is False
    state = objective(oid)
    assert state.notes[-1].text == "how is it going?" and state.reacts == 1


def replacement_run(job, ctx):
    from jobs.handler_contract import JobResult

    return JobResult.success({"replaced": job.job_id})


def test_the_run_handler_is_pluggable(factory, monkeypatch):
    configure(monkeypatch, factory_run_handler=f"{__name__}.replacement_run")
    payload = {"kind": v.KIND_RUN, "authContext": dict(AUTH), "prompt": "x"}
    job = queue.enqueue(v.FACTORY_AGENT, payload).job
    assert work(job.job_id).result == {"replaced": job.job_id}
    assert selectors.get(objective_id_for(job.job_id)) is None


def test_an_agent_refuses_kinds_it_does_not_serve(factory):
    job = queue.enqueue(v.MONITOR_AGENT, {"kind": v.KIND_TASK_RUN, "authContext": dict(AUTH)}).job
    settled = work(job.job_id)
    assert (settled.status, settled.last_error) == (
        "failed",
        "agent 'factory-monitor' does not handle kind 'factory.task.run'",
    )


def test_the_four_built_in_agent_ids_run_factorys_handlers(factory):
    from jobs import handlers

    handlers.load()
    names = {
        agent: handlers.handler_for(agent).__name__
        for agent in ("factory", "factory-control", "factory-monitor", "codex")
    }
    assert names == {
        "factory": "factory_factory",
        "factory-control": "factory_factory_control",
        "factory-monitor": "factory_factory_monitor",
        "codex": "factory_codex",
    }
