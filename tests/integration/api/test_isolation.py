"""Q-2, A-10: an organization-bound token never sees or touches another organization's jobs."""

from __future__ import annotations

import pytest

from jobs.models import Job
from receipts import store
from tests.integration.api.conftest import payload, written

pytestmark = pytest.mark.django_db


@pytest.fixture
def orgs(api, api_for):
    """Jobs of org-1 and org-2 (plus an org-less watchdog) and one token per organization."""
    mine = api.enqueue(body={"payload": payload(org="org-1"), "sessionKey": "s-1"})["job"]["id"]
    theirs = api.enqueue(
        body={"payload": payload(org="org-2"), "sessionKey": "s-2", "jobId": "theirs-1"}
    )["job"]["id"]
    watchdog = api.enqueue(agent="factory-control", body={"kind": "factory.objective.watchdog"})[
        "job"
    ]["id"]
    return {
        "mine": mine,
        "theirs": theirs,
        "watchdog": watchdog,
        "one": api_for("one", org="org-1"),
        "two": api_for("two", org="org-2"),
    }


@pytest.mark.parametrize("suffix", ["", "/receipts", "/state"])
def test_reads_of_another_organizations_job_are_404(orgs, suffix):
    one = orgs["one"]
    for job_id in (orgs["theirs"], orgs["watchdog"]):
        status, out = one.get(f"/jobs/{job_id}{suffix}")
        assert (status, out["error"]) == (404, "job_not_found"), (job_id, suffix)
        assert out["detail"] == f"job {job_id} not found"  # same words as a missing job
    status, _ = one.get(f"/jobs/{orgs['mine']}{suffix}")
    assert status == 200


@pytest.mark.parametrize("path", ["steer", "follow-up", "abort"])
def test_commands_on_another_organizations_job_are_404_and_write_nothing(orgs, path):
    before = written()
    head = store.stream_info(f"jobs/{orgs['theirs']}").head
    status, out = orgs["one"].post(f"/jobs/{orgs['theirs']}/{path}", {"payload": {"x": 1}})
    assert (status, out["error"]) == (404, "job_not_found")
    assert written() == before
    assert store.stream_info(f"jobs/{orgs['theirs']}").head == head
    assert Job.objects.get(pk=orgs["theirs"]).status == "queued"


def test_list_shows_only_the_tokens_organization(orgs, api):
    _, out = orgs["one"].get("/jobs")
    assert [j["id"] for j in out["jobs"]] == [orgs["mine"]]
    _, out = orgs["one"].get("/jobs", organizationId="org-2")
    assert out["jobs"] == []
    _, out = orgs["one"].get("/jobs", sessionKey="s-2")
    assert out["jobs"] == []
    _, out = api.get("/jobs")  # an unbound token sees all three
    assert len(out["jobs"]) == 3


def test_enqueue_for_another_organization_is_403_and_writes_nothing(orgs):
    before = written()
    status, out = orgs["one"].post("/agents/factory/jobs", {"payload": payload(org="org-2")})
    assert (status, out["error"]) == (403, "organization_forbidden")
    status, out = orgs["one"].post(
        "/agents/factory-control/jobs", {"kind": "factory.objective.watchdog"}
    )
    assert (status, out["error"]) == (403, "organization_forbidden")
    assert written() == before
    status, out = orgs["one"].post("/agents/factory/jobs", {"payload": payload(org="org-1")})
    assert status == 202 and out["job"]["organizationId"] == "org-1"


def test_explicit_job_id_of_another_organization_is_never_returned(orgs):
    before = written()
    status, out = orgs["one"].post(
        "/agents/factory/jobs", {"jobId": orgs["theirs"], "payload": payload(org="org-1")}
    )
    assert (status, out["error"]) == (409, "job_id_taken")
    assert "org-2" not in str(out)
    assert written() == before


@pytest.mark.parametrize("mode", ["cancel", "steer"])
def test_singleton_enqueue_never_touches_another_organizations_session(orgs, mode):
    before = written()
    head = store.stream_info(f"jobs/{orgs['theirs']}").head
    status, out = orgs["one"].post(
        "/agents/factory/jobs",
        {"payload": payload(org="org-1"), "singleton": {"key": "s-2", "mode": mode}},
    )
    assert (status, out["error"]) == (409, "session_key_conflict")
    assert written() == before
    assert store.stream_info(f"jobs/{orgs['theirs']}").head == head


def test_singleton_enqueue_on_its_own_session_works(orgs):
    status, out = orgs["one"].post(
        "/agents/factory/jobs",
        {"payload": payload(org="org-1"), "singleton": {"key": "s-1", "mode": "steer"}},
    )
    assert status == 202 and out["created"] is False and out["job"]["id"] == orgs["mine"]


def test_the_other_organization_sees_its_own(orgs):
    _, out = orgs["two"].get("/jobs")
    assert [j["id"] for j in out["jobs"]] == [orgs["theirs"]]
    status, _ = orgs["two"].get(f"/jobs/{orgs['mine']}")
    assert status == 404
