"""The store-wide log in the admin (issue 36 item 7): each receipt on the job page and the
stream page says which checkpoint holds it and offers its inclusion proof, which the
offline checks accept; the dashboard shows the latest checkpoint's size and age."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from jobs import dashboard
from receipts import checkpoints, log, store
from receipts.admin_kit import stream_url
from receipts.core.checkpoint import from_wire
from receipts.core.log_proofs import inclusion_fault, inclusion_from_wire
from tests.integration.admin.conftest import NOW, enqueue, job_url, text, words

pytestmark = pytest.mark.django_db


def checkpoint(at: int) -> checkpoints.Stored:
    log.extend(now_ms=at)
    made = checkpoints.make(now_ms=at, force=True)
    assert made is not None
    return made


def test_the_job_page_shows_each_receipts_checkpoint_and_its_proof_verifies(admin_client):
    job = enqueue()
    made = checkpoint(NOW + 1)
    later = enqueue(now_ms=NOW + 2)
    page = admin_client.get(job_url(job))
    assert page.status_code == 200
    assert "checkpoint #1 · proof" in words(page)
    [link] = re.findall(r'href="([^"]+/inclusion/)"', text(page))
    download = admin_client.get(link)
    assert download.status_code == 200
    assert download["Content-Disposition"].startswith('attachment; filename="inclusion-jobs_')
    proof = inclusion_from_wire(json.loads(download.content))
    assert proof.leaf == store.read(f"jobs/{job}")[0].hash
    assert inclusion_fault(proof, from_wire(made.to_wire())) is None
    # a receipt after the last checkpoint has no checkpoint yet, nor a proof link
    assert "not in the log yet" in words(admin_client.get(job_url(later)))


def test_the_stream_page_shows_the_log_column_too(admin_client):
    store.append("t/s", {"type": "t.step"}, now_ms=NOW)
    log.extend(now_ms=NOW)
    assert "no checkpoint yet" in words(admin_client.get(stream_url("t/s")))
    checkpoint(NOW + 1)
    assert "checkpoint #1 · proof" in words(admin_client.get(stream_url("t/s")))


def test_a_proof_download_of_an_unknown_receipt_is_not_found(admin_client):
    missing = reverse("admin:receipts_receipt_inclusion", args=("99999",))
    assert admin_client.get(missing).status_code == 404
    nonsense = reverse("admin:receipts_receipt_inclusion", args=("abc",))
    assert admin_client.get(nonsense).status_code == 404


def test_the_dashboard_shows_the_latest_checkpoints_size_and_age(admin_client, monkeypatch):
    page = admin_client.get("/admin/jobs/job/dashboard/")
    assert "Latest checkpoint none yet" in words(page)
    enqueue()
    made = checkpoint(NOW)
    monkeypatch.setattr(dashboard, "wall_clock_ms", lambda: NOW + 90_000)
    data = admin_client.get("/admin/jobs/job/dashboard.json").json()
    assert data["log"] == {
        "leaves": made.checkpoint.tree_size,
        "checkpoint": {
            "number": 1,
            "treeSize": made.checkpoint.tree_size,
            "ageMs": 90_000,
            "ageText": "90 s",
            "signed": False,
        },
    }
    shown = words(admin_client.get("/admin/jobs/job/dashboard/"))
    size = made.checkpoint.tree_size
    assert re.search(rf"Latest checkpoint # ?1 ?, ?{size} ?receipts, unsigned", shown), shown[-600:]
    assert "Its age 90 s" in shown
