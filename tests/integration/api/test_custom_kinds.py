"""A deployment's own payload kinds (P-6, K-1, K-3): registered beside the handler,
accepted by the API, routed by their contract; every other kind is still refused."""

from __future__ import annotations

import pytest

from jobs.core import contracts

pytestmark = pytest.mark.django_db


@pytest.fixture
def report_kinds():
    contracts.register_kind("acme.report", worker_group="codex", auth_context_required=True)
    contracts.register_kind("acme.ping")  # no authContext by default (issue 33 item 1)
    yield
    contracts.unregister_kind("acme.report")
    contracts.unregister_kind("acme.ping")


def test_a_registered_kind_is_enqueued_and_routed_by_its_contract(api, report_kinds):
    out = api.enqueue(
        "my-agent",
        {
            "payload": {
                "kind": "acme.report",
                "authContext": {"userId": "u-1", "organizationId": "org-1"},
            }
        },
    )
    job = out["job"]
    assert job["payload"]["kind"] == "acme.report" and job["routedGroup"] == "codex"
    status, page = api.get("/jobs", kind="acme.report")
    assert status == 200 and [j["id"] for j in page["jobs"]] == [job["id"]]


def test_a_kind_registered_without_auth_context_needs_none(api, report_kinds):
    out = api.enqueue("my-agent", {"payload": {"kind": "acme.ping"}})
    assert out["job"]["routedGroup"] == "chat"
    status, error = api.post("/agents/my-agent/jobs", {"payload": {"kind": "acme.report"}})
    assert status == 400 and error["error"] == "auth_context_required"


def test_unregistered_kinds_are_still_refused_and_named(api, report_kinds):
    status, error = api.post(
        "/agents/my-agent/jobs",
        {
            "payload": {
                "kind": "acme.unknown",
                "authContext": {"userId": "u-1", "organizationId": "org-1"},
            }
        },
    )
    assert status == 400 and error["error"] == "unknown_kind"
    assert "acme.report" in error["detail"] and "factory.run" in error["detail"]


def test_the_kinds_endpoint_lists_built_in_kinds_then_the_deployments(api, report_kinds):
    status, body = api.get("/kinds")
    assert status == 200
    names = [row["kind"] for row in body["kinds"]]
    # the task backend's kind is the deployment's too (TASKS names it: issue 33 item 2)
    assert names == [*contracts.KINDS, "acme.ping", "acme.report", "django.task"]
    report = body["kinds"][-2]
    assert report["workerGroup"] == "codex" and report["builtIn"] is False
    assert report["authContextRequired"] is True and report["objectiveScoped"] is False
    watchdog = next(r for r in body["kinds"] if r["kind"] == "factory.objective.watchdog")
    assert watchdog["authContextRequired"] is False and watchdog["builtIn"] is True
