"""U-3: actions on the job page and the changelist. Writes go through the queue, dispatch
and store services, and every receipt an operator causes carries `by = <username>`."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client

from jobs import queue
from jobs.admin import actions
from jobs.models import DeliveryPromise, Job
from receipts import store
from receipts.models import Receipt as ReceiptRow
from tests.integration.admin.conftest import CHANGELIST, NOW, enqueue, job_url, text, words

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]


def receipts(job_id: str):
    return store.read(f"jobs/{job_id}")


def act(client, job_id: str, action: str, **data):
    return client.post(job_url(job_id), {"action": action, **data})


def leased(job_id: str) -> str:
    assert queue.lease(job_id, worker_id="chat:h:1", now_ms=NOW + 1000).applied
    return job_id


# ---- abort -----------------------------------------------------------------------------------


def test_abort_cancels_a_queued_job_as_the_admin(admin_client, admin_user):
    job_id = enqueue()
    response = act(admin_client, job_id, "abort", reason="operator says stop")
    assert response.status_code == 302 and response["Location"] == job_url(job_id)
    last = receipts(job_id)[-1]
    assert last.type == "job.canceled"
    assert last.body["by"] == admin_user.get_username() == "admin"
    assert last.body["reason"] == "operator says stop"
    assert last.context["actor"] == "admin"
    assert queue.get(job_id).status == "canceled"
    assert "Job canceled" in words(admin_client.get(job_url(job_id)))


def test_abort_on_a_leased_job_sends_an_abort_command(admin_client):
    job_id = leased(enqueue())
    act(admin_client, job_id, "abort")
    last = receipts(job_id)[-1]
    assert last.type == "queue.command"
    assert last.body["command"] == "abort" and last.body["by"] == "admin"
    assert last.body["payload"] == {"reason": "abort requested"}
    job = queue.get(job_id)
    assert job.status == "leased" and job.abort_requested


def test_abort_of_a_settled_job_is_refused_and_writes_nothing(admin_client):
    job_id = enqueue()
    queue.abort(job_id, by="someone")
    before = len(receipts(job_id))
    response = act(admin_client, job_id, "abort")
    assert response.status_code == 200
    assert "abort not sent: job " in words(
        response
    ) and "is already canceled; nothing to abort" in words(response)
    assert len(receipts(job_id)) == before


# ---- steer / follow-up -----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["steer", "follow_up"])
def test_steer_and_follow_up_append_a_command_with_the_payload(admin_client, command):
    job_id = leased(enqueue())
    response = act(admin_client, job_id, command, payload='{"message": "look left", "n": 2}')
    assert response.status_code == 302
    last = receipts(job_id)[-1]
    assert last.type == "queue.command"
    assert last.body["command"] == command and last.body["lane"] == command
    assert last.body["payload"] == {"message": "look left", "n": 2}
    assert last.body["by"] == "admin"
    assert queue.get(job_id).pending_commands[0].command == command


@pytest.mark.parametrize("payload", ['{"message": ', "not json", "", "   "])
def test_steer_with_invalid_json_writes_nothing(admin_client, payload):
    job_id = leased(enqueue())
    before = len(receipts(job_id))
    response = act(admin_client, job_id, "steer", payload=payload)
    assert response.status_code == 200
    page = words(response)
    assert "steer not sent:" in page and "Nothing was written." in page
    assert len(receipts(job_id)) == before
    if payload.strip():  # the operator's text comes back for fixing
        assert f">{payload}</textarea>" in text(response)


def test_steer_of_a_settled_job_writes_nothing(admin_client):
    job_id = enqueue()
    queue.abort(job_id)
    before = len(receipts(job_id))
    response = act(admin_client, job_id, "steer", payload="{}")
    assert "job is canceled; continue through its objective" in words(response)
    assert len(receipts(job_id)) == before


# ---- redrive ---------------------------------------------------------------------------------


def test_redrive_starts_a_driver_delivery_under_a_manual_key(admin_client):
    job_id = enqueue()
    response = act(admin_client, job_id, "redrive")
    assert response.status_code == 302
    [promise] = DeliveryPromise.objects.filter(job_id=job_id)
    assert promise.function == "driver" and promise.state == "pending"
    assert promise.id.startswith(f"{job_id}:redrive:manual:")
    assert promise.dispatch_key == promise.id
    page = words(admin_client.get(job_url(job_id)))
    assert f"Driver delivery {promise.id} started." in page


def test_redrive_twice_starts_two_deliveries_and_says_one_was_pending(admin_client):
    job_id = enqueue()
    act(admin_client, job_id, "redrive")
    act(admin_client, job_id, "redrive")
    assert DeliveryPromise.objects.filter(job_id=job_id, function="driver").count() == 2
    assert "still pending" in words(admin_client.get(job_url(job_id)))


def test_redrive_of_a_leased_job_is_refused(admin_client):
    job_id = leased(enqueue())
    response = act(admin_client, job_id, "redrive")
    assert response.status_code == 200
    assert "only a queued job can be redriven" in words(response)
    assert not DeliveryPromise.objects.filter(job_id=job_id).exists()


# ---- replay / verify -------------------------------------------------------------------------


def test_replay_shows_the_drift_and_repairs_the_row(admin_client):
    job_id = enqueue()
    Job.objects.filter(pk=job_id).update(status="completed")
    dry = act(admin_client, job_id, "replay", dry_run="1")
    page = words(dry)
    assert "Replay dry run: the job row differed from its receipts (nothing written)" in page
    assert "status" in page and '"completed"' in page and '"queued"' in page
    assert Job.objects.get(pk=job_id).status == "completed"

    real = act(admin_client, job_id, "replay", dry_run="0")
    assert "Read model rebuilt: the job row differed from its receipts and was rewritten" in words(
        real
    )
    assert Job.objects.get(pk=job_id).status == "queued"
    again = act(admin_client, job_id, "replay", dry_run="0")
    assert "no drift: the job row equals the fold of its receipts" in words(again)


def test_verify_reports_ok_then_the_hash_mismatch_after_tampering(admin_client):
    job_id = leased(enqueue())
    ok = act(admin_client, job_id, "verify")
    assert ok.status_code == 200
    assert "Chain verified. ok: 2 receipts" in words(ok)
    ReceiptRow.objects.filter(stream=f"jobs/{job_id}", stream_seq=1).update(
        body={"type": "job.enqueued", "forged": True}
    )
    bad = act(admin_client, job_id, "verify")
    assert "Chain broken: hash mismatch at index 0" in words(bad)
    assert 'class="rcpt-row rcpt-row-unverified rcpt-row-broken"' in text(bad)


def test_unknown_action_is_a_bad_request(admin_client):
    job_id = enqueue()
    assert act(admin_client, job_id, "explode").status_code == 400


def test_csrf_stays_on(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    job_id = enqueue()
    assert act(client, job_id, "abort").status_code == 403
    assert queue.get(job_id).status == "queued"


# ---- bulk actions ----------------------------------------------------------------------------


def bulk(client, action: str, ids: list[str], **data):
    return client.post(
        CHANGELIST, {"action": action, ACTION_CHECKBOX_NAME: ids, "index": 0, **data}
    )


def test_bulk_abort_asks_for_a_reason_then_aborts_each_job(admin_client):
    queued = enqueue(now_ms=NOW)
    held = leased(enqueue(now_ms=NOW + 1))
    done = enqueue(now_ms=NOW + 2)
    queue.abort(done)
    confirm = bulk(admin_client, "abort_selected", [queued, held, done])
    assert confirm.status_code == 200
    assert "Abort 3 jobs?" in words(confirm) and 'name="reason"' in text(confirm)
    assert queue.get(queued).status == "queued"  # nothing happens before the confirmation

    response = admin_client.post(
        CHANGELIST,
        {
            "action": "abort_selected",
            "post": "yes",
            ACTION_CHECKBOX_NAME: [queued, held, done],
            "reason": "maintenance",
        },
    )
    assert response.status_code == 302
    canceled = receipts(queued)[-1]
    assert canceled.type == "job.canceled" and canceled.body["by"] == "admin"
    assert canceled.body["reason"] == "maintenance"
    command = receipts(held)[-1]
    assert command.type == "queue.command" and command.body["by"] == "admin"
    assert command.body["payload"]["reason"] == "maintenance"
    page = words(admin_client.get(CHANGELIST))
    assert "1 queued job(s) canceled, abort command sent to 1 leased/running job(s)" in page
    assert f"Skipped 1: {done} (job {done} is already canceled" in page


def test_bulk_redrive_starts_queued_jobs_and_skips_the_rest(admin_client):
    queued = enqueue(now_ms=NOW)
    held = leased(enqueue(now_ms=NOW + 1))
    response = bulk(admin_client, "redrive_selected", [queued, held])
    assert response.status_code == 302
    assert DeliveryPromise.objects.filter(job_id=queued, function="driver").count() == 1
    assert not DeliveryPromise.objects.filter(job_id=held).exists()
    page = words(admin_client.get(CHANGELIST))
    assert "Redrive started for 1 queued job(s)." in page
    assert f"Skipped 1 job(s) that are not queued: {held} (leased)" in page


def test_bulk_actions_refuse_more_than_the_limit(admin_client, monkeypatch):
    monkeypatch.setattr(actions, "BULK_LIMIT", 2)
    ids = [enqueue(now_ms=NOW + i) for i in range(3)]
    response = admin_client.post(
        CHANGELIST,
        {
            "action": "abort_selected",
            "post": "yes",
            "select_across": "1",
            "index": 0,
            ACTION_CHECKBOX_NAME: ids[:1],
        },
    )
    assert response.status_code == 302
    assert all(queue.get(i).status == "queued" for i in ids)
    assert "More than 2 jobs selected" in words(admin_client.get(CHANGELIST))
