"""Schedules as data: a named enqueue (agent id, payload, options) repeated on a cron
expression in a named timezone or on a fixed interval, and the rules that need no clock
library: the job id of a tick, the interval's ticks, which due tick to fire under the
missed-tick policy, and the registry of schedules declared in code.

Cron arithmetic needs croniter and stays out of the core (`jobs.ticks`). Nothing here
reads the clock: times come in as arguments, in milliseconds since the epoch.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from jobs.core.declared import parse_array
from jobs.core.flat_wire import camel

STREAM_PREFIX: Final = "schedules/"
MAX_NAME: Final = 64
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")

RUN_ONCE: Final = "run_once"  # ticks missed while nothing ran: one job, for the latest
SKIP: Final = "skip"  # ... none: only a tick at most SKIP_GRACE_MS late still runs
MISSED_POLICIES: Final = (RUN_ONCE, SKIP)
DEFAULT_MISSED: Final = RUN_ONCE
SKIP_GRACE_MS: Final = 60_000

MIN_EVERY_S: Final = 1
MAX_EVERY_S: Final = 366 * 86_400
CRON_ALIASES: Final = (
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
)

# Enqueue options a schedule may carry: wire (camelCase, as the HTTP API names them) ->
# the keyword of `jobs.queue.enqueue`. Every option is checked by the enqueue's own
# validation when the schedule is declared.
OPTIONS: dict[str, str] = {
    camel(keyword): keyword
    for keyword in ("max_attempts", "lane", "session_key", "singleton_mode", "queue", "priority")
}
# Keys of a schedule's wire form besides its options.
_FIELDS = ("name", "agentId", "payload", "cron", "every", "timezone", "missed")

# Receipt types on `schedules/<name>`.
DECLARED: Final = "schedule.declared"  # seen new or changed when a runworker started
REMOVED: Final = "schedule.removed"  # no longer declared
PAUSED: Final = "schedule.paused"
RESUMED: Final = "schedule.resumed"
FIRED: Final = "schedule.fired"  # a tick's job enqueued (or refused: `error`)
SKIPPED: Final = "schedule.skipped"  # missed ticks dropped by the `skip` policy
RUN_NOW: Final = "schedule.run_now"  # an operator's extra run


class ScheduleError(ValueError):
    """A schedule that cannot be declared; the message names the schedule and field."""


@dataclass(frozen=True)
class Schedule:
    """What runs (agent id, payload, enqueue options as `queue.enqueue` keywords) and
    when: `cron` (five fields or an @alias) read in `timezone`, or `every_s` seconds
    counted from the epoch (so every process agrees on the ticks)."""

    name: str
    agent_id: str
    payload: dict[str, Any]
    cron: str | None = None
    every_s: int | None = None
    timezone: str = "UTC"
    missed: str = DEFAULT_MISSED
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(self)

    @property
    def stream(self) -> str:
        return STREAM_PREFIX + self.name

    @property
    def trigger(self) -> str:
        return trigger_text(self.to_wire())

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"name": self.name, "agentId": self.agent_id}
        wire["payload"] = self.payload
        if self.cron is not None:
            wire.update(cron=self.cron, timezone=self.timezone)
        else:
            wire["every"] = self.every_s
        wire["missed"] = self.missed
        back = {keyword: wire_name for wire_name, keyword in OPTIONS.items()}
        wire.update({back[k]: v for k, v in sorted(self.options.items())})
        return wire


def trigger_text(wire: Mapping[str, Any]) -> str:
    """`cron 0 3 * * * (Europe/Paris)` or `every 30 s`, from a schedule's wire form."""
    if wire.get("cron") is not None:
        return f"cron {wire['cron']} ({wire.get('timezone', 'UTC')})"
    return f"every {wire.get('every')} s"


def from_wire(wire: Any, *, where: str = "schedule") -> Schedule:
    """A schedule from its JSON form (settings, receipts); ScheduleError names the field."""
    if not isinstance(wire, Mapping):
        raise ScheduleError(f"{where} must be an object, got {type(wire).__name__}")
    name = wire.get("name")
    label = f"schedule {name!r}" if isinstance(name, str) else where
    unknown = sorted(set(wire) - set(_FIELDS) - set(OPTIONS))
    if unknown:
        known = ", ".join((*_FIELDS, *OPTIONS))
        raise ScheduleError(f"{label}: unknown field {unknown[0]!r} (known: {known})")
    every = wire.get("every")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int)):
        raise ScheduleError(f"{label}: every must be a whole number of seconds, got {every!r}")
    try:
        return Schedule(
            name=wire.get("name"),  # type: ignore[arg-type]  # checked by check()
            agent_id=wire.get("agentId"),  # type: ignore[arg-type]
            payload=wire.get("payload"),  # type: ignore[arg-type]
            cron=wire.get("cron"),
            every_s=every,
            timezone=wire.get("timezone", "UTC"),
            missed=wire.get("missed", DEFAULT_MISSED),
            options={OPTIONS[k]: wire[k] for k in OPTIONS if wire.get(k) is not None},
        )
    except ScheduleError as error:
        raise ScheduleError(f"{label}: {error}") from None


def parse_many(value: Any) -> tuple[Schedule, ...]:
    """A JSON array of schedules (text, or a list from a settings block: wire dicts and/or
    Schedules); names must be unique. Empty text is no schedule."""

    def item(raw: Any, index: int) -> Schedule:
        return raw if isinstance(raw, Schedule) else from_wire(raw, where=f"schedule {index}")

    return parse_array(
        value, noun="schedule", error=ScheduleError, item=item, name_of=lambda s: s.name
    )


def check(schedule: Schedule) -> None:
    """Refuse what no enqueue could ever make of it; the enqueue's own validation checks
    the agent id, payload and options against the registered kinds later."""
    name = schedule.name
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME or not _NAME.fullmatch(name):
        raise ScheduleError(
            f"name must be 1..{MAX_NAME} characters of a-z, 0-9, '.', '_' and '-', "
            f"starting with a letter or digit, got {name!r}"
        )
    if not isinstance(schedule.agent_id, str) or not schedule.agent_id.strip():
        raise ScheduleError("agentId must be a non-empty string")
    if not isinstance(schedule.payload, dict):
        raise ScheduleError("payload must be an object")
    if (schedule.cron is None) == (schedule.every_s is None):
        raise ScheduleError("give exactly one of cron and every")
    if schedule.cron is not None:
        check_cron_shape(schedule.cron)
    if schedule.every_s is not None and not MIN_EVERY_S <= schedule.every_s <= MAX_EVERY_S:
        raise ScheduleError(
            f"every must be {MIN_EVERY_S}..{MAX_EVERY_S} seconds, got {schedule.every_s}"
        )
    check_timezone(schedule.timezone)
    if schedule.missed not in MISSED_POLICIES:
        raise ScheduleError(
            f"missed must be one of {', '.join(MISSED_POLICIES)}, got {schedule.missed!r}"
        )
    unknown = sorted(set(schedule.options) - set(OPTIONS.values()))
    if unknown:
        raise ScheduleError(f"unknown enqueue option {unknown[0]!r}")


def check_cron_shape(cron: Any) -> None:
    """Five fields or an @alias (a sixth field would be croniter's seconds: refused, so
    the expression means what it means to cron). Each field's values: `jobs.ticks`."""
    if not isinstance(cron, str):
        raise ScheduleError(f"cron must be a string, got {type(cron).__name__}")
    if cron.strip() in CRON_ALIASES:
        return
    if len(cron.split()) != 5:
        raise ScheduleError(f"cron must have five fields or be an @alias, got {cron!r}")


def check_timezone(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ScheduleError(f"timezone must be an IANA name such as Europe/Paris, got {name!r}")
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"timezone {name!r} is not a known IANA timezone") from None


# ---- job ids: one per tick, whoever enqueues it --------------------------------------------


def stamp(ms: int) -> str:
    """`20261206T030000Z`: a tick's UTC second, the same in every process."""
    return datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y%m%dT%H%M%SZ")


def tick_job_id(name: str, tick_ms: int) -> str:
    """`sched-<name>-<tick>`: every process that fires this tick enqueues this id, and an
    enqueue of an existing id returns that job, so a tick makes one job."""
    return f"sched-{name}-{stamp(tick_ms)}"


def run_now_job_id(name: str, position: int) -> str:
    """`sched-<name>-now-<n>`: an operator's run, numbered by the position of its
    receipt on the schedule's stream, so each request is its own job."""
    return f"sched-{name}-now-{position}"


def name_from_stream(stream: str) -> str | None:
    if not stream.startswith(STREAM_PREFIX):
        return None
    name = stream[len(STREAM_PREFIX) :]
    return name if _NAME.fullmatch(name) and len(name) <= MAX_NAME else None


# ---- when --------------------------------------------------------------------------------


def interval_tick_at_or_before(every_s: int, at_ms: int) -> int:
    """The latest tick of an `every_s` schedule at or before `at_ms` (epoch-aligned)."""
    period = every_s * 1000
    return (at_ms // period) * period


def interval_tick_after(every_s: int, after_ms: int) -> int:
    return interval_tick_at_or_before(every_s, after_ms) + every_s * 1000


def tick_to_fire(*, next_run_ms: int, latest_due_ms: int, now_ms: int, missed: str) -> int | None:
    """Which tick a pass fires, given the first unfired tick (`next_run_ms`) and the latest
    tick at or before now. Ticks due together coalesce into one job for the latest, as
    in Celery beat and APScheduler: `run_once` fires it however late (the missed runs
    happen once), `skip` only when it is at most SKIP_GRACE_MS late. None: nothing is due,
    or the due ticks are skipped."""
    if next_run_ms > now_ms:
        return None
    latest = max(latest_due_ms, next_run_ms)
    if missed == SKIP and now_ms - latest > SKIP_GRACE_MS:
        return None
    return latest


# ---- schedules declared in code ------------------------------------------------------------

_DECLARED: dict[str, Schedule] = {}


def schedule(
    name: str,
    *,
    agent_id: str,
    payload: dict[str, Any],
    cron: str | None = None,
    every_s: int | None = None,
    timezone: str = "UTC",
    missed: str = DEFAULT_MISSED,
    **options: Any,
) -> Schedule:
    """Declare a schedule (in a module listed in RECEIPT_HANDLER_MODULES, beside the
    handler it feeds). `options` are `queue.enqueue` keywords (max_attempts, lane, ...).
    Declaring one name twice with different definitions is an error."""
    try:
        declared = Schedule(name, agent_id, payload, cron, every_s, timezone, missed, options)
    except ScheduleError as error:
        raise ScheduleError(f"schedule {name!r}: {error}") from None
    earlier = _DECLARED.get(name)
    if earlier is not None and earlier != declared:
        raise ScheduleError(f"schedule {name!r} is declared twice with different definitions")
    _DECLARED[name] = declared
    return declared


def declared_in_code() -> list[Schedule]:
    return sorted(_DECLARED.values(), key=lambda s: s.name)


def forget(name: str) -> None:
    """Tests: undo a `schedule` call."""
    _DECLARED.pop(name, None)
