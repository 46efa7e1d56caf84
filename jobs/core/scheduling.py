"""When a job may start, and where its deliveries stand in their group's queue (G-3, G-4).

Pure: times arrive as arguments, settings as values.

- A delayed job carries `runAt` (epoch ms). Every driver promise opened for it before
  that time is opened *scheduled*: it waits, out of every take's reach, until the due
  loop releases it (`jobs.runtime.due`). A `runAt` not in the future means now.
- Priority (-100..100, default 0) orders a group's deliveries by *take order*: the time a
  delivery became deliverable, moved earlier by `aging_ms` per point of priority. Higher
  priority is taken first among deliveries that became deliverable within that lead of
  each other, and a waiting delivery is never passed by one that became deliverable more
  than 200 points' worth of aging after it: priorities age instead of starving
  (docs/decisions.md, "Priorities age").
"""

from __future__ import annotations

from typing import Final

MIN_PRIORITY: Final = -100
MAX_PRIORITY: Final = 100
DEFAULT_PRIORITY: Final = 0
DEFAULT_PRIORITY_AGING_MS: Final = 60_000  # one point of priority = a minute of waiting
MAX_SCHEDULE_AHEAD_MS: Final = 366 * 86_400_000  # a runAt at most a year (and a day) ahead


def is_priority(value: object) -> bool:
    """An integer (not a bool) in MIN_PRIORITY..MAX_PRIORITY."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and MIN_PRIORITY <= value <= MAX_PRIORITY
    )


def due_at(run_at: int | None, now_ms: int) -> int | None:
    """The time a delivery opened at `now_ms` must wait for: the job's `runAt` while it
    is still ahead, else None (deliverable at once)."""
    return run_at if run_at is not None and run_at > now_ms else None


def take_order(start_ms: int, priority: int, aging_ms: int) -> int:
    """Where a delivery stands in its group's queue (lower is taken first): the time it
    became deliverable (its creation, or its due time), less `aging_ms` per point of
    priority."""
    return start_ms - priority * aging_ms


def take_order_sql(start: str, priority: str, aging: str) -> str:
    """`take_order` as a SQL expression of the expressions given."""
    return f"({start} - ({priority}) * ({aging}))"
