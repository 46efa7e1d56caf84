"""`POST /agents/<agentId>/jobs/batch` (A-1, T-9): many enqueues in one request and one
transaction, each item validated on its own, idempotent per jobId, organizations kept apart."""

from __future__ import annotations

import pytest

from jobs import queue
from jobs.api.batch import MAX_ITEMS
from jobs.models import Job
from receipts import store
from tests.integration.api.conftest import payload, written

pytestmark = pytest.mark.django_db
URL = "/agents/factory/jobs/batch"


def test_a_batch_enqueues_every_valid_item_in_order_and_answers_each(api):
    status, out = api.post(
        URL,
        {
            "jobs": [
                {"payload": payload(prompt="one")},
                {"jobId": "batch-two", "payload": payload(prompt="two")},
                payload(prompt="three"),  # the flat style
            ]
        },
    )
    assert status == 202 and out["ok"] is True and (out["enqueued"], out["refused"]) == (3, 0)
    assert [r["index"] for r in out["results"]] == [0, 1, 2]
    assert out["results"][1]["jobId"] == "batch-two" and out["results"][1]["created"] is True
    prompts = [queue.get(r["jobId"]).payload["prompt"] for r in out["results"]]
    assert prompts == ["one", "two", "three"]
    assert all(r["status"] == "queued" for r in out["results"])


def test_invalid_items_are_answered_with_their_error_and_the_rest_is_enqueued(api):
    before = written()
    status, out = api.post(
        URL,
        {
            "jobs": [
                {"payload": payload(prompt="good")},
                {
                    "payload": {
                        "kind": "nope",
                        "authContext": {"userId": "u", "organizationId": "o"},
                    }
                },
                "not an object",
                {"lane": "sideways", "payload": payload()},
            ]
        },
    )
    assert status == 202 and out["ok"] is False and (out["enqueued"], out["refused"]) == (1, 3)
    assert [r.get("error") for r in out["results"]] == [
        None,
        "unknown_kind",
        "body_not_object",
        "invalid_lane",
    ]
    jobs, streams, receipts = written()
    assert (jobs - before[0], streams - before[1], receipts - before[2]) == (1, 1, 1)


def test_a_jobid_seen_before_is_handed_back_not_enqueued_twice(api):
    first = api.post(URL, {"jobs": [{"jobId": "again-1", "payload": payload(prompt="x")}]})[1]
    status, out = api.post(
        URL,
        {
            "jobs": [
                {"jobId": "again-1", "payload": payload(prompt="x")},
                {"jobId": "again-2", "payload": payload(prompt="y")},
            ]
        },
    )
    assert status == 202 and first["results"][0]["created"] is True
    assert [r["created"] for r in out["results"]] == [False, True]
    assert [r.type for r in store.read("jobs/again-1")] == ["job.enqueued"]


def test_nothing_valid_is_a_400_with_the_items_and_writes_nothing(api):
    before = written()
    status, out = api.post(URL, {"jobs": [{"payload": {"kind": "nope"}}]})
    assert status == 400 and out["error"] == "batch_refused"
    assert out["results"][0]["error"] == "unknown_kind" and "jobs[0]" in out["detail"]
    assert written() == before


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "invalid_batch"),
        ({"jobs": []}, "invalid_batch"),
        ({"jobs": {"a": 1}}, "invalid_batch"),
        ({"jobs": [payload()] * (MAX_ITEMS + 1)}, "batch_too_large"),
    ],
)
def test_a_malformed_batch_is_refused_whole(api, body, code):
    before = written()
    status, out = api.post(URL, body)
    assert status == 400 and out["error"] == code
    assert written() == before


def test_an_organization_token_enqueues_only_for_its_organization(api_for):
    mine = api_for("org-1-svc", org="org-1")
    status, out = mine.post(
        URL, {"jobs": [{"payload": payload(org="org-1")}, {"payload": payload(org="org-2")}]}
    )
    assert status == 202 and [r["ok"] for r in out["results"]] == [True, False]
    assert out["results"][1]["error"] == "organization_forbidden"


def test_another_organizations_jobid_refuses_the_whole_batch(api, api_for):
    api.post(URL, {"jobs": [{"jobId": "theirs-1", "payload": payload(org="org-2")}]})
    before = written()
    mine = api_for("org-1-svc", org="org-1")
    status, out = mine.post(
        URL,
        {
            "jobs": [
                {"payload": payload(org="org-1")},
                {"jobId": "theirs-1", "payload": payload(org="org-1")},
            ]
        },
    )
    assert status == 409 and out["error"] == "job_id_taken" and "jobs[1]" in out["detail"]
    assert written() == before


@pytest.mark.parametrize("mode", ["cancel", "steer"])
def test_a_singleton_item_never_touches_another_organizations_session(api, api_for, mode):
    """Q-2: the batch applies the same isolation as a single enqueue: a singleton item on a
    session key with another organization's active job refuses the whole batch, and that
    job is neither canceled nor steered."""
    _, out = api.post(URL, {"jobs": [{"sessionKey": "s-2", "payload": payload(org="org-2")}]})
    theirs = out["results"][0]["jobId"]
    head = store.stream_info(f"jobs/{theirs}").head
    before = written()
    mine = api_for("org-1-svc", org="org-1")
    status, out = mine.post(
        URL,
        {
            "jobs": [
                {"payload": payload(org="org-1")},
                {"payload": payload(org="org-1"), "singleton": {"key": "s-2", "mode": mode}},
            ]
        },
    )
    assert status == 409 and out["error"] == "session_key_conflict" and "jobs[1]" in out["detail"]
    assert written() == before
    assert store.stream_info(f"jobs/{theirs}").head == head
    assert Job.objects.get(pk=theirs).status == "queued"


def test_the_batch_needs_the_write_scope(api_for, anonymous):
    assert anonymous.post(URL, {"jobs": [{"payload": payload()}]})[0] == 401
    reader = api_for("reader", scopes=["jobs:read"])
    assert reader.post(URL, {"jobs": [{"payload": payload()}]})[0] == 403
