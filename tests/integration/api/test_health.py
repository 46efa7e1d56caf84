"""A-8: /healthz carries queue depth by status, one cached GROUP BY per process; Q-1:
without credentials it answers status and counts only."""

from __future__ import annotations

import os
import socket

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import counts, queue
from jobs.models import WorkerProcess
from jobs.runtime import loops, processes
from jobs.runtime.loops import Report
from receipt_site import health
from receipts.clock import now_ms
from tests.integration.api.conftest import payload

pytestmark = pytest.mark.django_db
MINUTE = 60_000
HOUR = 60 * MINUTE

QUEUE_KEYS = {
    "total",
    "capped",
    "countCap",
    "settledCap",
    "settledWindowMs",
    "queued",
    "leased",
    "running",
    "completed",
    "failed",
    "canceled",
    "updatedAt",
}


def test_healthz_reports_queue_depth_and_stable_placeholders(anonymous):
    first = queue.enqueue("factory", payload()).job.job_id
    queue.enqueue("factory", payload())
    queue.cancel(first, reason="test")
    out = anonymous.client.get("/healthz").json()
    assert out["ok"] is True and out["ready"] is True
    assert set(out["queue"]) == QUEUE_KEYS
    assert out["queue"]["total"] == 2 and out["queue"]["queued"] == 1
    assert out["queue"]["canceled"] == 1 and out["queue"]["running"] == 0
    assert out["runtime"] == {
        "processesLive": 0,
        "processesGone": 0,
        "loops": 0,
        "loopsFailing": 0,
        "jobsHeldByGone": 0,
    }
    assert out["database"]["ok"] is True and out["detail"] is False


def job_reads(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "jobs_job" in q["sql"].lower()]


def test_queue_counts_are_cached_active_every_2s_settled_every_60s(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(health.time, "monotonic", lambda: clock[0])
    with CaptureQueriesContext(connection) as queries:
        assert health.queue_counts()["total"] == 0
    reads = job_reads(queries)  # (on PostgreSQL also the settings of the index walk)
    assert len(reads) == 2  # each count stops at its cap + 1: a LIMIT inside the COUNT
    assert all("LIMIT" in sql.upper() for sql in reads)
    assert "GROUP BY" not in " ".join(sql.upper() for sql in reads)
    job = queue.enqueue("factory", payload()).job
    with CaptureQueriesContext(connection) as queries:
        clock[0] += 1.9
        assert health.queue_counts()["total"] == 0  # still cached
    assert len(queries) == 0
    clock[0] += 0.2
    with CaptureQueriesContext(connection) as queries:
        assert health.queue_counts()["queued"] == 1
    assert len(job_reads(queries)) == 1  # only the active statuses: an indexed, small range
    queue.abort(job.job_id)
    clock[0] += 2.1
    assert health.queue_counts()["canceled"] == 0  # settled counts refresh every 60 s
    clock[0] += 60
    assert health.queue_counts()["canceled"] == 1


def test_settled_counts_cover_the_last_hour_only():
    """A-8: a probe never counts the settled history: a job settled two hours ago is not
    counted, one settled a minute ago is, and the block says over which window."""
    now = now_ms()
    old = queue.enqueue("factory", payload(), now_ms=now - 3 * HOUR).job.job_id
    queue.cancel(old, reason="test", now_ms=now - 2 * HOUR)
    recent = queue.enqueue("factory", payload(), now_ms=now - 2 * MINUTE).job.job_id
    queue.cancel(recent, reason="test", now_ms=now - MINUTE)
    queue.enqueue("factory", payload())
    block = health.queue_counts()
    assert (block["canceled"], block["queued"], block["total"]) == (1, 1, 2)
    assert block["settledWindowMs"] == HOUR and block["capped"] == []


def test_counts_past_the_cap_are_flagged(monkeypatch, anonymous):
    """A count that reached its cap says so: `capped` names the status, the value is the
    cap (at least that many), and the rest stay exact."""
    monkeypatch.setattr(counts, "STATUS_CAP", 2)
    for _ in range(3):
        queue.enqueue("factory", payload())
    block = anonymous.client.get("/healthz").json()["queue"]
    assert (block["queued"], block["capped"], block["countCap"]) == (2, ["queued"], 2)
    assert block["leased"] == 0 and block["total"] == 2


def test_queue_counts_survive_a_database_error(monkeypatch):
    def broken(organization_id):
        raise RuntimeError("db down")

    monkeypatch.setattr(health, "_count_queue", broken)
    block = health.queue_counts()
    assert block["error"] == "RuntimeError" and block["total"] is None


@pytest.fixture
def runtime_rows():
    """A live runworker with a loop row, a gone one with a loop row and a job it still holds."""
    now = now_ms()
    live = processes.register(role="worker-chat", group="chat", concurrency=2, now_ms=now)
    gone_since = now - processes.GONE_AFTER_BEATS * processes.BEAT_MS - 1000
    gone = WorkerProcess.objects.create(
        id="worker-codex:gone-host.internal:4242",
        role="worker-codex",
        group="codex",
        host="gone-host.internal",
        pid=4242,
        concurrency=1,
        started_at=gone_since - 60_000,
        last_seen=gone_since,
    )
    for process in (live, gone.id):
        loops.record(
            "queued_redrive",
            process,
            started_ms=now - 10,
            finished_ms=now,
            report=Report("queued_redrive", acted=1),
            error=None,
        )
    job = queue.enqueue("codex", payload("factory.task.run")).job.job_id
    assert queue.lease(job, worker_id="codex:gone-host.internal:4242", now_ms=now - 5000).applied
    return {"live": live, "gone": gone.id, "job": job}


def test_open_healthz_answers_status_and_counts_only(anonymous, runtime_rows, settings):
    """A-8, Q-1: without credentials no data directory, host name, PID or job id."""
    response = anonymous.client.get("/healthz")
    out = response.json()
    assert out["detail"] is False and out["degraded"] is True
    assert out["runtime"] == {
        "processesLive": 1,
        "processesGone": 1,
        "loops": 1,
        "loopsFailing": 0,
        "jobsHeldByGone": 1,
    }
    assert out["warnings"] == [
        "1 job(s) held by 1 gone process(es); a live worker releases "
        "them, else their leases run out"
    ]
    assert "loops" not in out and "clusters" not in out and "heldByGone" not in out
    assert set(out["database"]) == {"ok", "vendor"}
    raw = response.content.decode()
    for secret in (
        socket.gethostname(),
        "gone-host.internal",
        runtime_rows["job"],
        str(settings.RECEIPT.data_dir),
        str(settings.DATABASES["default"]["NAME"]),
    ):
        assert secret not in raw, secret
    assert not {os.getpid(), 4242} & set(numbers(out)), "a PID in the open answer"


def numbers(value):
    """Every number in a JSON value (a PID would be one)."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


@pytest.mark.parametrize("who", ["token", "staff"])
def test_healthz_with_credentials_shows_live_loops_and_jobs_held_by_gone(
    who, anonymous, issue, admin_user, runtime_rows
):
    """A-8, L-6, D-11: a token or a staff session sees where things run; loop rows of gone
    processes are left out, and the jobs a gone process still holds are named."""
    headers = {}
    if who == "token":
        headers = {"HTTP_AUTHORIZATION": f"Bearer {issue('ops')}"}
    else:
        anonymous.client.force_login(admin_user)
    out = anonymous.client.get("/healthz", **headers).json()
    assert out["detail"] is True and "target" in out["database"]
    assert [(r["loop"], r["process"]) for r in out["loops"]] == [
        ("queued_redrive", runtime_rows["live"])
    ]
    assert {c["id"]: c["live"] for c in out["clusters"]} == {
        runtime_rows["live"]: True,
        runtime_rows["gone"]: False,
    }
    [held] = out["heldByGone"]
    assert (held["process"], held["jobIds"]) == (runtime_rows["gone"], [runtime_rows["job"]])
    assert out["warnings"] == [
        f"{runtime_rows['gone']} is gone and still holds 1 job(s): {runtime_rows['job']}"
    ]


def test_a_bad_token_gets_the_open_answer(anonymous):
    """Q-1: health always answers; a token that does not verify shows nothing more."""
    response = anonymous.client.get("/healthz", HTTP_AUTHORIZATION="Bearer rcpt_nope")
    assert response.status_code == 200 and response.json()["detail"] is False


def test_readyz_shows_the_database_target_to_credentials_only(anonymous, issue):
    """Q-1: the target names the data directory (SQLite) or the database host."""
    assert set(anonymous.client.get("/readyz").json()["database"]) == {"ok", "vendor"}
    shown = anonymous.client.get("/readyz", HTTP_AUTHORIZATION=f"Bearer {issue('ops')}")
    assert "target" in shown.json()["database"]


def test_an_organization_bound_token_sees_its_own_counts_and_no_detail(
    anonymous, issue, runtime_rows, settings
):
    """Q-2: a token bound to an organization gets the open answer, with the queue counted
    over its own organization's jobs only: no other organization's job ids, no hosts, no
    PIDs, no platform-wide counts."""
    queue.enqueue("factory", payload(org="org-2"))
    queue.enqueue("factory", payload(org="org-2"))
    everyone = anonymous.client.get("/healthz").json()["queue"]
    assert (everyone["total"], everyone["queued"], everyone["leased"]) == (3, 2, 1)
    for org, expected in (("org-1", (1, 0, 1)), ("org-2", (2, 2, 0)), ("org-3", (0, 0, 0))):
        token = issue(f"tenant-{org}", org=org)
        response = anonymous.client.get("/healthz", HTTP_AUTHORIZATION=f"Bearer {token}")
        out = response.json()
        assert out["detail"] is False, org
        assert "loops" not in out and "clusters" not in out and "heldByGone" not in out
        assert set(out["database"]) == {"ok", "vendor"}
        block = out["queue"]
        assert (block["total"], block["queued"], block["leased"]) == expected, org
        assert block["organization"] == org
        raw = response.content.decode()
        for secret in (
            socket.gethostname(),
            "gone-host.internal",
            runtime_rows["job"],
            str(settings.RECEIPT.data_dir),
        ):
            assert secret not in raw, (org, secret)
        assert not {os.getpid(), 4242} & set(numbers(out)), "a PID in a tenant's answer"
        ready = anonymous.client.get("/readyz", HTTP_AUTHORIZATION=f"Bearer {token}")
        assert set(ready.json()["database"]) == {"ok", "vendor"}


def test_detail_needs_the_jobs_read_scope(anonymous, issue, runtime_rows):
    """An unbound token that may only submit work is not an operator's: open answer."""
    token = issue("submitter", scopes=["jobs:write"])
    out = anonymous.client.get("/healthz", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert out["detail"] is False and "heldByGone" not in out
    assert "organization" not in out["queue"] and out["queue"]["total"] == 1


def test_a_staff_user_allowed_to_view_jobs_sees_detail(anonymous, runtime_rows):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="jobs", codename="view_job")
    )
    anonymous.client.force_login(user)
    out = anonymous.client.get("/healthz").json()
    assert out["detail"] is True and out["heldByGone"][0]["jobIds"] == [runtime_rows["job"]]


def test_a_staff_user_without_view_job_gets_the_open_answer(anonymous, runtime_rows):
    """Q-1: a staff session is an operator's only as far as its permissions go."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("bare-staff", password="pw", is_staff=True)
    anonymous.client.force_login(user)
    out = anonymous.client.get("/healthz").json()
    assert out["detail"] is False and "heldByGone" not in out and "loops" not in out
    assert runtime_rows["job"] not in str(out)


def test_a_child_failing_at_startup_under_runstack_shows_degraded(anonymous, api, settings):
    """P-3: runstack's supervisor reports a child that fails at startup the same way every
    time; /healthz shows it degraded, the cause for operators only."""
    import sys
    from pathlib import Path

    from receipt_site import supervision
    from tests.conftest import wait_for

    cause = "OSError: [Errno 98] address already in use"
    child = supervision.Child("codex", [sys.executable, "-c", f"import sys; sys.exit({cause!r})"])
    status = Path(settings.DATA_DIR) / supervision.STATUS_FILE
    supervisor = supervision.Supervisor([child], status_path=status, stop_grace_s=5)
    now = 0.0
    supervisor.start_all(now)
    try:
        assert anonymous.client.get("/healthz").json()["degraded"] is False
        for _ in range(supervision.FAILING_AFTER):
            wait_for(lambda: child.process is not None and child.process.poll() is not None)
            now += 0.5
            supervisor.step(now)  # sees the exit
            now += child.backoff_s or 0
            supervisor.step(now)  # restarts it
        open_answer = anonymous.client.get("/healthz").json()
        assert open_answer["degraded"] is True
        assert open_answer["warnings"] == [
            "the codex process fails at startup every time; the runstack output names the cause"
        ]
        detailed = api.client.get("/healthz", **api.headers()).json()
        assert detailed["warnings"] == [f"codex fails at startup every time: {cause}"]
    finally:
        supervisor.stop_all()
    assert anonymous.client.get("/healthz").json()["degraded"] is False
