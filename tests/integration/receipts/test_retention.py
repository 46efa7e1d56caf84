"""Retention (issue 12): settled job streams past their window are removed, and what
remains still proves itself (tombstones committed to by the `retention/jobs` chain)."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.urls import reverse

from access.models import ApiToken
from jobs import queue, retention
from jobs.core.retention import Windows
from jobs.core.state import Fence
from jobs.management.commands.runworker import maintenance_loops
from jobs.models import Callback, DeliveryPromise, Job
from objectives.models import ObjectiveSummary
from receipts import retention as receipt_retention
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from receipts.core.retention import DAY_MS, PRUNED
from receipts.models import Receipt, Stream, Tombstone
from tests.conftest import run_in_threads

pytestmark = pytest.mark.django_db

NOW = 1_900_000_000_000
WINDOWS = Windows(default_days=30, watchdog_days=2, control_days=7)


def payload(kind: str = "factory.run", org: str = "org-1", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "authContext": {"userId": "u-1", "organizationId": org}, **extra}


def settled(
    *, days_ago: float, kind: str = "factory.run", org: str = "org-1", now: int = NOW, **extra: Any
) -> str:
    """A job enqueued, run and completed `days_ago` days before `now`."""
    at = now - int(days_ago * DAY_MS)
    job_id = queue.enqueue("factory", payload(kind, org=org, **extra), now_ms=at).job.job_id
    queue.lease(job_id, worker_id="w", now_ms=at)
    queue.complete(job_id, {"ok": True}, fence=Fence("w", 1), now_ms=at)
    return job_id


def canceled(*, days_ago: float, now: int = NOW, **extra: Any) -> str:
    at = now - int(days_ago * DAY_MS)
    job_id = queue.enqueue("factory", payload(**extra), now_ms=at).job.job_id
    queue.cancel(job_id, reason="not needed", now_ms=at)
    return job_id


def objective(objective_id: str, status: str, *, active: bool) -> None:
    ObjectiveSummary.objects.create(
        id=objective_id,
        title="t",
        status=status,
        phase="plan",
        mode="delivery",
        section="active",
        active=active,
        created_at=NOW,
        updated_at=NOW,
        head="0" * 64,
        state={},
    )


def prune(**options: Any) -> retention.PruneReport:
    return retention.prune(now_ms=NOW, windows=WINDOWS, **options)


def exists(job_id: str) -> bool:
    return Job.objects.filter(pk=job_id).exists() or store.stream_info(f"jobs/{job_id}") is not None


def test_prune_removes_settled_streams_past_their_window_and_keeps_the_rest():
    old = settled(days_ago=40)
    old_canceled = canceled(days_ago=31)
    recent = settled(days_ago=10)
    watchdog = settled(days_ago=3, kind="factory.objective.watchdog")
    control = settled(days_ago=3, kind="factory.objective.control")
    active = queue.enqueue("factory", payload(), now_ms=NOW - 40 * DAY_MS).job.job_id
    objective("obj-running", "executing", active=True)
    objective("obj-unaudited", "completed", active=True)
    objective("obj-done", "completed", active=False)
    held = settled(days_ago=40, objectiveId="obj-running")
    unaudited = settled(days_ago=40, objectiveId="obj-unaudited")
    of_done = settled(days_ago=40, objectiveId="obj-done")
    DeliveryPromise.objects.create(
        id=f"{old}:driver",
        function="driver",
        job_id=old,
        target_group="control",
        dispatch_key="k",
        state="resolved",
        timeout_at=NOW,
        created_at=NOW,
    )
    Callback.objects.create(
        job_id=old,
        event="completed",
        url="http://x",
        body={},
        state="delivered",
        created_at=NOW,
        give_up_at=NOW,
    )
    counts = store.stream_info(f"jobs/{old}").count

    report = prune()

    assert report.acted == 4 and report.errors == []
    assert report.by_family == {"default": 3, "watchdog": 1}
    for gone in (old, old_canceled, watchdog, of_done):
        assert not exists(gone)
        assert not Receipt.objects.filter(stream=f"jobs/{gone}").exists()
    for kept in (recent, control, active, held, unaudited):
        assert exists(kept) and store.verify(f"jobs/{kept}").ok
    assert not DeliveryPromise.objects.filter(job_id=old).exists()
    assert not Callback.objects.filter(job_id=old).exists()
    tombstone = receipt_retention.tombstone_of(f"jobs/{old}")
    assert tombstone is not None
    assert (
        tombstone.receipt_count,
        tombstone.final_status,
        tombstone.organization_id,
        tombstone.agent_id,
        tombstone.kind,
        tombstone.pruned_at_ms,
    ) == (counts, "completed", "org-1", "factory", "factory.run", NOW)
    assert tombstone.settled_at_ms == NOW - 40 * DAY_MS
    assert receipt_retention.tombstone_of(f"jobs/{old_canceled}").final_status == "canceled"


def test_every_batch_is_committed_on_the_retention_chain_and_verify_passes():
    pruned = [settled(days_ago=40) for _ in range(3)]
    prune()
    chain = store.read(retention.RETENTION_STREAM)
    assert [r.type for r in chain] == [PRUNED]
    body = chain[0].body
    assert body["count"] == 3 and body["windowsDays"] == WINDOWS.as_dict()
    assert body["receipts"] == sum(t.receipt_count for t in Tombstone.objects.all())
    assert set(Tombstone.objects.values_list("stream", flat=True)) == {f"jobs/{j}" for j in pruned}
    assert store.verify(retention.RETENTION_STREAM).ok
    assert receipt_retention.verify() == []
    out = StringIO()
    call_command("receipts", "verify", "--strict", "--json", stdout=out)
    assert json.loads(out.getvalue())["retention"] == []


def test_an_edited_tombstone_is_reported_by_verify():
    job_id = settled(days_ago=40)
    prune()
    Tombstone.objects.filter(stream=f"jobs/{job_id}").update(final_status="failed")
    issues = receipt_retention.verify()
    assert [i.stream for i in issues] == [retention.RETENTION_STREAM]
    assert "edited" in issues[0].reason
    with pytest.raises(CommandError):
        call_command("receipts", "verify", "--strict", stdout=StringIO())


def test_a_removed_or_an_added_tombstone_is_reported_by_verify():
    first, second = settled(days_ago=40), settled(days_ago=40)
    prune()
    Tombstone.objects.filter(stream=f"jobs/{first}").delete()
    assert "removed or added" in receipt_retention.verify()[0].reason
    Tombstone.objects.create(
        stream=f"jobs/{first}",
        family="default",
        receipt_count=1,
        head="0" * 64,
        final_status="completed",
        settled_at=0,
        pruned_at=0,
        retention_stream=retention.RETENTION_STREAM,
        batch=7,
    )
    reasons = [i.reason for i in receipt_retention.verify()]
    assert any("no receipt commits to" in r for r in reasons)
    assert second  # its tombstone is untouched; the batch as a whole no longer matches


def test_a_stream_deleted_without_a_tombstone_is_reported_by_verify():
    job_id = settled(days_ago=1)
    Receipt.objects.filter(stream=f"jobs/{job_id}").delete()
    Stream.objects.filter(name=f"jobs/{job_id}").delete()
    issues = receipt_retention.verify()
    assert [(i.stream, "no tombstone" in i.reason) for i in issues] == [(f"jobs/{job_id}", True)]
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("receipts", "verify", "jobs/", "--strict", stdout=out)
    assert f"RETENTION jobs/{job_id}" in out.getvalue()


def test_a_stream_deleted_with_its_row_is_still_reported_through_its_delivery_rows():
    job_id = settled(days_ago=1)
    DeliveryPromise.objects.create(
        id=f"{job_id}:driver",
        function="driver",
        job_id=job_id,
        target_group="control",
        dispatch_key="k",
        state="resolved",
        timeout_at=NOW,
        created_at=NOW,
    )
    Stream.objects.filter(name=f"jobs/{job_id}").delete()
    reasons = sorted(i.reason for i in receipt_retention.verify())
    assert reasons == ["stream missing with no tombstone (its read-model row remains)"]
    # the receipts left without their row are a broken stream (the store's verify)
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("receipts", "verify", "--strict", stdout=out)
    assert f"BROKEN jobs/{job_id}: stream row missing: " in out.getvalue()
    Receipt.objects.filter(stream=f"jobs/{job_id}").delete()
    Job.objects.filter(pk=job_id).delete()
    issues = receipt_retention.verify()
    assert [i.stream for i in issues] == [f"jobs/{job_id}"]
    assert "delivery or callback rows" in issues[0].reason


def test_a_dry_run_writes_nothing():
    for _ in range(3):
        settled(days_ago=40)
    before = (
        Job.objects.count(),
        Stream.objects.count(),
        Receipt.objects.count(),
        Tombstone.objects.count(),
    )
    report = prune(dry_run=True)
    assert report.acted == 3 and report.dry_run and report.receipts > 0
    assert (
        Job.objects.count(),
        Stream.objects.count(),
        Receipt.objects.count(),
        Tombstone.objects.count(),
    ) == before


def test_batches_are_bounded_and_a_pass_stops_after_its_batch_set():
    jobs = [settled(days_ago=40 + i / 100) for i in range(7)]
    first = prune(batch_streams=3, max_batches=1)
    assert (first.acted, first.batches, first.complete) == (3, 1, False)
    rest = prune(batch_streams=3)
    assert (rest.acted, rest.batches, rest.complete) == (4, 2, True)
    assert [r.body["count"] for r in store.read(retention.RETENTION_STREAM)] == [3, 3, 1]
    assert not any(exists(j) for j in jobs)
    assert receipt_retention.verify() == []


def test_a_paced_prune_pauses_between_its_batches_only_when_it_writes(monkeypatch):
    jobs = [settled(days_ago=40 + i / 100) for i in range(5)]
    pauses: list[float] = []
    monkeypatch.setattr(retention, "_sleep", pauses.append)
    assert prune(batch_streams=2, pause_s=0.25, dry_run=True).acted == 5
    assert pauses == []
    report = prune(batch_streams=2, pause_s=0.25)
    assert (report.acted, report.batches) == (5, 3) and pauses == [0.25] * 3
    assert not any(exists(j) for j in jobs)


def test_the_prune_command_refuses_a_negative_pause():
    with pytest.raises(CommandError, match="--pause-ms"):
        call_command("receipts", "prune", "--pause-ms", "-1")


def test_a_batch_stops_at_its_receipt_cap():
    for _ in range(3):
        settled(days_ago=40)  # three receipts each: enqueued, leased, completed
    report = prune(batch_receipts=5)
    assert report.acted == 3 and report.batches == 3  # one stream per batch


def test_a_second_pass_prunes_nothing_more():
    for _ in range(4):
        settled(days_ago=40)
    assert prune().acted == 4
    again = prune()
    assert (again.acted, again.batches) == (0, 0)
    assert len(store.read(retention.RETENTION_STREAM)) == 1


def test_an_older_than_override_applies_to_every_family():
    recent = settled(days_ago=5)
    assert prune().acted == 0
    assert prune(older_than_days=4).acted == 1 and not exists(recent)


def test_the_loop_runs_the_same_service_in_bounded_passes(settings):
    assert "retention" in [loop.name for loop in maintenance_loops(settings.RECEIPT)]
    now = wall_clock_ms()
    settled(days_ago=40, now=now)
    report = retention.prune_pass(now_ms=now)
    assert (report.name, report.acted, report.errors) == ("retention", 1, [])


def test_get_job_of_a_pruned_job_answers_410_with_its_tombstone():
    job_id = settled(days_ago=40)
    head = store.stream_info(f"jobs/{job_id}").head
    prune()
    _, own = ApiToken.issue(name="own", organization_id="org-1")
    _, other = ApiToken.issue(name="other", organization_id="org-2")
    response = Client().get(f"/jobs/{job_id}", HTTP_AUTHORIZATION=f"Bearer {own}")
    assert response.status_code == 410
    body = response.json()
    assert (body["ok"], body["error"]) == (False, "job_pruned")
    assert body["tombstone"]["head"] == head and body["tombstone"]["finalStatus"] == "completed"
    assert body["tombstone"]["jobId"] == job_id and body["tombstone"]["receiptCount"] == 3
    hidden = Client().get(f"/jobs/{job_id}", HTTP_AUTHORIZATION=f"Bearer {other}")
    assert (hidden.status_code, hidden.json()["error"]) == (404, "job_not_found")
    unknown = Client().get("/jobs/never-was", HTTP_AUTHORIZATION=f"Bearer {own}")
    assert unknown.status_code == 404


def test_the_admin_page_of_a_pruned_job_shows_its_tombstone(admin_client):
    job_id = settled(days_ago=40)
    head = store.stream_info(f"jobs/{job_id}").head
    prune()
    response = admin_client.get(reverse("admin:jobs_job_change", args=(quote(job_id),)))
    assert response.status_code == 410
    text = response.content.decode()
    assert "Pruned on" in text and "after 3 receipts" in text and head in text
    assert "final status <strong>completed</strong>" in text
    missing = admin_client.get(reverse("admin:jobs_job_change", args=("never-was",)))
    assert missing.status_code == 404


def test_the_prune_command_prints_counts_and_its_dry_run_writes_nothing():
    now = wall_clock_ms()
    settled(days_ago=40, now=now)
    out = StringIO()
    call_command("receipts", "prune", "--dry-run", "--json", stdout=out)
    answer = json.loads(out.getvalue())
    assert answer["dryRun"] and answer["families"][0]["pruned"] == 1
    assert not Tombstone.objects.exists()
    out = StringIO()
    call_command("receipts", "prune", "--by", "ops", stdout=out)
    assert "jobs: pruned 1 stream(s)" in out.getvalue()
    assert store.read(retention.RETENTION_STREAM)[0].context == {"actor": "ops"}


@pytest.mark.django_db(transaction=True)
def test_concurrent_passes_prune_each_stream_once():
    jobs = [settled(days_ago=40 + i / 100) for i in range(12)]
    reports = run_in_threads(3, lambda i: prune(batch_streams=4))
    assert sum(r.acted for r in reports) == len(jobs)
    assert Tombstone.objects.count() == len(jobs)
    assert len(set(Tombstone.objects.values_list("stream", flat=True))) == len(jobs)
    assert not any(exists(j) for j in jobs)
    assert store.verify(retention.RETENTION_STREAM).ok
    assert receipt_retention.verify() == []
    assert sum(r.body["count"] for r in store.read(retention.RETENTION_STREAM)) == len(jobs)
    if connection.vendor == "postgresql":
        assert all(not r.errors for r in reports)
