"""When a schedule's ticks fall: cron expressions read on the wall clock of the
schedule's timezone (croniter over naive local times, zoneinfo for the instants), and
interval schedules by the core's epoch-aligned arithmetic.

A wall-clock time maps to an instant the way Temporal's and java.time's "compatible"
rule does (Python's `fold=0`): a time the clock skips when it springs forward runs as
much later as the clock jumped (02:30 on a night that goes from 02:00 to 03:00 runs at
03:30), and a time that happens twice when it falls back runs at its first occurrence.
So each wall-clock tick runs once a day, whatever the transitions. A tick is a whole
second; times are milliseconds since the epoch.
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta

from croniter import croniter  # type: ignore[import-untyped]  # no stubs in the lock

from jobs.core.schedules import (
    Schedule,
    ScheduleError,
    check_cron_shape,
    interval_tick_after,
    interval_tick_at_or_before,
)

# How many cron candidates a search steps over before giving up: inside an hour the
# clock repeats, up to one a minute; only an expression that never matches (30 February)
# runs out.
_MAX_STEPS = 128


def check_cron(cron: str) -> None:
    """ScheduleError unless `cron` is an expression croniter accepts, in five fields."""
    check_cron_shape(cron)
    if not croniter.is_valid(cron):
        raise ScheduleError(f"cron {cron!r} is not a valid cron expression")
    try:
        _search(cron, "UTC", 0, forward=True)
    except ScheduleError:
        raise ScheduleError(f"cron {cron!r} never matches a date") from None


def next_after(schedule: Schedule, after_ms: int) -> int:
    """The first tick strictly after `after_ms`."""
    if schedule.every_s is not None:
        return interval_tick_after(schedule.every_s, after_ms)
    assert schedule.cron is not None
    return _search(schedule.cron, schedule.timezone, after_ms, forward=True)


def latest_at_or_before(schedule: Schedule, at_ms: int) -> int:
    """The last tick at or before `at_ms`: the one whose next tick is after it."""
    if schedule.every_s is not None:
        return interval_tick_at_or_before(schedule.every_s, at_ms)
    assert schedule.cron is not None
    latest = _search(schedule.cron, schedule.timezone, at_ms, forward=False)
    # After the clock falls back, the wall clock of `at_ms` is earlier than that of ticks
    # already past (the first time round the repeated hour): walk forward to them.
    for _ in range(_MAX_STEPS):
        following = next_after(schedule, latest)
        if following > at_ms:
            return latest
        latest = following
    raise ScheduleError(f"cron {schedule.cron!r} has no tick near {at_ms} in {schedule.timezone}")


def _search(cron: str, timezone: str, ms: int, *, forward: bool) -> int:
    zone = zoneinfo.ZoneInfo(timezone)
    local = datetime.fromtimestamp(ms / 1000, tz=zone).replace(tzinfo=None)
    # croniter's get_prev is strictly before its start: start a second later so that a
    # tick exactly at `ms` counts, and let the check below drop one that is later.
    start = local if forward else local + timedelta(seconds=1)
    times = croniter(cron, start)
    for _ in range(_MAX_STEPS):
        try:
            candidate = times.get_next(datetime) if forward else times.get_prev(datetime)
        except Exception:  # croniter gives up on an expression with no date (CroniterBadDateError)
            break
        instant = _instant(candidate, zone)
        # the wall clock is not monotonic across a transition: keep the order of instants
        if (instant > ms) if forward else (instant <= ms):
            return instant
    raise ScheduleError(f"cron {cron!r} has no tick near {ms} in {timezone}")


def _instant(local: datetime, zone: zoneinfo.ZoneInfo) -> int:
    """The instant of a naive wall-clock time in `zone` (fold=0: "compatible")."""
    return int(local.replace(tzinfo=zone, fold=0).timestamp()) * 1000
