"""A-1: POST /agents/<agentId>/jobs in both body styles; every refusal writes nothing."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse, set_script_prefix, set_urlconf

from jobs.api.views import event_paths
from jobs.core.contracts import KINDS
from jobs.models import Job
from receipts import store
from tests.integration.api.conftest import payload, written
from tests.support import present

pytestmark = pytest.mark.django_db


def test_wrapped_body_enqueues_and_answers_202_with_async_links(api):
    before = written()
    status, out = api.post(
        "/agents/factory/jobs", {"payload": payload(prompt="hi"), "lane": "chat", "maxAttempts": 3}
    )
    assert status == 202, out
    job = out["job"]
    assert out["ok"] is True and out["created"] is True and "warnings" not in out
    assert job["agentId"] == "factory" and job["lane"] == "chat" and job["maxAttempts"] == 3
    assert job["payload"] == payload(prompt="hi") and job["status"] == "queued"
    assert job["contractGroup"] == "chat" and job["routedGroup"] == "chat"
    assert out["async"] == {
        "jobId": job["id"],
        "stream": f"jobs/{job['id']}",
        "status": "queued",
        "events": {"job": f"/jobs/{job['id']}/events", "receipt": "/receipt/stream"},
    }
    jobs, streams, receipts = written()
    assert (jobs, streams, receipts) == (before[0] + 1, before[1] + 1, before[2] + 1)
    [receipt] = store.read(f"jobs/{job['id']}")
    assert receipt.type == "job.enqueued" and present(receipt.context)["actor"] == "token:ops"


def test_flat_body_minus_options_is_the_payload(api):
    body = {
        **payload(prompt="flat"),
        "jobId": "flat-1",
        "lane": "follow_up",
        "sessionKey": "s-flat",
        "maxAttempts": 5,
    }
    status, out = api.post("/agents/factory/jobs", body)
    assert status == 202, out
    job = out["job"]
    assert job["id"] == "flat-1" and job["lane"] == "follow_up" and job["maxAttempts"] == 5
    assert job["sessionKey"] == "s-flat"
    assert job["payload"] == payload(prompt="flat")  # options were taken out


def test_wrapped_body_warns_about_ignored_top_level_keys(api):
    out = api.enqueue(body={"payload": payload(), "prompt": "lost"})
    assert out["warnings"] == ["ignored top-level keys beside payload: prompt"]


def test_unknown_agent_is_accepted_with_a_warning(api):
    status, out = api.post("/agents/nobody/jobs", {"payload": payload()})
    assert status == 202 and out["created"] is True
    [warning] = out["warnings"]
    assert "no handler is registered for agent 'nobody'" in warning


def test_explicit_job_id_returns_the_existing_job_unchanged(api):
    first = api.enqueue(body={"jobId": "same-1", "payload": payload(prompt="one")})
    before = written()
    second = api.enqueue(body={"jobId": "same-1", "payload": payload(prompt="two"), "lane": "chat"})
    assert first["created"] is True and second["created"] is False
    assert second["job"]["payload"]["prompt"] == "one" and second["job"]["lane"] == "collect"
    assert written() == before


def test_singleton_object_sets_session_key_and_mode(api):
    first = api.enqueue(
        body={"payload": payload(n=1), "singleton": {"key": "s-1", "mode": "cancel"}}
    )
    second = api.enqueue(
        body={"payload": payload(n=2), "singleton": {"key": "s-1", "mode": "cancel"}}
    )
    assert second["created"] is True and second["job"]["sessionKey"] == "s-1"
    assert second["job"]["singletonMode"] == "cancel"
    assert Job.objects.get(pk=first["job"]["id"]).status == "canceled"  # J-7


def test_singleton_steer_returns_the_active_job_with_a_steer_command(api):
    first = api.enqueue(
        body={"payload": payload(n=1), "singleton": {"key": "s-2", "mode": "steer"}}
    )
    second = api.enqueue(
        body={"payload": payload(n=2), "singleton": {"key": "s-2", "mode": "steer"}}
    )
    assert second["created"] is False and second["job"]["id"] == first["job"]["id"]
    [command] = second["job"]["commands"]
    assert command["command"] == "steer" and command["payload"]["fromEnqueue"] is True


def test_top_level_options_win_over_singleton(api):
    out = api.enqueue(
        body={
            "payload": payload(),
            "sessionKey": "top",
            "singletonMode": "allow",
            "singleton": {"key": "inner", "mode": "cancel"},
        }
    )
    assert out["job"]["sessionKey"] == "top" and out["job"]["singletonMode"] == "allow"


def test_watchdog_needs_no_auth_context(api):
    out = api.enqueue(agent="factory-control", body={"kind": "factory.objective.watchdog"})
    assert out["job"]["kind"] == "factory.objective.watchdog"
    assert out["job"]["routedGroup"] == "control"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"payload": payload(), "lane": "fast"}, "invalid_lane"),
        ({"payload": payload(), "maxAttempts": "3"}, "invalid_max_attempts"),
        ({"payload": payload(), "maxAttempts": 1.5}, "invalid_max_attempts"),
        (
            {"payload": payload(), "singletonMode": "solo", "sessionKey": "s"},
            "invalid_singleton_mode",
        ),
        (
            {"payload": payload(), "singleton": {"mode": "bogus", "key": "s"}},
            "invalid_singleton_mode",
        ),
        ({"payload": payload(), "singleton": "s-1"}, "invalid_singleton"),
        ({"payload": payload(), "singletonMode": "cancel"}, "session_key_required"),
        ({"payload": payload(), "jobId": "has space"}, "invalid_job_id"),
        ({"payload": payload(), "sessionKey": ""}, "invalid_session_key"),
        ({"payload": {"kind": "factory.nope"}}, "unknown_kind"),
        ({"prompt": "no kind at all"}, "unknown_kind"),
        ({"payload": {"kind": "factory.run"}}, "auth_context_required"),
        (
            {"payload": {"kind": "factory.run", "authContext": {"userId": "u"}}},
            "auth_context_required",
        ),
        ({"payload": "text"}, "payload_not_object"),
        ({"payload": None}, "payload_not_object"),
        ({"payload": payload(bad="nul\u0000here")}, "invalid_payload"),
    ],
)
def test_bad_bodies_are_400_with_their_code_and_write_nothing(api, body, code):
    before = written()
    status, out = api.post("/agents/factory/jobs", body)
    assert (status, out["error"]) == (400, code), out
    assert out["ok"] is False and isinstance(out["detail"], str) and out["detail"]
    assert written() == before


def test_unknown_kind_lists_the_nine(api):
    _, out = api.post("/agents/factory/jobs", {"payload": {"kind": "factory.nope"}})
    assert all(kind in out["detail"] for kind in KINDS)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("{not json", "malformed_json"),
        ('{"a": NaN}', "malformed_json"),
        (b"\xff\xfe{}", "malformed_json"),
        ("[1, 2]", "body_not_object"),
        ('"text"', "body_not_object"),
        ("42", "body_not_object"),
        ("null", "body_not_object"),
        ('{"kind": "factory.run", "x": "\\ud800"}', "invalid_payload"),
        ("[" * 5000 + "]" * 5000, "invalid_payload"),
    ],
)
def test_unparseable_bodies_are_400_and_write_nothing(api, raw, code):
    before = written()
    status, out = api.post("/agents/factory/jobs", raw=raw)
    assert (status, out["error"]) == (400, code), out
    assert written() == before


def test_payload_deeper_than_the_limit_is_refused(api, settings):
    deep: dict = {}
    node = deep
    for _ in range(settings.RECEIPT.max_json_depth + 5):
        node["x"] = {}
        node = node["x"]
    before = written()
    status, out = api.post("/agents/factory/jobs", {"payload": payload(deep=deep)})
    assert (status, out["error"]) == (400, "invalid_payload")
    assert written() == before


def test_payload_over_the_size_limit_is_413(api, settings):
    limit = settings.RECEIPT.max_payload_bytes
    before = written()
    status, out = api.post("/agents/factory/jobs", {"payload": payload(blob="x" * (limit + 1))})
    assert (status, out["error"]) == (413, "payload_too_large")
    # a body too large to even read gets the same answer
    status, out = api.post("/agents/factory/jobs", raw=json.dumps({"blob": "x" * (limit * 2)}))
    assert (status, out["error"]) == (413, "payload_too_large")
    assert written() == before


@pytest.mark.parametrize(
    ("agent", "code"),
    [("a%00b", "invalid_agent_id"), ("a%20b", "invalid_agent_id"), ("x" * 129, "invalid_agent_id")],
)
def test_bad_agent_ids_are_refused(api, agent, code):
    before = written()
    status, out = api.post(f"/agents/{agent}/jobs", {"payload": payload()})
    assert (status, out["error"]) == (400, code)
    assert written() == before


def test_empty_body_is_an_empty_payload(api):
    status, out = api.post("/agents/factory/jobs", raw="")
    assert (status, out["error"]) == (400, "unknown_kind")


def test_get_on_the_enqueue_url_is_405(api):
    status, out = api.get("/agents/factory/jobs")
    assert (status, out["error"]) == (405, "method_not_allowed")


@pytest.mark.parametrize(("asked", "clamped"), [(0, 1), (-4, 1), (99, 8)])
def test_a_clamped_max_attempts_is_reported_in_the_warnings(api, asked, clamped):
    """Item 11: J-6 clamps maxAttempts to 1..8; the answer says so instead of staying quiet."""
    out = api.enqueue(body={"payload": payload(), "maxAttempts": asked})
    assert out["job"]["maxAttempts"] == clamped
    assert f"maxAttempts {asked} is outside 1..8; clamped to {clamped}" in out["warnings"]


def test_a_max_attempts_in_range_brings_no_warning(api):
    assert "warnings" not in api.enqueue(body={"payload": payload(), "maxAttempts": 8})


def _nested(levels: int) -> dict:
    deep: dict = {}
    node = deep
    for _ in range(levels - 1):
        node["x"] = {}
        node = node["x"]
    return deep


@pytest.mark.parametrize("style", ["wrapped", "flat"])
@pytest.mark.parametrize("extra", [1, 2, 3, 10])
def test_the_depth_error_names_the_enforced_limit(api, settings, style, extra):
    """Item 11: the message said 34 levels for a limit of 32."""
    limit = settings.RECEIPT.max_json_depth
    deep = _nested(limit + extra)  # `deep` sits one level below the payload
    body = {"payload": payload(deep=deep)} if style == "wrapped" else payload(deep=deep)
    status, out = api.post("/agents/factory/jobs", body)
    assert (status, out["error"]) == (400, "invalid_payload"), out
    assert f"nesting deeper than {limit} levels" in out["detail"]
    fitting = {"payload": payload(deep=_nested(limit))}
    assert api.post("/agents/factory/jobs", fitting)[0] == 202


def test_event_paths_follow_the_script_prefix_and_the_urlconf():
    job_id = "a.B_c:d-1"
    try:
        for prefix in ("/", "/mounted/", "/"):  # each prefix reversed once, then reused
            set_script_prefix(prefix)
            assert event_paths(job_id) == {
                "job": reverse("job-events", args=(job_id,)),
                "receipt": reverse("receipt-stream"),
            }
            assert event_paths(job_id)["job"] == f"{prefix}jobs/{job_id}/events"
        set_urlconf("tests.integration.api.prefixed_urls")  # a host's include under /api/
        assert event_paths(job_id) == {
            "job": f"/api/jobs/{job_id}/events",
            "receipt": "/api/receipt/stream",
        }
    finally:
        set_script_prefix("/")
        set_urlconf(None)
