"""Which settled job streams retention removes, and when (pure).

Job streams fall in retention families by kind: the per-minute watchdog and objective
control jobs are bookkeeping, kept for days; every other job is kept for the default
window. A family's candidates are found per terminal status, so each scan walks the
(status, updated_at) index in order. This module owns those rules; it must not know how
jobs are stored or removed (`jobs.retention` does that).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from jobs.core.vocabulary import TERMINAL_STATUSES
from receipts.core.retention import cutoff_ms

DEFAULT, WATCHDOG, CONTROL = "default", "watchdog", "control"
FAMILIES: Final[tuple[str, ...]] = (WATCHDOG, CONTROL, DEFAULT)  # shortest windows first
# The kinds of each family but the default, which holds every other kind (and none).
FAMILY_KINDS: Final[dict[str, tuple[str, ...]]] = {
    WATCHDOG: ("factory.objective.watchdog",),
    CONTROL: ("factory.objective.control",),
}
SPECIAL_KINDS: Final[tuple[str, ...]] = tuple(k for ks in FAMILY_KINDS.values() for k in ks)


@dataclass(frozen=True)
class Windows:
    """Days a settled job stream is kept, per family."""

    default_days: int = 30
    watchdog_days: int = 2
    control_days: int = 7

    def days(self, family: str) -> int:
        return {
            DEFAULT: self.default_days,
            WATCHDOG: self.watchdog_days,
            CONTROL: self.control_days,
        }[family]

    def as_dict(self) -> dict[str, int]:
        return {family: self.days(family) for family in FAMILIES}

    def overridden(self, days: int | None) -> Windows:
        """Every family at `days` (an operator's `--older-than-days`), or self for None."""
        if days is None:
            return self
        return replace(self, default_days=days, watchdog_days=days, control_days=days)


@dataclass(frozen=True)
class Lane:
    """One candidate scan: settled jobs of `family` in `status` last updated before
    `cutoff_ms`; `kinds` the family's kinds, or None for the default family, which
    excludes `excluded_kinds` (those belong to another family's window)."""

    family: str
    status: str
    cutoff_ms: int
    kinds: tuple[str, ...] | None
    excluded_kinds: tuple[str, ...] = ()


def lanes(windows: Windows, *, now_ms: int) -> list[Lane]:
    out = []
    for family in FAMILIES:
        cutoff = cutoff_ms(now_ms, windows.days(family))
        for status in sorted(TERMINAL_STATUSES):  # settled only: active jobs never appear
            if family == DEFAULT:
                out.append(Lane(family, status, cutoff, None, SPECIAL_KINDS))
            else:
                out.append(Lane(family, status, cutoff, FAMILY_KINDS[family]))
    return out
