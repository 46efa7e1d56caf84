"""A-8: /healthz carries queue depth by status, one cached GROUP BY per process."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import queue
from receipt_site import health
from tests.integration.api.conftest import payload

pytestmark = pytest.mark.django_db

QUEUE_KEYS = {"total", "queued", "leased", "running", "completed", "failed", "canceled",
              "updatedAt"}


def test_healthz_reports_queue_depth_and_stable_placeholders(anonymous):
    first = queue.enqueue("factory", payload()).job.job_id
    queue.enqueue("factory", payload())
    queue.cancel(first, reason="test")
    out = anonymous.client.get("/healthz").json()
    assert out["ok"] is True and out["ready"] is True
    assert set(out["queue"]) == QUEUE_KEYS
    assert out["queue"]["total"] == 2 and out["queue"]["queued"] == 1
    assert out["queue"]["canceled"] == 1 and out["queue"]["running"] == 0
    assert out["loops"] == [] and out["clusters"] == []
    assert out["database"]["ok"] is True


def test_queue_counts_are_cached_active_every_2s_settled_every_60s(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(health.time, "monotonic", lambda: clock[0])
    with CaptureQueriesContext(connection) as queries:
        assert health.queue_counts()["total"] == 0
    assert len(queries) == 2 and all("GROUP BY" in q["sql"].upper() for q in queries)
    job = queue.enqueue("factory", payload()).job
    with CaptureQueriesContext(connection) as queries:
        clock[0] += 1.9
        assert health.queue_counts()["total"] == 0  # still cached
    assert len(queries) == 0
    clock[0] += 0.2
    with CaptureQueriesContext(connection) as queries:
        assert health.queue_counts()["queued"] == 1
    assert len(queries) == 1  # only the active statuses: an indexed, small range
    queue.abort(job.job_id)
    clock[0] += 2.1
    assert health.queue_counts()["canceled"] == 0  # settled counts refresh every 60 s
    clock[0] += 60
    assert health.queue_counts()["canceled"] == 1


def test_queue_counts_survive_a_database_error(monkeypatch):
    def broken():
        raise RuntimeError("db down")

    monkeypatch.setattr(health, "_count_queue", broken)
    block = health.queue_counts()
    assert block["error"] == "RuntimeError" and block["total"] is None
