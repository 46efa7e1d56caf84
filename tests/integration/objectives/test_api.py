"""A-9, A-10, Q-2: the objectives API, its scope and organization isolation."""

from __future__ import annotations

import pytest

from objectives.core import vocabulary as v
from tests.integration.objectives.conftest import create, dispatch, drain

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def objectives(factory):
    mine = create(title="Mine", tasks=[{"id": "t", "title": "T", "command": "echo hello"}])
    drain()
    theirs = create(title="Theirs", org="org-2", tasks=[{"title": "x", "command": "true"}])
    archived = create(title="Old", tasks=[{"title": "x", "command": "true"}])
    drain()
    dispatch("archive", objectiveId=archived)
    return {"mine": mine, "theirs": theirs, "archived": archived}


def test_list_has_every_board_section_and_the_flat_list(api, objectives):
    status, out = api.get("/factory/api/objectives")
    assert status == 200
    assert [s["title"] for s in out["board"]] == [
        "Needs Attention",
        "Active",
        "Queued",
        "Completed",
        "Archived",
    ]
    by_section = {s["key"]: [o["id"] for o in s["objectives"]] for s in out["board"]}
    assert objectives["archived"] in by_section["archived"]
    assert objectives["mine"] in by_section["completed"]
    assert {o["id"] for o in out["objectives"]} == set(objectives.values())


def test_detail_has_the_objective_its_tasks_and_jobs(api, objectives):
    status, out = api.get(f"/factory/api/objectives/{objectives['mine']}")
    assert status == 200
    obj = out["objective"]
    assert (obj["id"], obj["status"], obj["phase"], obj["mode"], obj["title"]) == (
        objectives["mine"],
        "completed",
        "done",
        "delivery",
        "Mine",
    )
    assert out["tasks"][0]["id"] == "t" and out["tasks"][0]["status"] == "integrated"
    kinds = {job["kind"] for job in out["jobs"]}
    assert {v.KIND_CONTROL, v.KIND_TASK_RUN, v.KIND_MONITOR, v.KIND_AUDIT} <= kinds


def test_receipts_default_to_the_latest_40_and_take_a_limit_up_to_1000(api, objectives):
    path = f"/factory/api/objectives/{objectives['mine']}/receipts"
    _, out = api.get(path)
    receipts = out["receipts"]
    assert 0 < len(receipts) <= 40
    assert receipts[-1]["body"]["type"] == v.AUDIT_RECORDED
    _, few = api.get(path, limit=2)
    assert [r["hash"] for r in few["receipts"]] == [r["hash"] for r in receipts[-2:]]
    _, everything = api.get(path, limit=1000)
    assert everything["receipts"][0]["body"]["type"] == v.OBJECTIVE_CREATED
    for bad_limit in ("many", 5000, 0):
        status, bad = api.get(path, limit=bad_limit)
        assert (status, bad["error"]) == (400, "invalid_limit")


def test_live_status(api, objectives):
    status, out = api.get(f"/factory/api/objectives/{objectives['mine']}/live-status")
    progress = out["objectiveProgress"]
    assert status == 200
    assert set(progress) == {
        "objectiveId",
        "status",
        "phase",
        "summary",
        "detail",
        "progressAt",
        "active",
        "jobId",
        "taskId",
        "stdoutTail",
        "stderrTail",
    }
    assert progress["status"] == "completed" and progress["active"] is False


@pytest.mark.parametrize("suffix", ["", "/receipts", "/live-status"])
def test_another_organizations_objective_is_404(api_for, objectives, suffix):
    one = api_for("one", org="org-1")
    status, out = one.get(f"/factory/api/objectives/{objectives['theirs']}{suffix}")
    assert (status, out["error"]) == (404, "objective_not_found")
    assert out["detail"] == f"objective {objectives['theirs']} not found"
    assert one.get(f"/factory/api/objectives/{objectives['mine']}{suffix}")[0] == 200
    status, out = one.get("/factory/api/objectives/nope")
    assert (status, out["error"]) == (404, "objective_not_found")


def test_an_org_bound_list_shows_only_its_organization(api_for, objectives):
    _, out = api_for("two", org="org-2").get("/factory/api/objectives")
    assert [o["id"] for o in out["objectives"]] == [objectives["theirs"]]


def test_the_scope_is_objectives_read(api_for, anonymous, objectives):
    status, out = api_for("jobs-only", scopes=["jobs:read"]).get("/factory/api/objectives")
    assert (status, out["error"]) == (403, "missing_scope")
    assert anonymous.get("/factory/api/objectives")[0] == 401


def test_queued_work_is_not_counted_running_and_a_canceled_objective_runs_nothing(api, factory):
    """A-9, O-3, O-11: live status, task counts and tasks agree with the jobs: a task whose
    job waits in the queue is queued; after a cancel nothing is running."""
    from jobs import queue
    from tests.integration.objectives.conftest import diamond, queued, work

    oid = create(title="Counted", tasks=diamond())
    work(queued()[0])
    job_id = v.task_job_id(oid, "a", 1)
    base = f"/factory/api/objectives/{oid}"

    def seen() -> tuple[str, dict, str, dict]:
        progress = api.get(f"{base}/live-status")[1]["objectiveProgress"]
        detail = api.get(base)[1]
        listed = next(
            o for o in api.get("/factory/api/objectives")[1]["objectives"] if o["id"] == oid
        )
        shown = next(t["shownStatus"] for t in detail["tasks"] if t["id"] == "a")
        return progress["summary"], detail["objective"]["taskCounts"], shown, listed["taskCounts"]

    counts = {"queued": 1, "pending": 3}
    assert seen() == ("executing: 0 of 4 tasks done, 1 queued", counts, "queued", counts)
    queue.lease(job_id, worker_id="w:1", start=True)
    counts = {"running": 1, "pending": 3}
    assert seen() == ("executing: 0 of 4 tasks done, 1 running", counts, "running", counts)
    assert dispatch("cancel", objectiveId=oid).status == "completed"
    counts = {"stopped": 1, "pending": 3}
    assert seen() == ("canceled: 0 of 4 tasks done", counts, "stopped", counts)
