"""U-7: only staff reach the jobs admin, viewing needs jobs.view_job, acting needs
jobs.change_job, verify and replay need the receipts permissions; nothing is added or
deleted here. A refused action writes nothing."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from jobs import queue
from jobs.models import DeliveryPromise, Job
from receipts import store
from tests.integration.admin.conftest import CHANGELIST, NOW, enqueue, grant, job_url, text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]
DASHBOARD = "/admin/jobs/job/dashboard/"
DASHBOARD_JSON = "/admin/jobs/job/dashboard.json"


def count(job_id: str) -> int:
    return len(store.read(f"jobs/{job_id}"))


def test_anonymous_users_are_sent_to_the_login(client):
    job_id = enqueue()
    for url in (CHANGELIST, job_url(job_id), DASHBOARD, DASHBOARD_JSON):
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


def test_staff_without_permissions_sees_nothing(bare_staff_client):
    job_id = enqueue()
    for url in (CHANGELIST, job_url(job_id), DASHBOARD, DASHBOARD_JSON):
        assert bare_staff_client.get(url).status_code == 403, url
    assert bare_staff_client.post(job_url(job_id), {"action": "abort"}).status_code == 403
    assert queue.get(job_id).status == "queued"


def test_viewer_sees_the_pages_but_no_action_forms(viewer_client):
    job_id = enqueue()
    assert viewer_client.get(CHANGELIST).status_code == 200
    assert viewer_client.get(DASHBOARD).status_code == 200
    assert viewer_client.get(DASHBOARD_JSON).status_code == 200
    page = text(viewer_client.get(job_url(job_id)))
    for form in (
        "rcpt-abort-form",
        "rcpt-steer-form",
        "rcpt-follow-up-form",
        "rcpt-redrive-form",
        "rcpt-verify-form",
        "rcpt-replay-form",
    ):
        assert f'id="{form}"' not in page, form
    assert "acting on it needs the “Can change job” permission" in page
    assert 'value="abort_selected"' not in text(viewer_client.get(CHANGELIST))


@pytest.mark.parametrize(
    ("action", "data"),
    [
        ("abort", {"reason": "no"}),
        ("steer", {"payload": "{}"}),
        ("follow_up", {"payload": "{}"}),
        ("redrive", {}),
        ("replay", {"dry_run": "0"}),
        ("verify", {}),
    ],
)
def test_viewer_cannot_act(viewer_client, action, data):
    job_id = enqueue()
    Job.objects.filter(pk=job_id).update(status="completed")  # drift a replay would repair
    response = viewer_client.post(job_url(job_id), {"action": action, **data})
    assert response.status_code == 403
    assert count(job_id) == 1
    assert Job.objects.get(pk=job_id).status == "completed"
    assert not DeliveryPromise.objects.exists()


@pytest.mark.parametrize("action", ["abort_selected", "redrive_selected"])
def test_viewer_cannot_run_bulk_actions(viewer_client, action):
    job_id = enqueue()
    response = viewer_client.post(
        CHANGELIST, {"action": action, "post": "yes", "index": 0, ACTION_CHECKBOX_NAME: [job_id]}
    )
    assert response.status_code == 200  # the list again: a viewer has no actions to run
    assert count(job_id) == 1 and not DeliveryPromise.objects.exists()


def test_change_permission_allows_the_job_actions_only(viewer, viewer_client):
    grant(viewer, "jobs", "change_job")
    job_id = enqueue()
    page = text(viewer_client.get(job_url(job_id)))
    assert 'id="rcpt-abort-form"' in page and 'id="rcpt-verify-form"' not in page
    assert viewer_client.post(job_url(job_id), {"action": "verify"}).status_code == 403
    assert viewer_client.post(job_url(job_id), {"action": "replay"}).status_code == 403
    viewer_client.post(job_url(job_id), {"action": "abort", "reason": "ok"})
    last = store.read(f"jobs/{job_id}")[-1]
    assert last.type == "job.canceled" and last.body["by"] == "viewer"


def test_verify_and_replay_need_their_receipts_permissions(viewer, viewer_client):
    job_id = enqueue(now_ms=NOW)
    grant(viewer, "receipts", "verify_stream")
    response = viewer_client.post(job_url(job_id), {"action": "verify"})
    assert response.status_code == 200 and "Chain verified." in text(response)
    assert viewer_client.post(job_url(job_id), {"action": "replay"}).status_code == 403
    grant(viewer, "receipts", "replay_stream")
    response = viewer_client.post(job_url(job_id), {"action": "replay", "dry_run": "1"})
    assert response.status_code == 200 and "no drift" in text(response)


def test_no_add_and_no_delete(admin_client):
    job_id = enqueue()
    assert admin_client.get("/admin/jobs/job/add/").status_code == 403
    assert admin_client.post(f"{job_url(job_id)[: -len('change/')]}delete/").status_code == 403
    assert Job.objects.filter(pk=job_id).exists()
