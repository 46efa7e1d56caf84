"""Issue 34 item 3: `POST /jobs/<id>/retry` and `POST /jobs/retry` (the batch form).

`jobs:control` like abort; an organization-bound token sees and retries its own
organization's jobs only (another's job is 404, exactly like a missing one); a job that
is not failed is 409 with the reason; bad input is 400 naming the field and writes
nothing.
"""

from __future__ import annotations

import pytest

from jobs import queue
from jobs.core.state import Fence
from receipts import store
from tests.integration.api.conftest import written
from tests.integration.jobs.retry_builders import T, failed_job, job_payload, running_job

pytestmark = pytest.mark.django_db


def last(job_id: str):
    return store.read(f"jobs/{job_id}")[-1]


# ---- one job -----------------------------------------------------------------------------


def test_a_failed_job_is_retried_with_the_principal_as_by(api):
    job_id = failed_job(max_attempts=2)
    status, out = api.post(f"/jobs/{job_id}/retry", {"reason": "fixed the key", "by": "alice"})
    assert status == 202, out
    assert out["ok"] is True and out["retry"] == 1
    assert out["delivery"] == f"{job_id}:retry:1"
    job = out["job"]
    assert (job["status"], job["attempt"], job["maxAttempts"]) == ("queued", 2, 2)
    assert (job["retries"], job["retriedBy"], job["retriedAfterAttempt"]) == (
        1,
        "token:ops (alice)",
        2,
    )
    receipt = last(job_id)
    assert receipt.type == "job.retried"
    assert (receipt.body["by"], receipt.body["reason"]) == ("token:ops (alice)", "fixed the key")
    status, shown = api.get(f"/jobs/{job_id}")
    assert (status, shown["retries"], shown["retriedAt"]) == (200, 1, receipt.ts)


def test_retrying_a_running_job_is_409_with_a_clear_message(api):
    job_id, _ = running_job()
    before = written()
    status, out = api.post(f"/jobs/{job_id}/retry", {})
    assert (status, out["error"]) == (409, "job_not_retryable")
    assert out["detail"] == (
        f"job {job_id} is running; only a failed or canceled job can be retried"
    )
    assert written() == before


def test_a_completed_job_is_409_and_a_canceled_one_needs_include_canceled(api):
    job_id, fence = running_job()
    queue.complete(job_id, "done", fence=fence)
    assert api.post(f"/jobs/{job_id}/retry", {})[1]["detail"] == (
        f"job {job_id} completed; only a failed or canceled job can be retried"
    )
    canceled = queue.enqueue("factory", job_payload(), now_ms=T).job.job_id
    queue.abort(canceled, by="ops")
    status, out = api.post(f"/jobs/{canceled}/retry", {})
    assert (status, out["error"]) == (409, "job_not_retryable")
    assert "includeCanceled" in out["detail"]
    status, out = api.post(f"/jobs/{canceled}/retry", {"includeCanceled": True})
    assert (status, out["job"]["status"]) == (202, "queued")


def test_a_missing_job_is_404(api):
    status, out = api.post("/jobs/no-such-job/retry", {})
    assert (status, out["error"]) == (404, "job_not_found")


def test_another_organizations_job_is_404_and_untouched(api_for):
    theirs = failed_job(org="org-2")
    before = written()
    status, out = api_for("one", org="org-1").post(f"/jobs/{theirs}/retry", {})
    assert (status, out) == (
        404,
        {"ok": False, "error": "job_not_found", "detail": f"job {theirs} not found"},
    )
    assert written() == before
    mine = failed_job(org="org-1")
    assert api_for("one-again", org="org-1").post(f"/jobs/{mine}/retry", {})[0] == 202


@pytest.mark.parametrize("scopes", [["jobs:read"], ["jobs:write"]])
def test_retry_needs_the_control_scope(api_for, scopes):
    job_id = failed_job()
    caller = api_for("narrow", scopes=scopes)
    for path, body in ((f"/jobs/{job_id}/retry", {}), ("/jobs/retry", {"status": "failed"})):
        status, out = caller.post(path, body)
        assert (status, out["error"]) == (403, "missing_scope")
    assert queue.get(job_id).status == "failed"


@pytest.mark.parametrize(
    ("body", "code", "text"),
    [
        ({"includeCanceled": "yes"}, "invalid_includeCanceled", "includeCanceled must be true"),
        ({"reason": 5}, "invalid_reason", "reason must be a string"),
        ({"reason": "x" * 2001}, "invalid_reason", "reason must be a non-empty string"),
        ({"by": ""}, "invalid_by", "by must be a display name"),
        ({"force": True}, "unknown_field", "'force' is not a field of this body"),
    ],
)
def test_bad_input_to_one_retry_is_400_naming_the_field(api, body, code, text):
    job_id = failed_job()
    before = written()
    status, out = api.post(f"/jobs/{job_id}/retry", body)
    assert (status, out["error"]) == (400, code)
    assert text in out["detail"]
    assert written() == before


def test_a_malformed_body_is_400(api):
    job_id = failed_job()
    status, out = api.post(f"/jobs/{job_id}/retry", raw=b"{nope")
    assert (status, out["error"]) == (400, "malformed_json")


# ---- many jobs -----------------------------------------------------------------------------


def test_a_filter_retries_the_failed_jobs_it_matches(api):
    runs = [failed_job(at_ms=T + n) for n in range(3)]
    dispatch_job = failed_job(kind="factory.dispatch", at_ms=T + 5)
    status, out = api.post("/jobs/retry", {"status": "failed", "kind": "factory.run"})
    assert status == 200, out
    assert out == {
        "ok": True,
        "retried": 3,
        "skipped": 0,
        "skippedBy": {},
        "skippedJobs": [],
        "batches": 1,
        "errors": [],
        "nextCursor": None,
    }
    assert {queue.get(j).status for j in runs} == {"queued"}
    assert queue.get(dispatch_job).status == "failed"
    assert last(runs[0]).body["by"] == "token:ops"


def test_since_and_until_accept_ms_iso_times_and_spans(api):
    old = failed_job(at_ms=T)
    newer = failed_job(at_ms=T + 60_000)
    status, out = api.post(
        "/jobs/retry",
        {"status": "failed", "since": "2025-10-09T08:54:00", "until": T + 120_000},
    )
    assert (status, out["retried"]) == (200, 1), out
    assert (queue.get(old).status, queue.get(newer).status) == ("failed", "queued")
    status, out = api.post("/jobs/retry", {"status": "failed", "since": "3650d"})
    assert (status, out["retried"]) == (200, 1)


def test_a_limit_answers_a_cursor_that_goes_on(api):
    ids = [failed_job(at_ms=T + n) for n in range(3)]
    status, first = api.post("/jobs/retry", {"status": "failed", "limit": 2})
    assert (status, first["retried"]) == (200, 2) and first["nextCursor"]
    status, rest = api.post(
        "/jobs/retry", {"status": "failed", "limit": 2, "cursor": first["nextCursor"]}
    )
    assert (rest["retried"], rest["nextCursor"]) == (1, None)
    assert {queue.get(j).status for j in ids} == {"queued"}


def test_an_organization_bound_token_retries_its_own_jobs_only(api_for):
    mine, theirs = failed_job(org="org-1"), failed_job(org="org-2")
    one = api_for("one", org="org-1")
    status, out = one.post("/jobs/retry", {"status": "failed"})
    assert (status, out["retried"]) == (200, 1)
    assert (queue.get(mine).status, queue.get(theirs).status) == ("queued", "failed")
    before = written()
    status, out = one.post("/jobs/retry", {"status": "failed", "organizationId": "org-2"})
    assert (status, out["error"]) == (403, "organization_forbidden")
    assert "acts for organization org-1 only" in out["detail"]
    assert written() == before


def test_a_list_of_ids_is_retried_and_what_cannot_be_is_named(api_for):
    mine, theirs, running = failed_job(org="org-1"), failed_job(org="org-2"), running_job()[0]
    status, out = api_for("one", org="org-1").post(
        "/jobs/retry", {"jobIds": [mine, theirs, running, "ghost"]}
    )
    assert status == 200, out
    assert (out["retried"], out["skipped"]) == (1, 3)
    assert out["skippedBy"] == {"active": 1, "missing": 2}
    assert {(s["jobId"], s["refusal"]) for s in out["skippedJobs"]} == {
        (theirs, "missing"),
        ("ghost", "missing"),
        (running, "active"),
    }
    assert queue.get(theirs).status == "failed"


@pytest.mark.parametrize(
    ("body", "code", "text"),
    [
        ({}, "invalid_status", "status is required with a filter: failed or canceled"),
        ({"status": "completed"}, "invalid_status", "got 'completed'"),
        ({"stauts": "failed"}, "unknown_field", "'stauts' is not a field of this body"),
        ({"status": "failed", "kind": "no.such"}, "invalid_filter", "kind='no.such' is not one of"),
        ({"status": "failed", "agentId": 7}, "invalid_agentId", "agentId must be a string"),
        ({"status": "failed", "since": "yesterday"}, "invalid_since", "since must be ms"),
        ({"status": "failed", "until": True}, "invalid_until", "until must be ms"),
        ({"status": "failed", "limit": 0}, "invalid_limit", "limit must be an integer from 1"),
        ({"status": "failed", "limit": 5_001}, "invalid_limit", "1 to 5000"),
        ({"status": "failed", "cursor": "%%%"}, "invalid_cursor", "cursor is not one"),
        ({"status": "failed", "includeCanceled": True}, "invalid_includeCanceled", "with jobIds"),
        ({"jobIds": []}, "invalid_job_ids", "a list of 1 to 1000 job ids"),
        ({"jobIds": "j-1"}, "invalid_job_ids", "a list of 1 to 1000 job ids"),
        ({"jobIds": ["ok", "a b"]}, "invalid_job_ids", "jobIds[1] is not a job id"),
        ({"jobIds": ["x"] * 1001}, "invalid_job_ids", "a list of 1 to 1000"),
        ({"jobIds": ["x"], "status": "failed"}, "invalid_job_ids", "not both (status with"),
    ],
)
def test_bad_input_to_a_bulk_retry_is_400_naming_the_field_and_writes_nothing(
    api, body, code, text
):
    failed_job()
    before = written()
    status, out = api.post("/jobs/retry", body)
    assert (status, out["error"]) == (400, code), out
    assert text in out["detail"]
    assert written() == before


def test_get_jobs_retry_still_reads_a_job_named_retry(api):
    status, out = api.get("/jobs/retry")
    assert (status, out["error"]) == (404, "job_not_found")
    queue.enqueue("factory", job_payload(), job_id="retry", now_ms=T)
    status, out = api.get("/jobs/retry")
    assert (status, out["id"]) == (200, "retry")
    fence = Fence("chat:h:1", 1)
    queue.lease("retry", worker_id=fence.worker_id, now_ms=T + 1)
    queue.fail("retry", "boom", fence=fence, no_retry=True, now_ms=T + 2)
    status, out = api.post("/jobs/retry/retry", {})  # and it can be retried by its own path
    assert (status, out["job"]["status"]) == (202, "queued")


def test_the_schema_documents_both_operations(api):
    response = api.client.get("/api/schema/", {"format": "json"}, **api.headers())
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert set(paths["/jobs/{job_id}/retry"]) == {"post"}
    assert set(paths["/jobs/retry"]) == {"post"}
    assert paths["/jobs/retry"]["post"]["operationId"] == "retry_jobs"
