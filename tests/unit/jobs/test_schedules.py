"""Issue 34 item 1: the pure rules of schedules: definitions, tick job ids, interval
ticks, the missed-tick policy, the registry of code schedules and the fold."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.core import schedule_state
from jobs.core import schedules as core
from jobs.core.schedules import (
    RUN_ONCE,
    SKIP,
    SKIP_GRACE_MS,
    Schedule,
    ScheduleError,
    from_wire,
    parse_many,
    tick_job_id,
    tick_to_fire,
)
from jobs.core.vocabulary import validate_job_id
from receipts.core.chain import Receipt, fold, seal

MINUTE = 60_000
T0 = 1_796_515_200_000  # 2026-12-06T00:00:00Z, a whole minute


def wire(**fields: Any) -> dict[str, Any]:
    return {"name": "nightly", "agentId": "my-agent", "payload": {"kind": "acme.report"}, **fields}


# ---- definitions ---------------------------------------------------------------------------


def test_a_wire_schedule_round_trips_with_its_options_as_enqueue_keywords() -> None:
    given = wire(
        cron="0 3 * * *",
        timezone="Europe/Paris",
        missed="skip",
        maxAttempts=3,
        queue="reports",
        priority=-20,
    )
    parsed = from_wire(given)
    assert parsed.options == {"max_attempts": 3, "queue": "reports", "priority": -20}
    assert parsed.trigger == "cron 0 3 * * * (Europe/Paris)"
    assert from_wire(parsed.to_wire()) == parsed
    assert parsed.to_wire()["maxAttempts"] == 3


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        (wire(), "give exactly one of cron and every"),
        (wire(cron="0 3 * * *", every=60), "give exactly one of cron and every"),
        (wire(cron="0 3 * * * *"), "five fields or be an @alias"),
        (wire(every=0), "every must be 1.."),
        (wire(every=1.5), "every must be a whole number of seconds"),
        (wire(every=True), "every must be a whole number of seconds"),
        (wire(every=60, timezone="Mars/Olympus"), "'Mars/Olympus' is not a known IANA timezone"),
        (wire(every=60, missed="later"), "missed must be one of run_once, skip"),
        (wire(every=60, name="Nightly Report"), "name must be 1..64 characters"),
        (wire(every=60, name="x" * 65), "name must be 1..64 characters"),
        (wire(every=60, agentId=""), "agentId must be a non-empty string"),
        (wire(every=60, payload=[1]), "payload must be an object"),
        (wire(every=60, colour="red"), "unknown field 'colour'"),
    ],
)
def test_a_bad_definition_is_refused_naming_the_schedule_and_field(
    given: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ScheduleError) as caught:
        from_wire(given)
    assert fragment in str(caught.value)
    if isinstance(given.get("name"), str):
        assert repr(given["name"]) in str(caught.value)


def test_parse_many_reads_a_json_array_and_refuses_a_name_declared_twice() -> None:
    assert parse_many("") == ()
    assert [
        s.name for s in parse_many('[{"name": "a", "agentId": "x", "payload": {}, "every": 5}]')
    ] == ["a"]
    with pytest.raises(ScheduleError, match="not valid JSON"):
        parse_many("[{")
    with pytest.raises(ScheduleError, match="must be a JSON array"):
        parse_many('{"name": "a"}')
    twice = [wire(every=5), wire(every=10)]
    with pytest.raises(ScheduleError, match="'nightly' is declared twice"):
        parse_many(twice)


def test_parse_many_takes_a_list_of_wire_dicts_and_schedules_from_a_settings_block() -> None:
    pulse = Schedule(name="pulse", agent_id="my-agent", payload={}, every_s=30)
    nightly, kept = parse_many([wire(cron="0 3 * * *"), pulse])
    assert (nightly.name, nightly.cron, kept) == ("nightly", "0 3 * * *", pulse)
    with pytest.raises(ScheduleError, match="'pulse' is declared twice"):
        parse_many([pulse, pulse])
    with pytest.raises(ScheduleError, match=r"must be a list of schedules \(or their JSON"):
        parse_many(wire(every=5))  # one schedule, not in a list


# ---- one job id per tick ---------------------------------------------------------------------


def test_a_tick_job_id_is_a_valid_job_id_derived_from_name_and_tick_alone() -> None:
    job_id = tick_job_id("nightly-report", T0 + 3 * 3_600_000)
    assert job_id == "sched-nightly-report-20261206T030000Z"
    assert validate_job_id(job_id) == job_id
    longest = tick_job_id("x" * core.MAX_NAME, T0)
    assert validate_job_id(longest) == longest
    assert tick_job_id("n", T0) != tick_job_id("n", T0 + 1000)
    assert core.run_now_job_id("n", 7) == "sched-n-now-7"


def test_interval_ticks_are_aligned_to_the_epoch_so_every_process_agrees() -> None:
    assert core.interval_tick_at_or_before(2, T0 + 3_999) == T0 + 2_000
    assert core.interval_tick_at_or_before(2, T0 + 4_000) == T0 + 4_000
    assert core.interval_tick_after(2, T0 + 4_000) == T0 + 6_000
    assert core.interval_tick_after(3600, T0 + 1) == T0 + 3_600_000


# ---- the missed-tick policy ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("missed", "next_run", "latest", "now", "fires"),
    [
        # not due yet
        (RUN_ONCE, T0 + MINUTE, T0, T0 + 30_000, None),
        # due on time: both policies fire it
        (RUN_ONCE, T0, T0, T0 + 500, T0),
        (SKIP, T0, T0, T0 + 500, T0),
        # three ticks passed while nothing ran: run_once fires ONE job, for the latest
        (RUN_ONCE, T0, T0 + 2 * MINUTE, T0 + 2 * MINUTE + 10_000, T0 + 2 * MINUTE),
        # ... skip too while the latest is within the grace
        (SKIP, T0, T0 + 2 * MINUTE, T0 + 2 * MINUTE + 10_000, T0 + 2 * MINUTE),
        # a nightly tick missed by an hour: run_once runs it once, skip drops it
        (RUN_ONCE, T0, T0, T0 + 60 * MINUTE, T0),
        (SKIP, T0, T0, T0 + 60 * MINUTE, None),
        (SKIP, T0, T0, T0 + SKIP_GRACE_MS, T0),
        (SKIP, T0, T0, T0 + SKIP_GRACE_MS + 1, None),
        # a latest tick computed before the first unfired one (clock arithmetic): the
        # unfired one is due and fires
        (RUN_ONCE, T0, T0 - MINUTE, T0 + 1, T0),
    ],
)
def test_the_missed_tick_policy(
    missed: str, next_run: int, latest: int, now: int, fires: int | None
) -> None:
    assert (
        tick_to_fire(next_run_ms=next_run, latest_due_ms=latest, now_ms=now, missed=missed) == fires
    )


def test_the_default_policy_is_run_once() -> None:
    assert from_wire(wire(every=60)).missed == RUN_ONCE == core.DEFAULT_MISSED


# ---- schedules declared in code --------------------------------------------------------------


def test_schedule_declares_once_and_refuses_a_different_definition_under_the_same_name() -> None:
    try:
        first = core.schedule("unit-a", agent_id="x", payload={}, every_s=60, max_attempts=2)
        assert (
            core.schedule("unit-a", agent_id="x", payload={}, every_s=60, max_attempts=2) == first
        )
        assert first in core.declared_in_code()
        with pytest.raises(ScheduleError, match="declared twice with different definitions"):
            core.schedule("unit-a", agent_id="x", payload={}, every_s=30)
        with pytest.raises(ScheduleError, match="'unit-b': unknown enqueue option 'colour'"):
            core.schedule("unit-b", agent_id="x", payload={}, every_s=30, colour="red")
    finally:
        core.forget("unit-a")
    assert all(s.name != "unit-a" for s in core.declared_in_code())


# ---- the fold --------------------------------------------------------------------------------


def chain(*bodies: dict[str, Any]) -> list[Receipt]:
    out: list[Receipt] = []
    for i, body in enumerate(bodies):
        out.append(
            seal(
                stream="schedules/nightly",
                prev=out[-1].hash if out else None,
                body=body,
                ts=T0 + i,
                random_hex16=f"{i:016x}",
                stream_seq=i + 1,
            )
        )
    return out


def test_the_fold_follows_declaration_ticks_pause_resume_and_run_now() -> None:
    definition = Schedule("nightly", "my-agent", {"kind": "k"}, every_s=60).to_wire()
    receipts = chain(
        {
            "type": core.DECLARED,
            "name": "nightly",
            "definition": definition,
            "source": "code",
            "nextRunAt": T0 + MINUTE,
            "by": "scheduler",
        },
        {
            "type": core.FIRED,
            "name": "nightly",
            "tick": T0 + MINUTE,
            "jobId": "sched-a",
            "firstDue": T0 + MINUTE,
            "nextRunAt": T0 + 2 * MINUTE,
            "by": "scheduler",
        },
        {"type": core.PAUSED, "name": "nightly", "by": "alice"},
        {
            "type": core.DECLARED,
            "name": "nightly",
            "definition": {**definition, "every": 30},
            "source": "code",
            "nextRunAt": T0 + 3 * MINUTE,
            "by": "scheduler",
        },
    )
    state = fold(receipts, schedule_state.reduce)
    assert state is not None
    assert state.status == "paused" and state.paused_by == "alice"  # a redeclare keeps it paused
    assert state.definition["every"] == 30 and state.last_tick_at == T0 + MINUTE
    assert state.last_job_id == "sched-a" and state.receipt_count == 4
    assert state.head == receipts[-1].hash
    more = chain(
        *[r.body for r in receipts],
        {"type": core.RESUMED, "name": "nightly", "nextRunAt": T0 + 5 * MINUTE, "by": "bob"},
        {"type": core.RUN_NOW, "name": "nightly", "jobId": "sched-nightly-now-6", "by": "bob"},
        {
            "type": core.SKIPPED,
            "name": "nightly",
            "firstDue": T0 + 5 * MINUTE,
            "lastDue": T0 + 9 * MINUTE,
            "nextRunAt": T0 + 10 * MINUTE,
            "by": "scheduler",
        },
        {"type": core.REMOVED, "name": "nightly", "by": "scheduler"},
    )
    later = fold(more, schedule_state.reduce)
    assert later is not None
    assert later.status == "removed" and later.next_run_at is None
    assert later.last_job_id == "sched-nightly-now-6" and later.paused_by is None
    assert schedule_state.from_wire(schedule_state.to_wire(later)) == later


def test_nothing_folds_before_a_declaration() -> None:
    assert (
        fold(chain({"type": core.PAUSED, "name": "nightly", "by": "x"}), schedule_state.reduce)
        is None
    )
