"""The geometry of the dashboard's "settled per minute" chart: one stacked bar per minute of
the last hour, failures at the bottom so they stand out. Pure: counts in, rectangles out.
`jobs/static/receipt/dashboard.js` draws the same bars on each refresh."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

WIDTH: Final = 600  # SVG user units, stretched to the panel's width (labels are HTML)
TOP: Final = 4  # headroom above the tallest bar
PLOT_HEIGHT: Final = 100
HEIGHT: Final = TOP + PLOT_HEIGHT
STACK: Final = ("failed", "completed", "canceled")  # bottom to top


@dataclass(frozen=True)
class Bar:
    status: str
    y: float
    height: float


@dataclass(frozen=True)
class Minute:
    at_ms: int
    x: float
    width: float
    counts: dict[str, int]
    bars: tuple[Bar, ...]


def peak(buckets: Sequence[Mapping[str, int]]) -> int:
    """The tallest minute's total, at least 1 so an idle hour draws flat."""
    return max([sum(b.get(s, 0) for s in STACK) for b in buckets] + [1])


def layout(buckets: Sequence[Mapping[str, int]]) -> list[Minute]:
    top = peak(buckets)
    step = WIDTH / max(len(buckets), 1)
    minutes = []
    for index, bucket in enumerate(buckets):
        base = float(TOP + PLOT_HEIGHT)
        bars = []
        for status in STACK:
            count = bucket.get(status, 0)
            if count:
                height = round(count * PLOT_HEIGHT / top, 2)
                base = round(base - height, 2)
                bars.append(Bar(status, base, height))
        minutes.append(
            Minute(
                at_ms=bucket["at"],
                x=round(index * step + 1, 2),
                width=round(max(step - 2, 1), 2),
                counts={s: bucket.get(s, 0) for s in STACK},
                bars=tuple(bars),
            )
        )
    return minutes
