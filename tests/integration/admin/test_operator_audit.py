"""U-3: redrive, replay and verify write no job receipt of their own, so each is recorded on
the target's audit stream (`audit/<stream>`) with `by` = the admin user (or
`cli:<OS user>` from the command line), and the job page lists them."""

from __future__ import annotations

import getpass
import logging
from io import StringIO

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from jobs import queue
from jobs import redrive as redrive_service
from jobs.models import DeliveryPromise, Job
from receipts import audit, store
from tests.integration.admin.conftest import CHANGELIST, NOW, enqueue, job_url, words

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]


def actions(job_id: str) -> list[dict]:
    return [r.body for r in store.read(f"audit/jobs/{job_id}")]


def act(client, job_id: str, action: str, **data):
    return client.post(job_url(job_id), {"action": action, **data})


def test_redrive_is_recorded_with_the_admin_and_shown_on_the_job_page(admin_client):
    """U-3: "redriven by admin", on the job's audit stream; the job stream is untouched."""
    job_id = enqueue()
    before = store.stream_info(f"jobs/{job_id}")
    act(admin_client, job_id, "redrive")
    [record] = actions(job_id)
    assert record["type"] == "operator.redriven" and record["by"] == "admin"
    assert record["target"] == f"jobs/{job_id}" and record["started"] is True
    assert record["promiseId"].startswith(f"{job_id}:redrive:manual:")
    assert store.stream_info(f"jobs/{job_id}") == before  # updated_at, L-1's keys: unchanged
    page = words(admin_client.get(job_url(job_id)))
    section = page[page.index("Operator actions") :]
    assert f"redriven: driver delivery {record['promiseId']} started · by admin" in section


def test_verify_and_replay_are_recorded_with_their_outcome(admin_client):
    """U-3: verify and replay (dry run or not) each leave a receipt with `by`."""
    job_id = enqueue()
    Job.objects.filter(pk=job_id).update(status="completed")  # drift for the replay
    act(admin_client, job_id, "verify")
    act(admin_client, job_id, "replay", dry_run="1")
    act(admin_client, job_id, "replay", dry_run="0")
    verified, dry, real = actions(job_id)
    assert (verified["type"], verified["ok"], verified["count"], verified["by"]) == (
        "operator.verified",
        True,
        1,
        "admin",
    )
    assert (dry["type"], dry["dryRun"], dry["drift"]) == ("operator.replayed", True, 1)
    assert (real["dryRun"], real["drift"], real["by"]) == (False, 1, "admin")
    page = words(admin_client.get(job_url(job_id)))
    section = page[page.index("Operator actions") :]
    assert (
        section.index("replayed (read model rebuilt): 1 row(s) drifted · by admin")
        < (section.index("replay dry run: 1 row(s) drifted · by admin"))
        < section.index("chain verified: ok, 1 receipts · by admin")
    )  # newest first


def test_bulk_redrive_records_each_started_job(admin_client):
    """U-3: the changelist's bulk redrive records one receipt per job it started."""
    queued = enqueue(now_ms=NOW)
    held = enqueue(now_ms=NOW + 1)
    assert queue.lease(held, worker_id="chat:h:1", now_ms=NOW + 2).applied
    admin_client.post(
        CHANGELIST, {"action": "redrive_selected", ACTION_CHECKBOX_NAME: [queued, held], "index": 0}
    )
    [record] = actions(queued)
    assert record["type"] == "operator.redriven" and record["by"] == "admin"
    assert actions(held) == []


def test_job_page_bulk_action_and_cli_redrive_alike(admin_client, monkeypatch):
    """U-3, P-4: one service behind all three: the same dispatch key format, the same
    audit receipt (body and context) and the same delivery."""
    at = NOW + 5000
    monkeypatch.setattr(redrive_service, "wall_clock_ms", lambda: at)
    page, changelist, cli = (enqueue(now_ms=NOW + i) for i in range(3))
    act(admin_client, page, "redrive")
    admin_client.post(
        CHANGELIST, {"action": "redrive_selected", ACTION_CHECKBOX_NAME: [changelist], "index": 0}
    )
    out = {"stdout": StringIO(), "stderr": StringIO()}
    call_command("jobs", "redrive", cli, "--by", "admin", **out)
    for job_id in (page, changelist, cli):
        key = f"{job_id}:redrive:manual:{at}"
        [record] = store.read(f"audit/jobs/{job_id}")
        assert record.body == {
            "type": "operator.redriven",
            "target": f"jobs/{job_id}",
            "by": "admin",
            "started": True,
            "promiseId": key,
            "reason": None,
        }
        assert record.context == {"actor": "admin"} and record.ts == at
        [promise] = DeliveryPromise.objects.filter(job_id=job_id)
        assert (promise.id, promise.dispatch_key, promise.state) == (key, key, "pending")


def test_job_page_bulk_action_and_cli_refuse_a_leased_job_alike(admin_client):
    """U-3, P-4: one refusal for a job that is not queued, and nothing written."""
    job_id = enqueue()
    assert queue.lease(job_id, worker_id="chat:h:1", now_ms=NOW + 1).applied
    sentence = (
        f"job {job_id} is leased; only a queued job can be redriven "
        "(an expired lease is requeued by the lease expiry loop)"
    )
    assert sentence in words(act(admin_client, job_id, "redrive"))
    admin_client.post(
        CHANGELIST, {"action": "redrive_selected", ACTION_CHECKBOX_NAME: [job_id], "index": 0}
    )
    assert f"Skipped 1 job(s) that are not queued: {job_id} (leased)" in words(
        admin_client.get(CHANGELIST)
    )
    with pytest.raises(CommandError) as refused:
        call_command("jobs", "redrive", job_id, stdout=StringIO(), stderr=StringIO())
    assert str(refused.value) == f"job_not_queued: {sentence}"
    assert actions(job_id) == []
    assert not DeliveryPromise.objects.filter(job_id=job_id).exists()


def test_stream_page_verify_and_replay_are_recorded(admin_client):
    """U-3, U-4: the streams browser's verify and replay go on the same audit stream."""
    job_id = enqueue()
    url = reverse("admin:receipts_stream_change", args=(quote(f"jobs/{job_id}"),))
    admin_client.post(url, {"action": "verify"})
    admin_client.post(url, {"action": "replay", "dry_run": "1"})
    assert [(r["type"], r["by"]) for r in actions(job_id)] == [
        ("operator.verified", "admin"),
        ("operator.replayed", "admin"),
    ]


def test_verify_and_replay_are_logged_with_who_from_either_page(admin_client, caplog):
    """The job page and the streams browser log the same events, each naming the operator."""
    job_id = enqueue()
    stream_page = reverse("admin:receipts_stream_change", args=(quote(f"jobs/{job_id}"),))
    with caplog.at_level(logging.INFO):
        act(admin_client, job_id, "verify")
        act(admin_client, job_id, "replay", dry_run="1")
        admin_client.post(stream_page, {"action": "verify"})
        admin_client.post(stream_page, {"action": "replay", "dry_run": "1"})
    logged = [(r.event, r.getMessage(), r.by) for r in caplog.records if hasattr(r, "event")]
    stream = f"jobs/{job_id}"
    assert [entry for entry in logged if entry[0].startswith("admin.")] == [
        ("admin.job_verified", f"admin verified {stream}", "admin"),
        ("admin.job_replayed", f"admin replayed {stream}", "admin"),
        ("admin.stream_verified", f"admin verified {stream}", "admin"),
        ("admin.stream_replayed", f"admin replayed {stream}", "admin"),
    ]


def test_the_command_line_records_as_cli_user():
    """U-3, P-4: `jobs redrive` and `receipts verify|replay` record `by = cli:<OS user>`."""
    job_id = enqueue()
    out = {"stdout": StringIO(), "stderr": StringIO()}
    call_command("jobs", "redrive", job_id, **out)
    call_command("receipts", "verify", f"jobs/{job_id}", **out)
    call_command("receipts", "replay", f"jobs/{job_id}", "--dry-run", **out)
    by = f"cli:{getpass.getuser()}"
    assert [(r["type"], r["by"]) for r in actions(job_id)] == [
        ("operator.redriven", by),
        ("operator.verified", by),
        ("operator.replayed", by),
    ]
    call_command("receipts", "verify", "jobs/", "--by", "ops", **out)  # a prefix
    [prefix] = [r.body for r in store.read("audit/jobs/*")]
    assert (prefix["by"], prefix["streams"], prefix["broken"]) == ("ops", 1, [])


def test_an_audit_stream_is_its_own_audit_stream():
    """U-3: auditing an audit stream never grows an `audit/audit/...` chain."""
    assert audit.stream_for("jobs/j-1") == "audit/jobs/j-1"
    assert audit.stream_for("audit/jobs/j-1") == "audit/jobs/j-1"
    long_name = "x/" + "y" * 253
    assert len(audit.stream_for(long_name)) <= store.MAX_STREAM_NAME
