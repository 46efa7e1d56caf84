"""Issue 34 item 3: retrying failed jobs from the admin: the job page's Retry button and
the changelist's bulk action over the selection or every job the filters match, with a
confirmation page saying how many. Every retry is signed `by = <admin username>`."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from jobs import queue, retry
from jobs.admin import actions
from receipts import store
from tests.integration.admin.conftest import CHANGELIST, job_url, text, words
from tests.integration.jobs.retry_builders import T, failed_job, job_payload, running_job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]


def last(job_id: str):
    return store.read(f"jobs/{job_id}")[-1]


# ---- the job page ------------------------------------------------------------------------


def test_the_job_page_retries_a_failed_job_and_shows_who_did(admin_client):
    job_id = failed_job(error="model timed out")
    page = text(admin_client.get(job_url(job_id)))
    assert 'id="rcpt-retry-form"' in page
    response = admin_client.post(job_url(job_id), {"action": "retry", "reason": "try again"})
    assert response.status_code == 302 and response["Location"] == job_url(job_id)
    receipt = last(job_id)
    assert (receipt.type, receipt.body["by"], receipt.body["reason"]) == (
        "job.retried",
        "admin",
        "try again",
    )
    assert queue.get(job_id).status == "queued"
    shown = words(admin_client.get(job_url(job_id)))
    assert "Job retried (retry 1): queued with 1 fresh attempt(s)" in shown
    assert "Retried 1 time; last retried by admin at " in shown
    assert "after attempt 1 (model timed out); attempt 2 is its new budget" in shown
    assert "job.retried" in shown  # the timeline's entry
    assert "retried retried by admin at" in shown  # and diagnosis names the retry


def test_the_job_page_offers_no_retry_for_a_running_or_completed_job(admin_client):
    job_id, fence = running_job()
    assert 'id="rcpt-retry-form"' not in text(admin_client.get(job_url(job_id)))
    response = admin_client.post(job_url(job_id), {"action": "retry"})
    assert response.status_code == 200
    assert (
        f"retry not sent: job {job_id} is running; only a failed or canceled job can be "
        "retried Nothing was written."
    ) in words(response)
    queue.complete(job_id, "ok", fence=fence)
    assert 'id="rcpt-retry-form"' not in text(admin_client.get(job_url(job_id)))


def test_a_canceled_job_page_retries_it_with_its_explicit_button(admin_client):
    job_id = queue.enqueue("factory", job_payload(), now_ms=T).job.job_id
    queue.abort(job_id, by="ops")
    page = text(admin_client.get(job_url(job_id)))
    assert "Retry (it was canceled)" in page
    admin_client.post(job_url(job_id), {"action": "retry", "include_canceled": "1"})
    assert last(job_id).body["fromStatus"] == "canceled"
    assert queue.get(job_id).status == "queued"


def test_a_viewer_cannot_retry(viewer_client):
    job_id = failed_job()
    page = text(viewer_client.get(job_url(job_id)))
    assert 'id="rcpt-retry-form"' not in page
    assert viewer_client.post(job_url(job_id), {"action": "retry"}).status_code == 403
    assert queue.get(job_id).status == "failed"


# ---- the bulk action ----------------------------------------------------------------------


def test_the_bulk_action_confirms_how_many_then_retries_the_selected_failed_jobs(admin_client):
    failed = [failed_job(at_ms=T + n) for n in range(2)]
    held = running_job()[0]
    selected = [*failed, held]
    confirm = admin_client.post(
        CHANGELIST, {"action": "retry_selected", ACTION_CHECKBOX_NAME: selected, "index": 0}
    )
    assert confirm.status_code == 200
    assert "2 failed jobs are selected." in words(confirm)
    assert 'id="rcpt-include-canceled"' not in text(confirm)  # no canceled job selected
    assert {queue.get(j).status for j in failed} == {"failed"}  # nothing before the yes

    response = admin_client.post(
        CHANGELIST,
        {
            "action": "retry_selected",
            "post": "yes",
            ACTION_CHECKBOX_NAME: selected,
            "reason": "provider recovered",
        },
    )
    assert response.status_code == 302
    for job_id in failed:
        receipt = last(job_id)
        assert (receipt.type, receipt.body["by"]) == ("job.retried", "admin")
        assert receipt.body["reason"] == "provider recovered"
    assert queue.get(held).status == "running"
    assert "Retried 2 job(s) in 1 batch(es)." in words(admin_client.get(CHANGELIST))


def test_select_across_retries_every_job_the_filters_match(admin_client):
    runs = [failed_job(at_ms=T + n) for n in range(3)]
    dispatch_job = failed_job(kind="factory.dispatch", at_ms=T + 9)
    canceled = queue.enqueue("factory", job_payload(), now_ms=T + 10).job.job_id
    queue.abort(canceled, by="ops")
    filtered = f"{CHANGELIST}?kind=factory.run"
    confirm = admin_client.post(
        filtered,
        {
            "action": "retry_selected",
            "select_across": "1",
            "index": 0,
            ACTION_CHECKBOX_NAME: runs[:1],
        },
    )
    assert "3 failed jobs match the filters, and 1 canceled." in words(confirm)
    assert 'name="select_across" value="1"' in text(confirm)
    response = admin_client.post(
        filtered,
        {
            "action": "retry_selected",
            "post": "yes",
            "select_across": "1",
            ACTION_CHECKBOX_NAME: runs[:1],
        },
    )
    assert response.status_code == 302
    assert {queue.get(j).status for j in runs} == {"queued"}
    assert queue.get(dispatch_job).status == "failed"  # outside the filter
    assert queue.get(canceled).status == "canceled"  # not asked for
    admin_client.post(
        filtered,
        {
            "action": "retry_selected",
            "post": "yes",
            "select_across": "1",
            "include_canceled": "1",
            ACTION_CHECKBOX_NAME: runs[:1],
        },
    )
    assert queue.get(canceled).status == "queued"


def test_a_run_stops_at_its_limit_and_says_so(admin_client, monkeypatch):
    monkeypatch.setattr(actions, "RETRY_RUN_LIMIT", 2)
    ids = [failed_job(at_ms=T + n) for n in range(3)]
    admin_client.post(
        CHANGELIST,
        {"action": "retry_selected", "post": "yes", ACTION_CHECKBOX_NAME: ids},
    )
    assert [queue.get(j).status for j in ids] == ["queued", "queued", "failed"]
    page = words(admin_client.get(CHANGELIST))
    assert "This run stopped after 2 jobs; more may match." in page


def test_the_confirmation_counts_no_further_than_its_cap(admin_client, monkeypatch):
    monkeypatch.setattr(actions, "RETRY_COUNT_CAP", 2)
    ids = [failed_job(at_ms=T + n) for n in range(3)]
    confirm = admin_client.post(
        CHANGELIST, {"action": "retry_selected", ACTION_CHECKBOX_NAME: ids, "index": 0}
    )
    assert "2+ failed jobs are selected." in words(confirm)


def test_a_retried_jobs_attempts_count_on_to_its_new_last_one(admin_client):
    job_id = failed_job(max_attempts=2)
    assert "2/2" in words(admin_client.get(f"{CHANGELIST}?q=id:{job_id}"))
    retry.retry_job(job_id, by="ops")
    assert "2/4" in words(admin_client.get(f"{CHANGELIST}?q=id:{job_id}"))
    page = words(admin_client.get(job_url(job_id)))
    assert "Attempt 2 / 4 (2 since its latest retry, after attempt 2)" in page
