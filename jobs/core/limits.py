"""Rate limits and per-key caps as data, and the rules that need no database.

A limit covers the jobs of some kinds (a kind, or a Django task's path) and/or some
worker groups. It has a rate (at most N starts in any window of a period, shared by every
process), a concurrency cap (at most K running at once), or both. A cap may be per key:
the key's value comes from the job's payload (a dotted path) or, for a Django task, from
its argument of that name; each value has its own K slots.

A job's concurrency cap is the first declared limit with a cap that covers it; every rate
that covers it applies. The worker asks for them as the attempt begins (`jobs.limits`);
refused, the job stays queued and its delivery is held: until a slot of its key frees
(a running job of the key leaves running, in that transaction), or until the rate's
window has room again.

Pure: no clock, no database. Times are milliseconds since the epoch.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jobs.core.declared import parse_array
from jobs.core.state import is_int

MAX_NAME: Final = 64
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d*)\s*(s|m|h|d)\s*")
_UNIT_MS: Final = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_RATE: Final = 10_000  # starts per window: one ring slot each
MAX_PERIOD_MS: Final = 7 * 86_400_000
MAX_CONCURRENCY: Final = 100_000
MAX_KEY_TEXT: Final = 100  # a longer key value is kept as its hash
_FIELDS: Final = ("name", "kinds", "queues", "rate", "concurrency", "key")
# A held delivery of a capped key waits for a wake, not a time: its due time is this.
UNTIL_WOKEN_MS: Final = 2**62
HELD_RATE: Final = "rate"
HELD_CAP: Final = "cap"


class LimitError(ValueError):
    """A limit that cannot be declared; the message names the limit and field."""


@dataclass(frozen=True)
class Limit:
    name: str
    kinds: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    rate: int | None = None  # starts per `per_ms`
    per_ms: int = 1_000
    concurrency: int | None = None
    key: str | None = None  # payload path or task argument: one cap per value

    def __post_init__(self) -> None:
        check(self)

    def covers(self, kind: str, task: str | None, group: str) -> bool:
        return (
            kind in self.kinds
            or (task is not None and task in self.kinds)
            or (group in self.queues)
        )

    @property
    def rate_text(self) -> str | None:
        if self.rate is None:
            return None
        for unit, ms in sorted(_UNIT_MS.items(), key=lambda item: -item[1]):
            if self.per_ms % ms == 0:
                count = self.per_ms // ms
                return f"{self.rate}/{'' if count == 1 else count}{unit}"
        raise AssertionError("periods are whole seconds")  # pragma: no cover

    def to_wire(self) -> dict[str, Any]:
        """The fields that are set (`rate` as its text: None without a rate)."""
        wire = {
            "name": self.name,
            "kinds": list(self.kinds) or None,
            "queues": list(self.queues) or None,
            "rate": self.rate_text,
            "concurrency": self.concurrency,
            "key": self.key,
        }
        return {key: value for key, value in wire.items() if value is not None}


def parse_rate(text: Any) -> tuple[int, int]:
    """`"60/m"`, `"5/10s"`, `"1000/h"` -> (starts, period in ms)."""
    match = _RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise LimitError(f"rate must look like '60/m' or '5/10s' (s, m, h, d), got {text!r}")
    starts, count, unit = int(match[1]), int(match[2] or 1), match[3]
    per_ms = count * _UNIT_MS[unit]
    if not 1 <= starts <= MAX_RATE:
        raise LimitError(f"rate allows 1..{MAX_RATE} starts per period, got {starts}")
    if not 1_000 <= per_ms <= MAX_PERIOD_MS:
        raise LimitError(f"rate's period must be 1 s..7 d, got {text!r}")
    return starts, per_ms


def check(limit: Limit) -> None:
    name = limit.name
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > MAX_NAME:
        raise LimitError(
            f"name must be 1..{MAX_NAME} of a-z, 0-9, '.', '_', '-' starting with a letter "
            f"or digit, got {name!r}"
        )
    for field in ("kinds", "queues"):
        value = getattr(limit, field)
        if not isinstance(value, tuple) or not all(
            isinstance(item, str) and 0 < len(item) <= 200 for item in value
        ):
            raise LimitError(f"limit {name!r}: {field} must be a list of names")
    if not limit.kinds and not limit.queues:
        raise LimitError(f"limit {name!r}: names no kinds and no queues, so covers nothing")
    if limit.rate is None and limit.concurrency is None:
        raise LimitError(f"limit {name!r}: has neither a rate nor a concurrency")
    if limit.rate is not None and not (
        is_int(limit.rate) and 1 <= limit.rate <= MAX_RATE and is_int(limit.per_ms)
    ):
        raise LimitError(f"limit {name!r}: rate must allow 1..{MAX_RATE} starts")
    if limit.concurrency is not None and not (
        is_int(limit.concurrency) and 1 <= limit.concurrency <= MAX_CONCURRENCY
    ):
        raise LimitError(f"limit {name!r}: concurrency must be an integer in 1..{MAX_CONCURRENCY}")
    if limit.key is not None:
        if limit.concurrency is None:
            raise LimitError(f"limit {name!r}: a key divides a concurrency cap; it has none")
        if not isinstance(limit.key, str) or not re.fullmatch(r"[A-Za-z_][\w.]{0,99}", limit.key):
            raise LimitError(
                f"limit {name!r}: key must be a payload path like 'customer.id' or a task "
                f"argument name, got {limit.key!r}"
            )


def from_wire(wire: Any, *, where: str = "limit") -> Limit:
    if not isinstance(wire, Mapping):
        raise LimitError(f"{where} must be an object, got {type(wire).__name__}")
    name = wire.get("name")
    label = f"limit {name!r}" if isinstance(name, str) else where
    unknown = sorted(set(wire) - set(_FIELDS))
    if unknown:
        raise LimitError(f"{label}: unknown field {unknown[0]!r} (known: {', '.join(_FIELDS)})")
    lists = {}
    for field in ("kinds", "queues"):
        value = wire.get(field, ())
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise LimitError(f"{label}: {field} must be a list of names, got {value!r}")
        lists[field] = tuple(value)
    rate, per_ms = (None, 1_000)
    if wire.get("rate") is not None:
        try:
            rate, per_ms = parse_rate(wire["rate"])
        except LimitError as error:
            raise LimitError(f"{label}: {error}") from None
    return Limit(
        name=name,  # type: ignore[arg-type]  # checked by check()
        rate=rate,
        per_ms=per_ms,
        concurrency=wire.get("concurrency"),
        key=wire.get("key"),
        **lists,
    )


def parse_many(value: Any) -> tuple[Limit, ...]:
    """A JSON array of limits (text, or already parsed from a settings block); names are
    unique. Empty text declares none."""

    def item(raw: Any, index: int) -> Limit:
        return raw if isinstance(raw, Limit) else from_wire(raw, where=f"limit {index}")

    return parse_array(
        value, noun="limit", error=LimitError, item=item, name_of=lambda limit: limit.name
    )


@dataclass(frozen=True)
class Governing:
    """What limits a job's start: its cap (with the key it counts under) and its rates."""

    cap: Limit | None
    cap_key: str | None
    rates: tuple[Limit, ...]

    def __bool__(self) -> bool:
        return self.cap is not None or bool(self.rates)


NOTHING: Final = Governing(None, None, ())


def governing(
    limits: Sequence[Limit],
    *,
    kind: str,
    task: str | None,
    group: str,
    argument: Callable[[str], Any],
) -> Governing:
    """The limits over one job. `argument(path)`: the key's value in the job's payload or
    task arguments (`MISSING` when absent)."""
    covering = [limit for limit in limits if limit.covers(kind, task, group)]
    if not covering:
        return NOTHING
    cap = next((limit for limit in covering if limit.concurrency is not None), None)
    key = None
    if cap is not None:
        key = cap_key(cap, argument(cap.key) if cap.key is not None else MISSING)
    return Governing(cap, key, tuple(limit for limit in covering if limit.rate is not None))


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def cap_key(limit: Limit, value: Any) -> str:
    """The key a running job counts under: `<limit>` for a cap without a key (and for a
    job whose payload lacks it), `<limit>:<value>` per value."""
    if value is MISSING or limit.key is None:
        return limit.name
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    if len(text) > MAX_KEY_TEXT:
        text = "#" + hashlib.sha256(text.encode()).hexdigest()[:32]
    return f"{limit.name}:{text}"


def limit_name(key: str) -> str:
    return key.split(":", 1)[0]


def payload_value(payload: Any, path: str) -> Any:
    """A dotted path in a payload; MISSING where it does not lead to a value."""
    value = payload
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return MISSING
        value = value[part]
    return MISSING if value is None else value


def held_by(kind: str, limit: str, key: str | None = None) -> str:
    """What a held delivery names as holding it: `cap:<key>` (woken when a slot of the
    key frees) or `rate:<limit>` (due when the window has room)."""
    return f"{kind}:{key if key is not None else limit}"
