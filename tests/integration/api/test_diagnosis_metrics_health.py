"""D-12 over HTTP, X-2 /metrics, A-8 runtime blocks of /healthz."""

import re

import pytest

from access.models import ApiToken
from jobs import queue
from jobs.runtime import counters, loops, processes
from jobs.runtime.loops import Report
from receipts.clock import now_ms
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db


def bearer(**options):
    _, secret = ApiToken.issue(name="t", **options)
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def test_diagnosis_endpoint_names_blockers_and_respects_organizations(client):
    job = queue.enqueue("nobody", payload()).job
    response = client.get(f"/jobs/{job.job_id}/diagnosis", **bearer())
    assert response.status_code == 200
    body = response.json()
    assert body["jobId"] == job.job_id and body["status"] == "queued"
    assert {"no_handler", "no_live_process"} <= {b["code"] for b in body["blockers"]}
    other = client.get(f"/jobs/{job.job_id}/diagnosis", **bearer(organization_id="org-2"))
    assert other.status_code == 404 and other.json()["error"] == "job_not_found"


def test_metrics_needs_a_token_and_reports_gauges_and_counters(client):
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", **bearer(scopes=["jobs:write"])).status_code == 403
    queue.enqueue("factory", payload(), lane="chat")
    counters.incr("receipt_attempt_outcomes_total", 2, status="completed")
    counters.flush(force=True)
    text = client.get("/metrics", **bearer()).content.decode()
    assert 'receipt_jobs_active{status="queued",lane="chat",group="chat"} 1' in text
    assert "# TYPE receipt_attempt_outcomes_total counter" in text
    assert 'receipt_attempt_outcomes_total{status="completed"}' in text


def test_metrics_job_gauges_are_bounded_and_say_so(client, monkeypatch):
    """X-2 at any queue length: each active series stops at its cap, which is published
    beside it; the oldest queued job's age is exact; settled counts cover the last hour."""
    from jobs import counts

    monkeypatch.setattr(counts, "CELL_CAP", 2)
    monkeypatch.setattr(counts, "STATUS_CAP", 3)
    now = now_ms()
    for minutes in (30, 20, 10, 5):
        queue.enqueue("factory", payload(), lane="chat", now_ms=now - minutes * 60_000)
    old = queue.enqueue("factory", payload(), now_ms=now - 3 * 3_600_000).job.job_id
    queue.cancel(old, reason="t", now_ms=now - 2 * 3_600_000)
    text = client.get("/metrics", **bearer()).content.decode()
    assert 'receipt_jobs_active{status="queued",lane="chat",group="chat"} 2' in text
    assert "receipt_jobs_count_cap 2" in text and "counted up to 2 per series" in text
    assert 'receipt_jobs_active_by_status{status="queued"} 3' in text
    assert 'receipt_jobs_active_by_status{status="running"} 0' in text
    assert "receipt_jobs_status_count_cap 3" in text
    age = re.search(r'^receipt_jobs_oldest_queued_age_seconds\{lane="chat"\} (\S+)$', text, re.M)
    assert age and 1800 <= float(age.group(1)) < 1900
    assert "receipt_jobs_settled_last_hour{" not in text  # canceled two hours ago


def test_healthz_lists_loops_and_processes_and_flags_a_fallback_role(client):
    now = now_ms()
    pid = processes.register(
        role="all",
        group=None,
        concurrency=0,
        now_ms=now,
        info={"warning": "RECEIPT_PROCESS_ROLE='chatt' is not a role"},
    )
    loops.record(
        "queued_redrive",
        pid,
        started_ms=now,
        finished_ms=now + 5,
        report=Report("queued_redrive", acted=3),
        error=None,
    )
    body = client.get("/healthz", **bearer()).json()
    assert body["loops"][0]["loop"] == "queued_redrive" and body["loops"][0]["acted"] == 3
    assert body["clusters"][0]["role"] == "all" and body["clusters"][0]["live"] is True
    assert body["degraded"] is True and "chatt" in body["warnings"][0]


def test_metrics_for_an_organization_bound_token_show_only_that_organization(client):
    """X-2 with Q-2: an organization's token sees its own job figures, nothing of another
    organization's, and none of the platform-wide series."""
    queue.enqueue("factory", payload(), lane="chat")  # org-1
    other = dict(payload(), authContext={"userId": "u-2", "organizationId": "org-2"})
    queue.enqueue("factory", other, lane="collect")
    queue.enqueue("factory", other, lane="collect")
    processes.register(role="all", group=None, concurrency=0, now_ms=now_ms())
    counters.incr("receipt_attempt_outcomes_total", 2, status="completed")
    counters.flush(force=True)
    mine = client.get("/metrics", **bearer(organization_id="org-1")).content.decode()
    assert 'receipt_jobs_active{status="queued",lane="chat",group="chat"} 1' in mine
    assert 'lane="collect"' not in mine
    assert "receipt_worker_processes" not in mine and "receipt_attempt_outcomes_total" not in mine
    everyone = client.get("/metrics", **bearer()).content.decode()
    assert 'receipt_jobs_active{status="queued",lane="collect",group="chat"} 2' in everyone
    assert 'receipt_worker_processes{role="all"} 1' in everyone


def test_the_kind_contract_table_is_readable_through_the_api(client):
    """K-3: the one table in code, served as is, to any token that may read jobs."""
    from jobs.core.contracts import KINDS

    assert client.get("/kinds").status_code == 401
    assert client.get("/kinds", **bearer(scopes=["jobs:write"])).status_code == 403
    response = client.get("/kinds", **bearer(organization_id="org-1", scopes=["jobs:read"]))
    assert response.status_code == 200
    rows = {row["kind"]: row for row in response.json()["kinds"]}
    assert list(rows) == [*KINDS, "django.task"]  # the task backend's (issue 33 item 2)
    task = rows["django.task"]
    assert (task["workerGroup"], task["authContextRequired"], task["builtIn"]) == (
        "chat",
        False,
        False,
    )
    assert rows["factory.task.run"] == {
        "kind": "factory.task.run",
        "workerGroup": "codex",
        "durableWorkflow": None,
        "durableActivity": True,
        "objectiveScoped": True,
        "reconcileOnTerminalOrExpiredLease": True,
        "liveExecution": True,
        "terminalObjectiveAudit": False,
        "authContextRequired": True,
        "builtIn": True,
    }
    assert rows["factory.objective.control"]["durableWorkflow"] == "objective-control"
    assert rows["factory.objective.control"]["terminalObjectiveAudit"] is True
    assert rows["factory.dispatch"]["workerGroup"] == "control"


def test_metrics_has_an_append_latency_histogram(client):
    """X-2: append latency as a Prometheus histogram, by stream family, from real appends."""
    import re

    queue.enqueue("factory", payload())
    queue.enqueue("factory", payload())
    counters.flush(force=True)
    text = client.get("/metrics", **bearer()).content.decode()
    assert "# TYPE receipt_append_seconds histogram" in text
    buckets = [
        (m.group(1), float(m.group(2)))
        for m in re.finditer(
            r'^receipt_append_seconds_bucket\{family="jobs",le="([^"]+)"\} (\S+)$', text, re.M
        )
    ]
    bounds = [bound for bound, _ in buckets]
    assert bounds[-1] == "+Inf" and bounds[:-1] == [f"{b:g}" for b in counters.APPEND_BUCKETS]
    counts = [count for _, count in buckets]
    assert counts == sorted(counts) and counts[-1] >= 2  # cumulative, every append counted
    total = re.search(r'^receipt_append_seconds_count\{family="jobs"\} (\S+)$', text, re.M)
    seconds = re.search(r'^receipt_append_seconds_sum\{family="jobs"\} (\S+)$', text, re.M)
    assert total and float(total.group(1)) == counts[-1]
    assert seconds and 0 < float(seconds.group(1)) < 60
    assert (
        "receipt_append_seconds_bucket"
        not in client.get("/metrics", **bearer(organization_id="org-1")).content.decode()
    )
