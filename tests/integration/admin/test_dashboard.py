"""U-6: the dashboard HTML and its JSON snapshot, with exact numbers for a small seeded
set, and queries that stay on the status indexes (no full-table COUNT)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import counts, dashboard, queue, queues
from jobs.core.state import Fence
from jobs.models import WorkerProcess
from jobs.runtime import loops, processes, recovery
from jobs.runtime.loops import Report
from tests.integration.admin.conftest import NOW, enqueue, job_url, text

pytestmark = pytest.mark.django_db
MINUTE = 60_000
T = NOW + 10 * MINUTE  # the dashboard's "now"
DASHBOARD = "/admin/jobs/job/dashboard/"
DASHBOARD_JSON = "/admin/jobs/job/dashboard.json"


def settle(job_id: str, how: str, at: int) -> None:
    worker = "chat:h:1"
    assert queue.lease(job_id, worker_id=worker, now_ms=at - 1).applied
    fence = Fence(worker, 1)
    if how == "completed":
        assert queue.complete(job_id, {"ok": True}, fence=fence, now_ms=at).applied
    else:
        assert queue.fail(job_id, "boom", fence=fence, no_retry=True, now_ms=at).applied


@pytest.fixture
def seeded(monkeypatch) -> dict[str, str]:
    monkeypatch.setattr(dashboard, "wall_clock_ms", lambda: T)
    jobs = {
        "a": enqueue("factory", now_ms=NOW),  # queued, collect, chat
        "b": enqueue("factory", now_ms=NOW + MINUTE),  # queued, collect, chat
        "c": enqueue("codex", "factory.task.run", now_ms=NOW + 2 * MINUTE, lane="chat"),
        "d": enqueue("factory", now_ms=NOW + 3 * MINUTE),  # -> leased
        "e": enqueue("factory-control", "factory.objective.control", now_ms=NOW + 3 * MINUTE),
        "f": enqueue("factory", now_ms=NOW),  # -> completed 2 min ago
        "g": enqueue("factory", now_ms=NOW - 40 * MINUTE),  # -> failed 30 min ago
        "h": enqueue("factory", now_ms=NOW),  # -> canceled 1 min ago
        "i": enqueue("factory", now_ms=NOW - 3 * 60 * MINUTE),  # -> completed 2 h ago
    }
    queue.lease(jobs["d"], worker_id="chat:h:2", now_ms=T - MINUTE)
    queue.lease(jobs["e"], worker_id="control:h:3", now_ms=T - MINUTE)
    queue.heartbeat(jobs["e"], fence=Fence("control:h:3", 1), now_ms=T - 30_000)
    settle(jobs["f"], "completed", T - 2 * MINUTE)
    settle(jobs["g"], "failed", T - 30 * MINUTE)
    queue.command(jobs["h"], "abort", reason="stop", by="ops", now_ms=T - MINUTE)
    settle(jobs["i"], "completed", T - 2 * 60 * MINUTE)
    live = processes.register(role="worker-chat", group="chat", concurrency=4, now_ms=T - 1000)
    gone = processes.register(role="driver", group=None, concurrency=1, now_ms=T - MINUTE)
    for process in (live, gone):  # L-6: only the live process's row is shown
        loops.record(
            "queued_redrive",
            process,
            started_ms=T - 5000,
            finished_ms=T - 4800,
            report=Report("queued_redrive", examined=3, acted=2, errors=["x: boom"]),
            error=None,
        )
    return {**jobs, "driver_process": gone, "chat_process": live}


def test_snapshot_numbers(seeded):
    data = dashboard.snapshot(now_ms=T)
    exact = {"capped": False}
    assert data["depth"]["cells"] == [
        {"status": "queued", "lane": "chat", "group": "codex", "count": 1, "shown": "1", **exact},
        {"status": "queued", "lane": "collect", "group": "chat", "count": 2, "shown": "2", **exact},
        {"status": "leased", "lane": "collect", "group": "chat", "count": 1, "shown": "1", **exact},
        {
            "status": "running",
            "lane": "collect",
            "group": "control",
            "count": 1,
            "shown": "1",
            **exact,
        },
    ]
    assert data["depth"]["byStatus"] == [
        {"status": "queued", "count": 3, "shown": "3", **exact},
        {"status": "leased", "count": 1, "shown": "1", **exact},
        {"status": "running", "count": 1, "shown": "1", **exact},
    ]
    assert (data["depth"]["total"], data["depth"]["totalShown"]) == (5, "5")
    assert data["depth"]["totalCapped"] is False
    assert data["depth"]["oldestQueued"] == [
        {"lane": "chat", "jobId": seeded["c"], "createdAt": NOW + 2 * MINUTE, "ageMs": 8 * MINUTE},
        {"lane": "collect", "jobId": seeded["a"], "createdAt": NOW, "ageMs": 10 * MINUTE},
    ]
    five, sixty = data["recent"]["throughput"]
    assert (five["completed"], five["failed"], five["canceled"], five["total"]) == (1, 0, 1, 2)
    assert (sixty["completed"], sixty["failed"], sixty["canceled"], sixty["total"]) == (1, 1, 1, 3)
    assert sixty["perMinute"] == 0.05
    assert {(c["status"], c["count5m"], c["count"]) for c in data["recent"]["cells"]} == {
        ("completed", 1, 1),
        ("failed", 0, 1),
        ("canceled", 1, 1),
    }
    clusters = {c["cluster"]: (c["leased"], c["running"]) for c in data["runningByCluster"]}
    assert clusters == {"worker-chat": (1, 0), "worker-control": (0, 1), "worker-codex": (0, 0)}
    assert [
        (c["group"], c["busy"], c["slots"], c["queued"], c["processes"], c["state"])
        for c in data["capacity"]
    ] == [
        ("chat", 1, 4, 2, 1, "3 free"),  # d leased against the live worker-chat's 4
        ("control", 1, 0, 0, 0, "no live process"),  # e running, and nothing serves control
        ("codex", 0, 0, 1, 0, "no live process"),
    ]
    roles = {r["role"]: (r["live"], r["gone"]) for r in data["processes"]["byRole"]}
    assert roles == {"driver": (0, 1), "worker-chat": (1, 0)}
    [loop] = data["loops"]
    assert loop["process"] == seeded["chat_process"]
    assert (loop["loop"], loop["acted"], loop["durationMs"], loop["lastError"]) == (
        "queued_redrive",
        2,
        200,
        "x: boom",
    )
    assert data["callbacks"]["records"]["pending"] == 0  # counted from the records (D-8)
    assert {"name": "JOB_LEASE_MS", "value": "300000"} in data["config"]


def test_json_endpoint_serves_the_same_snapshot(admin_client, seeded):
    body = admin_client.get(DASHBOARD_JSON).json()
    expected = dashboard.snapshot(now_ms=T, include_config=False)
    assert body == expected
    assert "config" not in body  # static: rendered once with the page


def table(page: str, table_id: str) -> list[list[str]]:
    body = re.search(rf'id="rcpt-table-{table_id}".*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    return [
        [
            " ".join(re.sub(r"<[^>]+>", " ", cell).split())
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        for row in rows
    ]


def test_dashboard_html_shows_the_numbers(admin_client, seeded):
    response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    page = text(response)
    assert table(page, "depth") == [
        ["queued", "chat", "codex", "1"],
        ["queued", "collect", "chat", "2"],
        ["leased", "collect", "chat", "1"],
        ["running", "collect", "control", "1"],
    ]
    assert table(page, "throughput") == [
        ["5m", "1", "0", "1", "2", "0.4"],
        ["60m", "1", "1", "1", "3", "0.05"],
    ]
    oldest = table(page, "oldest")
    assert oldest[1] == ["collect", seeded["a"], "10m 00s ago"]
    assert table(page, "clusters")[1] == ["worker-control", "0", "1", "1"]
    assert table(page, "capacity") == [
        ["chat", "1 / 4", "2", "1", "3 free"],
        ["control", "1 / 0", "0", "0", "no live process"],
        ["codex", "0 / 0", "1", "0", "no live process"],
    ]
    assert 'title="1 busy of 4 slots"' in page and "width: 25%" in page
    assert 'class="rcpt-usage rcpt-usage-over" title="1 busy of 0 slots"' in page
    assert 'data-source="capacity"' in page
    assert table(page, "roles") == [["driver", "0", "1", "0"], ["worker-chat", "1", "0", "4"]]
    [loop] = table(page, "loops")
    assert loop[:2] == ["queued_redrive", seeded["chat_process"]]
    assert loop[3:7] == ["200 ms", "2", "1", "x: boom"]  # duration, acted, runs, last error
    assert 'data-source="depth.cells"' in page and 'data-format="status"' in page
    assert '<script src="/static/receipt/dashboard.js" defer></script>' in page
    assert 'data-json-url="/admin/jobs/job/dashboard.json"' in page


def test_configuration_table_masks_secrets(admin_client, settings, monkeypatch):
    monkeypatch.setattr(dashboard, "wall_clock_ms", lambda: T)
    settings.RECEIPT = dataclasses.replace(
        settings.RECEIPT,
        secret_key="django-very-secret",
        callback_token="cb-secret-token",
        database_url="postgres://ops:db-password@db.internal:5432/receipt",
        event_callback_url="https://hooks.example.com/path/with-token",
    )
    page = text(admin_client.get(DASHBOARD))
    config = page[page.index('id="rcpt-config"') :]
    assert "<code>SECRET_KEY</code></td><td><code>•••• (set)</code>" in config
    assert "<code>RECEIPT_CALLBACK_TOKEN</code></td><td><code>•••• (set)</code>" in config
    assert "postgres://ops:***@db.internal:5432/receipt" in config
    for secret in ("django-very-secret", "cb-secret-token", "db-password", "with-token"):
        assert secret not in page, secret
    assert "https://hooks.example.com/••••" in page


def test_dashboard_queries_stay_on_status_indexes(admin_client, seeded):
    """Active jobs are counted with a LIMIT inside each COUNT (bounded at any queue length);
    settled ones only inside the last hour."""
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(DASHBOARD_JSON)
    on_jobs = [q["sql"].upper() for q in queries.captured_queries if "JOBS_JOB" in q["sql"].upper()]
    assert on_jobs
    for sql in on_jobs:
        where = sql.split("WHERE", 1)
        assert len(where) == 2 and "STATUS" in where[1], sql  # never the whole table
    grouped = [sql for sql in on_jobs if "GROUP BY" in sql]
    # terminal counts and the chart of the last hour, each one range per settled status
    # (one statement for all three reads the whole partial index: its own condition)
    assert len(grouped) == 2 * 3
    assert all('"UPDATED_AT" >=' in sql and '"STATUS" = ' in sql for sql in grouped)
    bounded = [sql for sql in on_jobs if "COUNT(*) FROM (SELECT 1 FROM JOBS_JOB" in sql]
    assert len(bounded) == 2  # the cells and the statuses: one statement each
    assert all("LIMIT" in sql for sql in bounded)
    # delayed jobs still ahead (issue 33 item 3): a range of the scheduled promises' index
    scheduled = [sql for sql in on_jobs if "FROM JOBS_DELIVERY_PROMISE P" in sql]
    assert len(scheduled) == 1 and "P.DUE_AT >" in scheduled[0] and "LIMIT" in scheduled[0]
    counted = grouped + bounded + scheduled
    assert not [sql for sql in on_jobs if "COUNT(" in sql and sql not in counted]


def test_counts_past_their_cap_are_shown_as_at_least(admin_client, seeded, monkeypatch):
    """A cell or status that reached its cap reads "N+" in the JSON, the first paint and
    every sum it feeds; counts under the cap stay exact."""
    monkeypatch.setattr(counts, "CELL_CAP", 1)
    monkeypatch.setattr(counts, "STATUS_CAP", 2)
    depth = dashboard.snapshot(now_ms=T)["depth"]
    collect = next(c for c in depth["cells"] if (c["lane"], c["group"]) == ("collect", "chat"))
    assert (collect["count"], collect["capped"], collect["shown"]) == (1, True, "1+")
    by_status = {row["status"]: row["shown"] for row in depth["byStatus"]}
    assert by_status == {"queued": "2+", "leased": "1", "running": "1"}
    assert (depth["total"], depth["totalCapped"], depth["totalShown"]) == (4, True, "4+")
    capacity = {c["group"]: c for c in dashboard.snapshot(now_ms=T)["capacity"]}
    assert capacity["chat"]["queuedShown"] == "1+" and capacity["codex"]["queuedShown"] == "1"
    page = text(admin_client.get(DASHBOARD))
    assert ["queued", "collect", "chat", "1+"] in table(page, "depth")
    assert ["queued", "2+"] in table(page, "by-status")
    assert table(page, "capacity")[0][:2] == ["chat", "1 / 4"]
    assert 'id="rcpt-active-total"' in page and ">4+</strong>" in page
    assert "counted up to" in page  # the page says the counts stop


def test_capacity_counts_slots_of_live_processes_only(admin_client, seeded):
    processes.register(role="worker-codex", group="codex", concurrency=1, now_ms=T - 1000)
    codex_job = enqueue("codex", "factory.task.run", now_ms=T - MINUTE)
    assert queue.lease(codex_job, worker_id="codex:h:9", now_ms=T - 30_000, start=True).applied
    gone = processes.register(
        role="worker-control",
        group="control",
        concurrency=2,
        now_ms=T - processes.GONE_AFTER_BEATS * processes.BEAT_MS - 1,
    )
    rows = {c["group"]: c for c in dashboard.snapshot(now_ms=T)["capacity"]}
    assert (rows["codex"]["busy"], rows["codex"]["slots"], rows["codex"]["state"]) == (
        1,
        1,
        "saturated",
    )
    assert rows["control"]["slots"] == 0, gone  # missed three beats: its slots are gone
    processes.stopped(processes.process_id("worker-codex"), now_ms=T - 500)
    rows = {c["group"]: c for c in dashboard.snapshot(now_ms=T)["capacity"]}
    assert (rows["codex"]["slots"], rows["codex"]["state"]) == (0, "no live process")


def test_a_paused_group_shows_who_paused_it(admin_client):
    """Issue 34 item 5: the dashboard shows paused groups."""
    queues.pause("codex", by="alice")
    page = text(admin_client.get(DASHBOARD))
    states = {row[0]: row[-1] for row in table(page, "capacity")}
    assert states["codex"] == "paused by alice" and states["chat"] == "no live process"
    rows = {c["group"]: c for c in dashboard.snapshot(now_ms=T)["capacity"]}
    assert rows["codex"]["paused"] is True and rows["chat"]["paused"] is False


def test_empty_dashboard_renders(admin_client):
    page = text(admin_client.get(DASHBOARD))
    assert "No active jobs." in page and "No runworker process seen" in page
    assert [row[-1] for row in table(page, "capacity")] == ["no live process"] * 3


def test_polls_within_two_seconds_share_one_snapshot(admin_client, seeded):
    first = admin_client.get(DASHBOARD_JSON).json()
    with CaptureQueriesContext(connection) as queries:
        second = admin_client.get(DASHBOARD_JSON).json()
    assert second == first
    assert not [q for q in queries.captured_queries if '"jobs_job"' in q["sql"]]


def test_jobs_held_by_a_gone_process_are_listed(admin_client, seeded):
    """L-6, D-11, U-6: a job whose worker id names a registered runworker that is gone is
    flagged; jobs of live or unknown workers are not."""
    WorkerProcess.objects.create(
        id="worker-codex:old-host:4242",
        role="worker-codex",
        group="codex",
        host="old-host",
        pid=4242,
        concurrency=1,
        started_at=T - 10 * MINUTE,
        last_seen=T - MINUTE,
    )
    assert queue.lease(seeded["c"], worker_id="codex:old-host:4242", now_ms=T - 2 * MINUTE).applied
    [held] = dashboard.snapshot(now_ms=T)["heldByGone"]
    assert held == {
        "process": "worker-codex:old-host:4242",
        "lastSeen": T - MINUTE,
        "stoppedAt": None,
        "jobs": 1,
        "jobIds": [seeded["c"]],
    }
    page = text(admin_client.get(DASHBOARD))
    [row] = table(page, "held")
    assert row[0] == "worker-codex:old-host:4242" and row[2:] == ["1", seeded["c"]]
    assert f'href="{job_url(seeded["c"])}"' in page


def test_a_released_gone_process_holds_nothing_and_a_healthy_registry_reads_no_jobs(seeded):
    """D-11, T-5: held-by-gone starts from the registry. Once a live worker released a
    gone runworker's holdings it is no longer listed, and with no gone runworker left
    unreleased the check never reads the jobs table (its cost does not grow with the
    number of active jobs)."""
    WorkerProcess.objects.create(
        id="worker-codex:old-host:4242",
        role="worker-codex",
        group="codex",
        host="old-host",
        pid=4242,
        concurrency=1,
        started_at=T - 10 * MINUTE,
        last_seen=T - MINUTE,
    )
    assert queue.lease(seeded["c"], worker_id="codex:old-host:4242", now_ms=T - 2 * MINUTE).applied
    assert [h["jobIds"] for h in processes.held_by_gone(now_ms=T)] == [[seeded["c"]]]
    assert recovery.release_gone_holders(now_ms=T).acted == 1
    with CaptureQueriesContext(connection) as queries:
        assert processes.held_by_gone(now_ms=T) == []
    assert [q["sql"] for q in queries.captured_queries if '"jobs_job"' in q["sql"]] == []
    assert len(queries.captured_queries) == 1


def test_chart_counts_settled_jobs_per_minute_of_the_last_hour(seeded):
    chart = dashboard.snapshot(now_ms=T)["settledPerMinute"]
    assert (chart["since"], chart["bucketMs"]) == (T - 60 * MINUTE, MINUTE)
    assert len(chart["buckets"]) == 60
    assert chart["buckets"][0]["at"] == T - 60 * MINUTE
    busy = {
        i: {s: b[s] for s in ("completed", "failed", "canceled") if b[s]}
        for i, b in enumerate(chart["buckets"])
        if b["completed"] or b["failed"] or b["canceled"]
    }
    # f completed 2 min ago, g failed 30 min ago, h canceled 1 min ago; i (2 h ago) is out
    assert busy == {30: {"failed": 1}, 58: {"completed": 1}, 59: {"canceled": 1}}


def test_chart_is_inline_svg_with_a_bar_per_settled_status(admin_client, seeded):
    page = text(admin_client.get(DASHBOARD))
    svg = re.search(r'<svg id="rcpt-chart".*?</svg>', page, re.S).group(0)
    assert svg.count('class="rcpt-chart-minute"') == 60
    assert svg.count('class="rcpt-bar-failed"') == 1
    assert svg.count('class="rcpt-bar-completed"') == 1
    assert svg.count('class="rcpt-bar-canceled"') == 1
    assert "1 failed, 0 completed, 0 canceled" in svg  # the tooltip of g's minute
    assert 'id="rcpt-chart-peak">1<' in page
    assert 'id="rcpt-chart-failed">1<' in page  # failed in the last hour
    assert "<script" not in svg and "http" not in svg.replace("http://www.w3.org", "")


def test_configuration_is_folded_and_pages_carry_no_requirement_ids(admin_client, seeded):
    page = text(admin_client.get(DASHBOARD))
    assert re.search(r'<details class="rcpt-panel" id="panel-config">\s*<summary>', page)
    visible = re.sub(r"<!--.*?-->", "", page, flags=re.S)
    assert not re.search(r"\([A-Z]-\d+\)|SPEC \d+", visible), re.findall(
        r".{40}(?:\([A-Z]-\d+\)|SPEC \d+).{20}", visible
    )
