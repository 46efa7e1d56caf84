"""A-5: steer, follow-up and abort; `by` is always the principal, a client's `by` a hint."""

from __future__ import annotations

import pytest

from jobs import queue
from jobs.core.state import Fence
from receipts import store
from tests.integration.api.conftest import written

pytestmark = pytest.mark.django_db


def last_receipt(job_id: str):
    return store.read(f"jobs/{job_id}")[-1]


@pytest.mark.parametrize(("path", "command"), [("steer", "steer"), ("follow-up", "follow_up")])
def test_wrapped_command_with_a_by_hint(api, path, command):
    job_id = api.enqueue()["job"]["id"]
    status, out = api.post(
        f"/jobs/{job_id}/{path}", {"payload": {"text": "go left"}, "by": "alice"}
    )
    assert status == 202, out
    assert out["ok"] is True
    sent = out["command"]
    assert sent["command"] == command and sent["lane"] == command
    assert sent["payload"] == {"text": "go left"} and sent["by"] == "token:ops (alice)"
    receipt = last_receipt(job_id)
    assert receipt.type == "queue.command" and receipt.body["by"] == "token:ops (alice)"
    assert receipt.context["actor"] == "token:ops (alice)"


@pytest.mark.parametrize("path", ["steer", "follow-up"])
def test_whole_body_is_the_payload_without_a_payload_key(api, path):
    job_id = api.enqueue()["job"]["id"]
    status, out = api.post(f"/jobs/{job_id}/{path}", {"text": "hi", "by": "bob"})
    assert status == 202
    assert out["command"]["payload"] == {"text": "hi", "by": "bob"}
    assert out["command"]["by"] == "token:ops"  # no hint in this style


def test_a_by_hint_equal_to_the_principal_is_not_repeated(api):
    job_id = api.enqueue()["job"]["id"]
    _, out = api.post(f"/jobs/{job_id}/steer", {"payload": {}, "by": "token:ops"})
    assert out["command"]["by"] == "token:ops"


@pytest.mark.parametrize("hint", [5, "", "x" * 81, "line\nbreak"])
def test_bad_by_hints_are_400_and_write_nothing(api, hint):
    job_id = api.enqueue()["job"]["id"]
    before = written()
    status, out = api.post(f"/jobs/{job_id}/steer", {"payload": {}, "by": hint})
    assert (status, out["error"]) == (400, "invalid_by")
    assert written() == before


@pytest.mark.parametrize("path", ["steer", "follow-up", "abort"])
def test_commands_on_a_missing_job_are_404(api, path):
    before = written()
    status, out = api.post(f"/jobs/nope/{path}", {"payload": {}})
    assert (status, out["error"]) == (404, "job_not_found")
    assert written() == before


@pytest.mark.parametrize("path", ["steer", "follow-up", "abort"])
def test_commands_on_a_terminal_job_are_409_and_write_nothing(api, path):
    job_id = api.enqueue()["job"]["id"]
    api.post(f"/jobs/{job_id}/abort", {})
    before = written()
    status, out = api.post(f"/jobs/{job_id}/{path}", {"payload": {"x": 1}})
    assert (status, out["error"]) == (409, "job_terminal")
    assert ("nothing to abort" if path == "abort" else "job is canceled; continue") in out["detail"]
    assert written() == before


@pytest.mark.parametrize(
    ("path", "raw", "code"),
    [
        ("steer", "{oops", "malformed_json"),
        ("follow-up", "[1]", "body_not_object"),
        ("abort", '"stop"', "body_not_object"),
        ("abort", '{"reason": 7}', "invalid_reason"),
        ("abort", '{"reason": ""}', "invalid_reason"),
    ],
)
def test_bad_command_bodies_are_400_and_write_nothing(api, path, raw, code):
    job_id = api.enqueue()["job"]["id"]
    before = written()
    status, out = api.post(f"/jobs/{job_id}/{path}", raw=raw)
    assert (status, out["error"]) == (400, code), out
    assert written() == before


def test_oversized_steer_payload_is_413(api, settings):
    job_id = api.enqueue()["job"]["id"]
    before = written()
    blob = "x" * (settings.RECEIPT.max_payload_bytes + 1)
    status, out = api.post(f"/jobs/{job_id}/steer", {"payload": {"blob": blob}})
    assert (status, out["error"]) == (413, "payload_too_large")
    assert written() == before


def test_abort_of_a_queued_job_cancels_it_outright(api):
    job_id = api.enqueue()["job"]["id"]
    status, out = api.post(f"/jobs/{job_id}/abort", {"reason": "not needed", "by": "carol"})
    assert status == 202
    assert out["ok"] is True and out["canceled"] is True
    assert out["job"]["status"] == "canceled" and out["command"]["command"] == "abort"
    receipt = last_receipt(job_id)
    assert receipt.type == "job.canceled" and receipt.body["reason"] == "not needed"
    assert receipt.body["by"] == "token:ops (carol)"


def test_abort_of_a_running_job_sends_the_abort_command(api):
    job_id = api.enqueue()["job"]["id"]
    lease = queue.lease(job_id, worker_id="w1")
    queue.heartbeat(job_id, fence=Fence("w1", lease.job.attempt))
    status, out = api.post(f"/jobs/{job_id}/abort", raw="")
    assert status == 202
    assert out["canceled"] is False and out["job"]["abortRequested"] is True
    assert out["job"]["status"] == "running"
    assert out["command"]["payload"] == {"reason": "abort requested"}
    assert out["command"]["by"] == "token:ops"


def test_a_long_hint_is_clipped_so_the_receipt_by_stays_in_bounds(api):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from jobs.queue import MAX_BY

    job_id = api.enqueue()["job"]["id"]
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user("o" * 150, password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="change_job"))
    client = Client()  # the test client marks requests as CSRF-checked
    client.force_login(user)
    response = client.post(
        f"/jobs/{job_id}/steer", {"payload": {}, "by": "h" * 80}, content_type="application/json"
    )
    assert response.status_code == 202, response.content
    by = response.json()["command"]["by"]
    assert by.startswith("o" * 150 + " (h") and len(by) == MAX_BY
