"""A-7 POST /receipt/callback: an invalidation, not an append."""

from __future__ import annotations

import json

import httpx
import pytest
from django.conf import settings

from receipts.models import Receipt as ReceiptRow
from tests.integration.live.conftest import CALLBACK_TOKEN, enqueue, serve, token

pytestmark = pytest.mark.django_db(transaction=True)


def post(server, body, secret: str | None = CALLBACK_TOKEN) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return httpx.post(f"{server.url}/receipt/callback", content=data, headers=headers, timeout=10)


def error(response: httpx.Response) -> tuple[int, str, str]:
    body = response.json()
    assert body["ok"] is False
    return response.status_code, body["error"], body["detail"]


def test_the_callback_token_is_required_when_configured(server, reader):
    body = {"stream": "jobs/x", "eventType": "job.completed"}
    assert error(post(server, body, secret=None))[:2] == (401, "not_authenticated")
    assert error(post(server, body, secret="wrong"))[:2] == (401, "invalid_token")
    assert error(post(server, body, secret=reader))[:2] == (401, "invalid_token")


BAD_BODIES = [
    ({"eventType": "job.completed"}, (400, "stream_required", "stream required")),
    ({"stream": "", "type": "x"}, (400, "stream_required", "stream required")),
    ({"stream": "jobs/x"}, (400, "event_type_required", "eventType required")),
    ({"stream": "jobs/x", "eventType": 7}, (400, "event_type_required", "eventType required")),
    ("{not json", (400, "malformed_json", "the body is not valid JSON")),
    ([1, 2], (400, "body_not_object", "the body must be a JSON object")),
]


def test_the_body_needs_a_stream_and_an_event_type(server):
    for body, expected in BAD_BODIES:
        assert error(post(server, body)) == expected, body


def test_an_accepted_callback_wakes_subscribers_and_writes_nothing(server, http, reader):
    job = enqueue()
    before = ReceiptRow.objects.count()
    with (
        server.stream(http, "/receipt/stream", reader) as stream,
        server.stream(http, f"/jobs/{job.job_id}/events", reader) as events,
    ):
        stream.next()
        events.until(lambda f: f.event == "job", message="the first job frame")
        response = post(server, {"stream": job.stream, "type": "resonate.settled"})
        assert response.status_code == 202 and response.json() == {"ok": True}
        seen = stream.until(lambda f: f.event == "receipt-refresh", message="the invalidation")
        job_frames = events.until(lambda f: f.event == "job", message="a fresh job frame")
    # no id: an invalidation is not a position in the global sequence
    assert [(f.data, f.id) for f in seen if f.event == "receipt-refresh"] == [(job.stream, None)]
    assert [(f.data, f.id) for f in job_frames if f.event == "job-refresh"] == [
        ("resonate.settled", None)
    ]
    assert ReceiptRow.objects.count() == before


def test_without_a_callback_token_an_api_token_with_jobs_write_is_needed(tmp_path):
    writer, reader_only = token(scopes=["jobs:write"]), token(scopes=["jobs:read"])
    body = {"stream": "jobs/x", "eventType": "job.completed"}
    with serve(tmp_path, RECEIPT_CALLBACK_TOKEN="") as bare:
        assert error(post(bare, body, secret=None))[:2] == (401, "not_authenticated")
        assert error(post(bare, body, secret="rcpt_unknown"))[:2] == (401, "invalid_token")
        assert error(post(bare, body, secret=reader_only))[:2] == (403, "missing_scope")
        assert post(bare, body, secret=writer).status_code == 202
    assert settings.RECEIPT is not None
