"""D-12 on the database: a queued job whose worker group is saturated is diagnosed
`waiting_for_capacity`, naming who holds the slots and how many wait ahead; the dashboard
shows the same busy/slots per group. Counts stay bounded and on the status index."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import dashboard, queue
from jobs.core.diagnosis import COUNT_CAP
from jobs.diagnosis import capacity_of, diagnosis
from jobs.models import DeliveryPromise
from jobs.runtime import processes
from jobs.runtime.processes import BEAT_MS, GONE_AFTER_BEATS
from tests.integration.jobs.helpers import payload
from tests.support import present

pytestmark = pytest.mark.django_db
NOW = 2_000_000_000_000
SECOND = 1_000


def codex(at: int, **options) -> str:
    return queue.enqueue("codex", payload("factory.task.run"), now_ms=at, **options).job.job_id


def chat(at: int) -> str:
    return queue.enqueue("factory", payload(), now_ms=at).job.job_id


def register(role: str, group: str | None, concurrency: int, *, seen_ms: int) -> str:
    return processes.register(role=role, group=group, concurrency=concurrency, now_ms=seen_ms)


@pytest.fixture
def codex_full() -> dict[str, str]:
    """CODEX_JOB_CONCURRENCY=1: one long codex task holds the only slot, two more wait."""
    register("driver", None, 1, seen_ms=NOW)
    # process ids are <role>:<host>:<pid>, so this test process registers one per role
    register("worker-codex", "codex", 1, seen_ms=NOW)
    register("worker-chat", "chat", 4, seen_ms=NOW)
    jobs = {
        "long": codex(NOW - 600 * SECOND),
        "first": codex(NOW - 300 * SECOND),
        "second": codex(NOW - 200 * SECOND),
        "chat": chat(NOW - 100 * SECOND),
    }
    assert queue.lease(
        jobs["long"], worker_id="codex:h:1", now_ms=NOW - 590 * SECOND, start=True
    ).applied
    assert queue.get(jobs["long"]).status == "running"
    return jobs


def test_queued_job_behind_a_busy_group_names_the_holder_and_the_queue_ahead(codex_full):
    second = codex_full["second"]
    # the execute delivery sent to worker-codex 44 s ago, which seemed to be all there was
    DeliveryPromise.objects.create(
        id=f"{second}:attempt:1",
        function="execute",
        job_id=second,
        attempt=1,
        target_group="codex",
        dispatch_key=second,
        created_at=NOW - 44 * SECOND,
        timeout_at=NOW + 76 * SECOND,
    )
    report = diagnosis(second, now_ms=NOW)
    blockers = report["blockers"]
    assert [b["code"] for b in blockers] == ["waiting_for_capacity", "delivery_pending"]
    assert "pending for 44.0 s" in blockers[1]["detail"]
    assert blockers[0]["detail"] == (
        f"waiting for a free codex slot: codex 1/1 busy with {codex_full['long']}; 1 queued ahead"
    )
    assert report["facts"]["capacity"] == {
        "group": "codex",
        "busy": 1,
        "slots": 1,
        "busyJobs": [codex_full["long"]],
        "queuedAhead": 1,
        "capped": False,
        "saturated": True,
    }
    first = diagnosis(codex_full["first"], now_ms=NOW)["blockers"][0]["detail"]
    assert first.endswith("; 0 queued ahead")


def test_a_leased_job_holds_a_slot_too(codex_full):
    register("worker-control", "control", 1, seen_ms=NOW)
    control = queue.enqueue(
        "factory-control", payload("factory.objective.control"), now_ms=NOW - 50 * SECOND
    ).job.job_id
    waiting = queue.enqueue(
        "factory-control", payload("factory.objective.control"), now_ms=NOW - 40 * SECOND
    ).job.job_id
    assert queue.lease(control, worker_id="control:h:2", now_ms=NOW - 30 * SECOND).applied
    assert queue.get(control).status == "leased"
    [blocker, *_] = diagnosis(waiting, now_ms=NOW)["blockers"]
    assert blocker == {
        "code": "waiting_for_capacity",
        "detail": f"waiting for a free control slot: control 1/1 busy with "
        f"{control}; 0 queued ahead",
    }


def test_a_group_with_free_slots_is_not_waiting(codex_full):
    busy_chat = chat(NOW - 90 * SECOND)
    assert queue.lease(busy_chat, worker_id="chat:h:3", now_ms=NOW - 80 * SECOND).applied
    report = diagnosis(codex_full["chat"], now_ms=NOW)
    assert "waiting_for_capacity" not in [b["code"] for b in report["blockers"]]
    assert report["facts"]["capacity"] == {
        "group": "chat",
        "busy": 1,
        "slots": 4,
        "busyJobs": [busy_chat],
        "queuedAhead": 0,
        "capped": False,
        "saturated": False,
    }


def test_a_gone_or_stopped_process_gives_no_slots_and_no_live_process_stays_the_answer(codex_full):
    gone_at = NOW + GONE_AFTER_BEATS * BEAT_MS + 1  # the codex worker has missed 3 beats
    register("driver", None, 1, seen_ms=gone_at)
    found = diagnosis(codex_full["second"], now_ms=gone_at)
    codes = [b["code"] for b in found["blockers"]]
    assert "no_live_process" in codes and "waiting_for_capacity" not in codes
    assert found["facts"]["capacity"]["slots"] == 0

    processes.stopped(processes.process_id("worker-codex"), now_ms=NOW)
    codes = [b["code"] for b in diagnosis(codex_full["second"], now_ms=NOW)["blockers"]]
    assert "no_live_process" in codes and "waiting_for_capacity" not in codes


def test_settling_the_holder_frees_the_slot(codex_full):
    from jobs.core.state import Fence

    assert queue.complete(
        codex_full["long"], {"ok": True}, fence=Fence("codex:h:1", 1), now_ms=NOW - SECOND
    ).applied
    report = diagnosis(codex_full["second"], now_ms=NOW)
    assert "waiting_for_capacity" not in [b["code"] for b in report["blockers"]]
    assert report["facts"]["capacity"]["busy"] == 0


def test_counts_stop_at_the_cap_and_stay_on_the_status_index(codex_full):
    later = [codex(NOW - (100 - i) * SECOND) for i in range(4)]
    cap = 2
    capped = capacity_of(present(queue.get(later[-1])), slots=1, cap=cap)
    assert capped.queued_ahead == cap + 1  # 5 are ahead; the count stopped at cap + 1
    first = capacity_of(present(queue.get(later[0])), slots=1, cap=cap)
    assert first.queued_ahead == cap  # exactly 2
    second = capacity_of(present(queue.get(codex_full["second"])), slots=1, cap=cap)
    assert second.queued_ahead == 1

    with CaptureQueriesContext(connection) as queries:
        diagnosis(later[-1], now_ms=NOW)
    on_jobs = [q["sql"].upper() for q in queries.captured_queries if '"jobs_job"' in q["sql"]]
    counts = [sql for sql in on_jobs if "COUNT(" in sql]
    assert counts, on_jobs
    for sql in counts:  # a LIMIT inside every COUNT: never a count over the whole queue
        assert f"LIMIT {COUNT_CAP + 1}" in sql, sql
    scans = [sql for sql in on_jobs if '"JOBS_JOB"."ID" = ' not in sql]  # not its own row
    for sql in scans:
        assert '"JOBS_JOB"."STATUS"' in sql.split("WHERE", 1)[1], sql  # the active set only


def test_dashboard_shows_busy_against_slots_per_group(codex_full, admin_client, monkeypatch):
    monkeypatch.setattr(dashboard, "wall_clock_ms", lambda: NOW)
    register("worker-control", "control", 1, seen_ms=NOW - 60 * SECOND)  # gone
    rows = {row["group"]: row for row in dashboard.snapshot(now_ms=NOW)["capacity"]}
    assert rows == {
        "chat": {
            "group": "chat",
            "busy": 0,
            "busyShown": "0",
            "slots": 4,
            "queued": 1,
            "queuedShown": "1",
            "processes": 1,
            "state": "4 free",
            "paused": False,
        },
        "control": {
            "group": "control",
            "busy": 0,
            "busyShown": "0",
            "slots": 0,
            "queued": 0,
            "queuedShown": "0",
            "processes": 0,
            "state": "no live process",
            "paused": False,
        },
        "codex": {
            "group": "codex",
            "busy": 1,
            "busyShown": "1",
            "slots": 1,
            "queued": 2,
            "queuedShown": "2",
            "processes": 1,
            "state": "saturated",
            "paused": False,
        },
    }
    dashboard.reset_shared()
    page = admin_client.get("/admin/jobs/job/dashboard/").content.decode()
    panel = page[page.index('id="rcpt-table-capacity"') :]
    panel = panel[: panel.index("</table>")]
    assert 'data-source="capacity"' in panel
    cells = {row[0]: row for row in _rows(panel)}
    assert cells["codex"][-3:] == ["2", "1", "saturated"] and "1 / 1" in " ".join(cells["codex"])
    assert cells["chat"][-3:] == ["1", "1", "4 free"] and "0 / 4" in " ".join(cells["chat"])


def _rows(table_html: str) -> list[list[str]]:
    """The text of each body cell, row by row (markup and whitespace dropped)."""
    import re

    body = table_html[table_html.index("<tbody") :]
    return [
        [
            " ".join(re.sub(r"<[^>]+>", " ", cell).split())
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    ]
