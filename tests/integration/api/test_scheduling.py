"""runAt, delaySeconds and priority on the HTTP API (issue 33 items 3 and 4; G-3, G-4):
accepted on the enqueue and the batch enqueue, shown on every job read, in the OpenAPI
schema, and refused with a 400 naming the field, nothing written."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from jobs import queue
from jobs.core.diagnosis import utc_text
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from tests.integration.api.conftest import payload, written

pytestmark = pytest.mark.django_db
URL = "/agents/factory/jobs"
HOUR_MS = 3_600_000


def test_run_at_as_iso_8601_with_an_offset_delays_the_job_and_every_read_shows_it(api):
    due = (wall_clock_ms() // 1000 + 86_400) * 1000 + 678  # tomorrow, to the millisecond
    text = datetime.fromtimestamp(due / 1000, timezone(timedelta(hours=1))).isoformat(
        timespec="milliseconds"
    )
    assert text.endswith(".678+01:00")
    status, out = api.post(URL, {"payload": payload(), "runAt": text, "priority": 7})
    assert status == 202, out
    job = out["job"]
    assert (job["runAt"], job["priority"], job["status"]) == (due, 7, "queued")
    receipt = store.read(f"jobs/{job['id']}")[0]
    assert (receipt.body["runAt"], receipt.body["priority"]) == (due, 7)
    _, read = api.get(f"/jobs/{job['id']}")
    assert (read["runAt"], read["priority"]) == (due, 7)
    _, page = api.get("/jobs")
    assert (page["jobs"][0]["runAt"], page["jobs"][0]["priority"]) == (due, 7)
    _, diagnosis = api.get(f"/jobs/{job['id']}/diagnosis")
    scheduled = [b for b in diagnosis["blockers"] if b["code"] == "scheduled"]
    assert f"scheduled for {utc_text(due)}" in scheduled[0]["detail"]
    assert "delivery_pending" not in [b["code"] for b in diagnosis["blockers"]]


def test_run_at_as_epoch_ms_and_delay_seconds_in_the_flat_style(api):
    due = wall_clock_ms() + HOUR_MS
    _, out = api.post(URL, {**payload(), "runAt": due})
    assert out["job"]["runAt"] == due and "runAt" not in out["job"]["payload"]
    before = wall_clock_ms()
    _, out = api.post(URL, {**payload(), "delaySeconds": 90.5, "priority": -3})
    assert before + 90_500 <= out["job"]["runAt"] <= wall_clock_ms() + 90_500
    assert out["job"]["priority"] == -3 and "priority" not in out["job"]["payload"]


def test_a_plain_job_reads_run_at_null_and_priority_0_and_its_body_is_unchanged(api):
    job = api.enqueue()["job"]
    assert (job["runAt"], job["priority"]) == (None, 0)
    body = store.read(f"jobs/{job['id']}")[0].body
    assert "runAt" not in body and "priority" not in body


def test_a_run_at_in_the_past_means_now(api):
    job = api.enqueue(runAt="2001-01-01T00:00:00Z")["job"]
    assert job["runAt"] is None
    assert "runAt" not in store.read(f"jobs/{job['id']}")[0].body


@pytest.mark.parametrize(
    ("options", "code", "field"),
    [
        ({"priority": 101}, "invalid_priority", "priority"),
        ({"priority": -101}, "invalid_priority", "priority"),
        ({"priority": "high"}, "invalid_priority", "priority"),
        ({"priority": 1.5}, "invalid_priority", "priority"),
        ({"priority": True}, "invalid_priority", "priority"),
        ({"runAt": "garbage"}, "invalid_run_at", "runAt"),
        ({"runAt": "2099-01-02T03:04:05"}, "invalid_run_at", "runAt"),  # no offset
        ({"runAt": -5}, "invalid_run_at", "runAt"),
        ({"runAt": 1.5e12}, "invalid_run_at", "runAt"),
        ({"runAt": {"at": 1}}, "invalid_run_at", "runAt"),
        ({"runAt": "9999-01-01T00:00:00Z"}, "invalid_run_at", "runAt"),  # past the bound
        ({"runAt": "2001-01-01T00:00:00Z", "delaySeconds": 5}, "invalid_run_at", "delaySeconds"),
        ({"delaySeconds": -1}, "invalid_delay_seconds", "delaySeconds"),
        ({"delaySeconds": "soon"}, "invalid_delay_seconds", "delaySeconds"),
        ({"delaySeconds": 10**9}, "invalid_delay_seconds", "delaySeconds"),
    ],
)
def test_bad_run_at_delay_or_priority_is_400_naming_the_field_and_writes_nothing(
    api, options, code, field
):
    before = written()
    status, out = api.post(URL, {"payload": payload(), **options})
    assert (status, out["error"]) == (400, code), out
    assert field in out["detail"]
    assert written() == before


def test_the_batch_enqueue_takes_them_per_item_and_refuses_a_bad_one_alone(api):
    due = wall_clock_ms() + HOUR_MS
    before = written()
    status, out = api.post(
        f"{URL}/batch",
        {
            "jobs": [
                {"payload": payload(), "runAt": due, "priority": 100},
                {**payload(), "priority": "urgent"},
                {"payload": payload(), "delaySeconds": 60},
            ]
        },
    )
    assert status == 202 and (out["enqueued"], out["refused"]) == (2, 1), out
    assert out["results"][1]["error"] == "invalid_priority"
    first = queue.get(out["results"][0]["jobId"])
    assert (first.run_at, first.priority) == (due, 100)
    assert queue.get(out["results"][2]["jobId"]).run_at is not None
    assert written()[0] == before[0] + 2


def test_the_openapi_schema_shows_them_on_the_request_and_the_job(api):
    response = api.client.get("/api/schema/", {"format": "json"}, **api.headers())
    schema = json.loads(response.content)
    components = schema["components"]["schemas"]
    request = components["EnqueueRequestRequest"]["properties"]
    assert {"runAt", "delaySeconds", "priority"} <= set(request)
    assert (request["priority"]["minimum"], request["priority"]["maximum"]) == (-100, 100)
    assert {s["type"] for s in request["runAt"]["oneOf"]} == {"string", "integer"}
    assert {"runAt", "priority"} <= set(components["Job"]["properties"])
