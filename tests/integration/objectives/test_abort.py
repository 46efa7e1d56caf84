"""O-7, O-11, J-10: an operator who aborts a task's job stops that task until a react."""

from __future__ import annotations

import pytest

from jobs import queue
from jobs.core.state import Fence
from jobs.models import Job
from objectives.core import vocabulary as v
from objectives.handlers import watchdog
from tests.integration.objectives.conftest import create, dispatch, drain, objective, queued, work
from tests.support import present

pytestmark = pytest.mark.django_db(transaction=True)
ONE_TASK = [{"id": "t", "title": "T", "command": "true"}]


def dispatched(title: str) -> tuple[str, str]:
    """An objective whose first control pass dispatched task t; (objectiveId, task job)."""
    oid = create(title=title, tasks=ONE_TASK)
    work(queued()[0])
    job_id = v.task_job_id(oid, "t", 1)
    assert queue.get(job_id).status == "queued"
    return oid, job_id


def task_jobs(oid: str) -> list[str]:
    return sorted(
        Job.objects.filter(objective_id=oid, kind=v.KIND_TASK_RUN).values_list("id", flat=True)
    )


def test_aborting_a_running_task_job_through_the_api_blocks_the_task(factory, api):
    """J-10, A-5, O-7: the worker honours the abort; control blocks the task, says who and
    why, and dispatches no new pass, not even on a watchdog reconcile (L-4)."""
    oid, job_id = dispatched("Stop me")
    assert queue.lease(job_id, worker_id="w:1", start=True).job.status == "running"
    status, _ = api.post(f"/jobs/{job_id}/abort", {"reason": "wrong branch"})
    assert status == 202
    aborted = queue.get(job_id)
    queue.cancel(job_id, reason=present(aborted.abort_reason), by="w:1", fence=Fence("w:1", 1))
    drain()  # the control pass the settlement requested
    state = objective(oid)
    task = state.task("t")
    assert (task.status, task.blocked_reason) == ("blocked", "aborted by token:ops: wrong branch")
    assert (state.status, state.blocked_reason) == ("blocked", "aborted by token:ops: wrong branch")
    assert task_jobs(oid) == [job_id]
    assert watchdog.scan(now_ms=state.updated_at + 10**9)["reconciled"] == []
    assert task_jobs(oid) == [job_id] and objective(oid).status == "blocked"


def test_aborting_a_queued_task_job_blocks_the_task_until_a_react(factory):
    """J-10, O-7, O-11: a queued job is canceled outright; react runs the task again."""
    oid, job_id = dispatched("Not now")
    queue.abort(job_id, reason="not now", by="op")
    drain()
    state = objective(oid)
    assert state.task("t").blocked_reason == "aborted by op: not now"
    assert state.status == "blocked" and task_jobs(oid) == [job_id]
    assert dispatch("react", objectiveId=oid).status == "completed"
    drain()
    state = objective(oid)
    assert state.status == "completed", state.blocked_reason
    assert task_jobs(oid) == [job_id, v.task_job_id(oid, "t", 2)]
