"""Issue 34 item 1: cron ticks in a named timezone, DST-correct (jobs.ticks).

Europe/Paris springs forward on 2027-03-28 (02:00 CET -> 03:00 CEST) and falls back on
2026-10-25 (03:00 CEST -> 02:00 CET)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobs import ticks
from jobs.core.schedules import Schedule, ScheduleError


def at(text: str) -> int:
    """`2027-03-28T01:30Z` in milliseconds."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def cron(expression: str, timezone: str = "Europe/Paris") -> Schedule:
    return Schedule("s", "a", {}, cron=expression, timezone=timezone)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%MZ")


def run(schedule: Schedule, after: str, n: int) -> list[str]:
    out, ms = [], at(after)
    for _ in range(n):
        ms = ticks.next_after(schedule, ms)
        out.append(iso(ms))
    return out


def test_a_daily_cron_keeps_its_wall_clock_time_across_both_transitions() -> None:
    # 03:00 Paris is 02:00Z in winter and 01:00Z in summer
    assert run(cron("0 3 * * *"), "2027-03-26T12:00Z", 3) == [
        "2027-03-27T02:00Z",
        "2027-03-28T01:00Z",  # the night is an hour shorter
        "2027-03-29T01:00Z",
    ]
    assert run(cron("0 3 * * *"), "2026-10-24T12:00Z", 2) == [
        "2026-10-25T02:00Z",  # an hour longer
        "2026-10-26T02:00Z",
    ]


def test_a_time_the_clock_skips_runs_once_as_much_later_as_the_clock_jumped() -> None:
    # 02:30 does not exist in Paris on 2027-03-28: it runs at 03:30 CEST (01:30Z), once
    assert run(cron("30 2 * * *"), "2027-03-27T12:00Z", 2) == [
        "2027-03-28T01:30Z",
        "2027-03-29T00:30Z",
    ]


def test_a_time_that_happens_twice_runs_once_at_its_first_occurrence() -> None:
    # 02:30 happens at 00:30Z (CEST) and again at 01:30Z (CET) on 2026-10-25
    assert run(cron("30 2 * * *"), "2026-10-24T12:00Z", 2) == [
        "2026-10-25T00:30Z",
        "2026-10-26T01:30Z",
    ]


def test_a_search_that_starts_inside_the_repeated_hour_never_goes_back_in_time() -> None:
    # 01:10Z is 02:10 CET, the second time round: 02:30 has already been (00:30Z)
    assert run(cron("30 2 * * *"), "2026-10-25T01:10Z", 1) == ["2026-10-26T01:30Z"]
    assert run(cron("*/20 * * * *"), "2026-10-25T01:10Z", 1) == ["2026-10-25T02:00Z"]


@pytest.mark.parametrize("expression", ["0 3 * * *", "30 2 * * *", "*/15 * * * *", "0 * * * *"])
@pytest.mark.parametrize("day", ["2027-03-28", "2026-10-25"])
def test_latest_and_next_agree_around_each_transition(expression: str, day: str) -> None:
    """For every instant t: latest(t) <= t < next(latest(t)), and the ticks found by
    walking forward are exactly the latest ticks seen along the way (no tick twice)."""
    schedule = cron(expression)
    midnight = at(f"{day}T00:00Z")  # both transitions are at 01:00Z
    start, end = midnight - 3 * 3_600_000, midnight + 6 * 3_600_000
    walked, ms = set(), start
    while ms < end:
        ms = ticks.next_after(schedule, ms)
        walked.add(ms)
    seen = set()
    for t in range(start + 7 * 60_000, end, 7 * 60_000):
        latest = ticks.latest_at_or_before(schedule, t)
        assert latest <= t < ticks.next_after(schedule, latest)
        if latest >= ticks.next_after(schedule, start):
            seen.add(latest)
    assert seen <= walked


def test_a_cron_in_utc_is_unaffected_and_an_interval_ignores_the_timezone() -> None:
    assert run(cron("30 2 * * *", "UTC"), "2027-03-27T12:00Z", 2) == [
        "2027-03-28T02:30Z",
        "2027-03-29T02:30Z",
    ]
    every_hour = Schedule("s", "a", {}, every_s=3600, timezone="Europe/Paris")
    assert run(every_hour, "2026-10-25T00:10Z", 3) == [
        "2026-10-25T01:00Z",
        "2026-10-25T02:00Z",
        "2026-10-25T03:00Z",
    ]


def test_a_tick_exactly_now_is_the_latest_tick() -> None:
    schedule = cron("0 3 * * *")
    assert ticks.latest_at_or_before(schedule, at("2027-03-27T02:00Z")) == at("2027-03-27T02:00Z")
    assert ticks.latest_at_or_before(schedule, at("2027-03-27T01:59Z")) == at("2027-03-26T02:00Z")


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("61 3 * * *", "not a valid cron expression"),
        ("0 3 * *", "five fields"),
        ("0 0 30 2 *", "never matches a date"),
    ],
)
def test_check_cron_refuses_what_croniter_cannot_run(expression: str, fragment: str) -> None:
    with pytest.raises(ScheduleError, match=fragment):
        ticks.check_cron(expression)
    ticks.check_cron("@daily")
