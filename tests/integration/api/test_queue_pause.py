"""Issue 34 item 5: GET /queues lists every worker group with its pause; POST
/queues/<group>/pause and /resume need `jobs:control` and a credential bound to no
organization, and record `by` (the principal, with the client's display hint)."""

from __future__ import annotations

import pytest

from jobs.models import Queue
from receipts import store

pytestmark = pytest.mark.django_db


def test_pause_then_resume_a_queue_and_list_it(api):
    status, body = api.post("/queues/chat/pause", {"by": "alice"})
    assert status == 200, body
    queue = body["queue"]
    assert queue["group"] == "chat" and queue["paused"] is True
    assert queue["pausedBy"] == "token:ops (alice)" and isinstance(queue["pausedAt"], int)
    status, listed = api.get("/queues")
    assert status == 200
    by_group = {q["group"]: q for q in listed["queues"]}
    assert list(by_group)[:3] == ["chat", "control", "codex"]
    assert by_group["chat"]["paused"] is True and by_group["codex"]["paused"] is False

    status, body = api.post("/queues/chat/resume")
    assert status == 200 and body["queue"]["paused"] is False
    assert [r.type for r in store.read("queues/chat")] == ["queue.paused", "queue.resumed"]


def test_an_unknown_group_is_404_and_an_unknown_field_400_writing_nothing(api):
    status, body = api.post("/queues/nope/pause")
    assert status == 404 and body["error"] == "queue_not_found"
    status, body = api.post("/queues/chat/pause", {"reason": "x"})
    assert status == 400 and body["error"] == "unknown_field" and "reason" in str(body)
    status, body = api.post("/queues/chat/pause", {"by": ""})
    assert status == 400 and body["error"] == "invalid_by"
    assert not Queue.objects.exists()


def test_pausing_needs_the_control_scope_and_no_organization(api_for, anonymous):
    assert anonymous.post("/queues/chat/pause")[0] == 401
    reader = api_for("reader", scopes=["jobs:read"])
    assert reader.get("/queues")[0] == 200
    assert reader.post("/queues/chat/pause")[0] == 403
    status, body = api_for("tenant", org="org-1").post("/queues/chat/pause")
    assert status == 403 and body["error"] == "organization_forbidden"
    assert not Queue.objects.exists()
