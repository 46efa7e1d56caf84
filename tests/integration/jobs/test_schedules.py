"""Issue 34 item 1: schedules on both databases, with the clock passed in.

Exactly one job per tick whoever fires it (three threads, each its own connection, on
the same ticks), the missed-tick policies, declarations seen at startup, pause, resume
and run now, each a receipt on `schedules/<name>` with `by`, and the read model equal to
the fold of those receipts."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs import schedules
from jobs.core import contracts
from jobs.core.schedule_state import reduce
from jobs.core.schedules import Schedule, tick_job_id
from jobs.errors import InvalidRequest, ScheduleNotFound
from jobs.management.commands.runworker import maintenance_loops
from jobs.models import Job
from jobs.models import Schedule as ScheduleRow
from jobs.runtime import loops
from jobs.runtime.loops import Report
from jobs.schedule_projector import row_for
from receipts import store
from receipts.core.chain import fold
from tests.conftest import run_in_threads
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db(transaction=True)

MINUTE = 60_000
HOUR = 60 * MINUTE
T0 = int(datetime(2026, 12, 6, 0, 0, 30, tzinfo=UTC).timestamp() * 1000)  # 30 s past a minute


def every_minute(name: str = "pulse", **fields) -> Schedule:
    return Schedule(name, "factory", payload(), cron="* * * * *", **fields)


def declare(*items: Schedule, at: int = T0, by: str = "scheduler") -> None:
    report = schedules.sync([(item, "code") for item in items], now_ms=at, by=by)
    assert report.errors == []


def types(name: str) -> list[str]:
    return [r.type for r in store.read(f"schedules/{name}")]


def bodies(name: str, kind: str) -> list[dict]:
    return [r.body for r in store.read(f"schedules/{name}") if r.type == kind]


def scheduled_jobs(name: str) -> list[str]:
    return sorted(Job.objects.filter(id__startswith=f"sched-{name}-").values_list("id", flat=True))


def assert_row_is_the_fold(name: str) -> None:
    folded = fold(store.read(f"schedules/{name}"), reduce)
    assert folded is not None and store.verify(f"schedules/{name}").ok
    row = ScheduleRow.objects.filter(pk=name).values().first()
    assert row == row_for(folded)
    replayed = store.replay(f"schedules/{name}", dry_run=True)  # `receipts replay` agrees
    assert (replayed.checked, replayed.drift) == (1, [])


def test_three_processes_over_three_one_minute_ticks_make_exactly_three_jobs():
    declare(every_minute())
    ticks = [T0 + 30_000 + i * MINUTE for i in range(3)]  # 00:01, 00:02, 00:03
    for tick in ticks:
        # three "processes" (threads with their own connections) pass on the same tick,
        # each at a slightly different moment of it
        def pass_at(i: int, tick: int = tick) -> Report:
            return schedules.fire_due(now_ms=tick + i * 100)

        fired = run_in_threads(3, pass_at)
        assert sum(report.acted for report in fired) == 1
    assert scheduled_jobs("pulse") == sorted(tick_job_id("pulse", t) for t in ticks)
    assert [b["tick"] for b in bodies("pulse", "schedule.fired")] == ticks
    for job_id in scheduled_jobs("pulse"):
        assert store.stream_info(f"jobs/{job_id}").count == 1  # enqueued once
    row = ScheduleRow.objects.get(pk="pulse")
    assert row.next_run_at == ticks[-1] + MINUTE and row.last_job_id == tick_job_id(
        "pulse", ticks[-1]
    )
    assert_row_is_the_fold("pulse")


def test_an_enqueue_racing_on_a_tick_job_id_still_makes_one_job():
    """The id alone makes a tick idempotent, even for an enqueue outside the lock."""
    declare(every_minute())
    tick = T0 + 30_000
    from jobs import queue

    queue.enqueue("factory", payload(), job_id=tick_job_id("pulse", tick))
    assert schedules.fire(name="pulse", now_ms=tick) == tick_job_id("pulse", tick)
    assert scheduled_jobs("pulse") == [tick_job_id("pulse", tick)]
    assert bodies("pulse", "schedule.fired")[0]["created"] is False


def test_run_once_fires_one_job_for_ticks_missed_while_nothing_ran():
    declare(Schedule("hourly", "factory", payload(), cron="0 * * * *"))  # 01:00, 02:00, ...
    now = T0 + 5 * HOUR  # 05:00:30: five ticks passed
    assert schedules.fire_due(now_ms=now).acted == 1
    latest = T0 - 30_000 + 5 * HOUR
    assert scheduled_jobs("hourly") == [tick_job_id("hourly", latest)]
    fired = bodies("hourly", "schedule.fired")[0]
    assert (fired["firstDue"], fired["tick"], fired["nextRunAt"]) == (
        latest - 4 * HOUR,
        latest,
        latest + HOUR,
    )
    assert schedules.fire_due(now_ms=now + 1000).acted == 0


def test_skip_drops_ticks_missed_by_more_than_a_minute():
    declare(Schedule("hourly", "factory", payload(), cron="0 * * * *", missed="skip"))
    now = T0 + 5 * HOUR + 30 * MINUTE  # the latest tick, 05:00, is 30 minutes late
    assert schedules.fire_due(now_ms=now).acted == 0
    assert scheduled_jobs("hourly") == []
    skipped = bodies("hourly", "schedule.skipped")[0]
    assert skipped["nextRunAt"] == T0 - 30_000 + 6 * HOUR and skipped["by"] == "scheduler"
    # the next tick, on time, runs
    assert schedules.fire_due(now_ms=T0 - 30_000 + 6 * HOUR + 2_000).acted == 1
    assert scheduled_jobs("hourly") == [tick_job_id("hourly", T0 - 30_000 + 6 * HOUR)]
    assert_row_is_the_fold("hourly")


def test_startup_records_new_changed_and_removed_declarations_once():
    declare(every_minute("a"), every_minute("b"))
    declare(every_minute("a"), every_minute("b"), at=T0 + 5_000)  # a second runworker
    assert types("a") == types("b") == ["schedule.declared"]
    changed = Schedule("a", "factory", payload(), every_s=30)
    declare(changed, at=T0 + 10_000)  # a changed, b no longer declared
    assert types("a") == ["schedule.declared", "schedule.declared"]
    assert bodies("a", "schedule.declared")[-1]["nextRunAt"] == T0 + 30_000  # every 30 s
    assert types("b") == ["schedule.declared", "schedule.removed"]
    assert ScheduleRow.objects.get(pk="b").status == "removed"
    assert schedules.fire_due(now_ms=T0 + HOUR).acted == 1  # only a fires
    for name in ("a", "b"):
        assert all(r.body["by"] == "scheduler" for r in store.read(f"schedules/{name}"))
        assert_row_is_the_fold(name)


def test_a_schedule_whose_enqueue_would_be_refused_is_not_declared():
    bad = Schedule("bad", "factory", {"kind": "acme.unknown"}, every_s=60)
    report = schedules.sync([(bad, "settings")], now_ms=T0)
    assert report.acted == 0
    assert report.errors[0].startswith("bad: ") and "acme.unknown" in report.errors[0]
    assert store.stream_info("schedules/bad") is None


def test_a_tick_whose_enqueue_is_refused_is_recorded_and_the_schedule_moves_on():
    contracts.register_kind("acme.sched", auth_context_required=False)
    try:
        declare(Schedule("later", "factory", {"kind": "acme.sched"}, cron="* * * * *"))
    finally:
        contracts.unregister_kind("acme.sched")
    assert schedules.fire_due(now_ms=T0 + 30_000).acted == 0
    fired = bodies("later", "schedule.fired")[0]
    assert fired["jobId"] is None and "unknown_kind" in fired["error"]
    assert ScheduleRow.objects.get(pk="later").next_run_at == T0 + 90_000
    assert scheduled_jobs("later") == []


def test_pause_resume_and_run_now_are_receipts_with_by():
    declare(every_minute())
    schedules.pause("pulse", by="alice", now_ms=T0 + 1_000)
    schedules.pause("pulse", by="alice", now_ms=T0 + 2_000)  # already paused: nothing
    assert schedules.fire_due(now_ms=T0 + 10 * MINUTE).acted == 0
    ran = schedules.run_now("pulse", by="bob", now_ms=T0 + 10 * MINUTE)  # paused or not
    assert ran.job.job_id == "sched-pulse-now-3" and ran.job.status == "queued"
    resumed = schedules.resume("pulse", by="carol", now_ms=T0 + 20 * MINUTE)
    # the ticks that fell while it was paused do not run: the next is after the resume
    assert resumed.status == "active" and resumed.next_run_at == T0 - 30_000 + 21 * MINUTE
    assert types("pulse") == [
        "schedule.declared",
        "schedule.paused",
        "schedule.run_now",
        "schedule.resumed",
    ]
    assert [r.body["by"] for r in store.read("schedules/pulse")] == [
        "scheduler",
        "alice",
        "bob",
        "carol",
    ]
    assert store.read("schedules/pulse")[2].context == {"actor": "bob"}
    assert scheduled_jobs("pulse") == ["sched-pulse-now-3"]
    assert_row_is_the_fold("pulse")


def test_acting_on_a_missing_or_removed_schedule_writes_nothing():
    with pytest.raises(ScheduleNotFound):
        schedules.run_now("nope", by="alice")
    assert store.stream_info("schedules/nope") is None
    declare(every_minute())
    declare()  # no longer declared
    for action in (schedules.pause, schedules.resume, schedules.run_now):
        with pytest.raises(ScheduleNotFound, match="no longer declared"):
            action("pulse", by="alice")
        with pytest.raises(InvalidRequest, match="by must be a non-empty string"):
            action("pulse", by="x" * 201)
    assert types("pulse") == ["schedule.declared", "schedule.removed"]


def test_the_listing_shows_the_last_run_and_its_outcome():
    declare(every_minute(), Schedule("hourly", "factory", payload(), cron="0 * * * *"))
    schedules.fire_due(now_ms=T0 + 30_000)
    listed = {s["name"]: s for s in schedules.listing()}
    assert listed["pulse"]["lastJobId"] == tick_job_id("pulse", T0 + 30_000)
    assert listed["pulse"]["lastOutcome"] == "queued"
    assert listed["pulse"]["nextRunAt"] == T0 + 90_000
    assert (
        listed["hourly"]["lastOutcome"] is None
        and listed["hourly"]["trigger"] == "cron 0 * * * * (UTC)"
    )
    assert [s["name"] for s in schedules.listing(organization_id="org-2")] == []
    assert len(schedules.listing(organization_id="org-1")) == 2


# ---- the CLI -------------------------------------------------------------------------------


def cli(*args: str) -> str:
    out = StringIO()
    call_command("jobs", "schedules", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_the_cli_lists_pauses_resumes_and_runs_a_schedule_now_as_by():
    declare(every_minute())
    listed = json.loads(cli("--json"))["schedules"]
    assert [(s["name"], s["status"], s["trigger"]) for s in listed] == [
        ("pulse", "active", "cron * * * * * (UTC)")
    ]
    assert "pulse" in cli() and "cron * * * * * (UTC)" in cli("list")
    assert json.loads(cli("pause", "pulse", "--json", "--by", "alice"))["status"] == "paused"
    assert "schedule pulse is paused" in cli("pause", "pulse")
    ran = json.loads(cli("run-now", "pulse", "--json", "--by", "bob"))
    assert ran["job"]["id"] == "sched-pulse-now-3"
    resumed = json.loads(cli("resume", "pulse", "--json", "--by", "carol"))
    assert resumed["status"] == "active" and resumed["nextRunAt"] is not None
    assert [r.body["by"] for r in store.read("schedules/pulse")][1:] == ["alice", "bob", "carol"]


def test_the_cli_refuses_a_missing_name_or_schedule_and_writes_nothing():
    with pytest.raises(CommandError, match="needs the schedule's name"):
        cli("pause")
    with pytest.raises(CommandError, match="schedule_not_found: schedule nope not found"):
        cli("run-now", "nope")
    assert store.stream_info("schedules/nope") is None


def test_every_runworker_runs_the_scheduler_on_its_keeper_thread_first_syncing():
    config = replace(settings.RECEIPT, schedules=(every_minute(),))
    for role in ("driver", "worker-chat", "all"):
        maintenance, critical = loops.split(maintenance_loops(config, role))
        assert [lp.name for lp in critical].count("schedules") == 1, role
        assert "schedules" not in [lp.name for lp in maintenance]
    (loop,) = [lp for lp in critical if lp.name == "schedules"]
    assert loop.run(T0).acted == 1 and types("pulse") == ["schedule.declared"]
    assert loop.run(T0 + 30_000).acted == 1  # 00:01 fires; no second declaration
    assert types("pulse") == ["schedule.declared", "schedule.fired"]
    assert loop.run(T0 + 31_000).acted == 0
