"""One client's position in the feed: a cursor over the global sequence plus a filter.

`poll()` returns every matching receipt with cursor < seq <= the feed's horizon, from the
feed's ring when the cursor is inside it, else from the database page by page. The
cursor then moves to what was read, never past the horizon, so a client resuming from
any id it was sent (E-2 `Last-Event-ID`) gets exactly what came after it.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field
from typing import Any

from receipts.live import db, reads
from receipts.live.feed import Feed, Invalidation, Signal
from receipts.live.reads import Entry

PAGE = 500  # receipts per database read, and per flush to the client


@dataclass
class Filter:
    stream: str | None = None  # one stream exactly (job events)
    prefix: str = ""
    org: str | None = None  # org-bound principals see their organization only

    def matches(self, stream: str, org: str | None) -> bool:
        if self.stream is not None and stream != self.stream:
            return False
        if not stream.startswith(self.prefix):
            return False
        return self.org is None or org == self.org

    def query(self) -> dict[str, Any]:
        return {"stream": self.stream, "prefix": self.prefix, "org": self.org}

    def key(self) -> tuple[str | None, str, str | None]:
        return (self.stream, self.prefix, self.org)


@dataclass
class Follower:
    feed: Feed
    cursor: int
    filter: Filter
    seen_invalidation: int = 0
    polled_at: float = field(init=False, default_factory=time.monotonic)  # see snapshots
    # What the receipts of the last `poll` are: every match in (from, to] of this filter.
    # Final entries never change, so followers with the same range may share their frames.
    batch: tuple[int, int, tuple[str | None, str, str | None]] = field(
        init=False, default=(0, 0, (None, "", None))
    )
    _signal: Signal | None = field(init=False, default=None)
    _waiter: asyncio.Future[bool] | None = field(init=False, default=None)
    _timer: asyncio.TimerHandle | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.seen_invalidation = self.feed.invalidation_count

    async def poll(self) -> tuple[list[Entry], list[Invalidation]]:
        """What is new now; `wait` then returns on the next news after this call began."""
        self._signal = self.feed.signal(self.filter.stream)
        self.polled_at = time.monotonic()
        found: list[Entry] = []
        start = self.cursor
        while len(found) < PAGE:
            if self.cursor >= self.feed.floor:  # the ring reaches back to the cursor
                if self.filter.stream is not None:  # the stream's own entries: a few at most
                    found += self._matching(self.cursor)
                else:  # followers woken by the same pass mostly share a cursor: read once
                    found += self.feed.shared(
                        ("match", self.cursor, self.feed.horizon, self.filter.key()),
                        functools.partial(self._matching, self.cursor),
                    )
                self.cursor = max(self.cursor, self.feed.horizon)
                break
            upto = self.feed.floor  # behind the ring: read the database up to where it starts
            page = await db.run(
                reads.entries_between, self.cursor, upto, limit=PAGE, **self.filter.query()
            )
            found += page
            self.cursor = page[-1].seq if len(page) == PAGE else max(self.cursor, upto)
        self.batch = (start, self.cursor, self.filter.key())
        invalidations = [
            i
            for i in self.feed.invalidations_after(self.seen_invalidation)
            if self.filter.matches(i.stream, i.org)
        ]
        self.seen_invalidation = self.feed.invalidation_count
        return found, invalidations

    def _matching(self, cursor: int) -> list[Entry]:
        ring = self.feed.entries_after(cursor, stream=self.filter.stream) or []
        return [e for e in ring if self.filter.matches(e.stream, e.org)]

    async def wait(self, timeout: float) -> bool:
        """Until the feed changes after the last `poll` (True), or False once `timeout`
        has passed or earlier: callers re-check their own deadline and wait again."""
        signal = self._signal
        if signal is None or signal.is_set:
            return True  # never polled, or news since the poll: poll first
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        # One timer per follower, kept across waits while it is due no later than this
        # deadline (an early wake-up is a cheap re-check): a client woken by every batch
        # does not create and cancel a timer each time.
        if self._timer is None or self._timer.when() > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._expire)
        waiter = self._waiter = loop.create_future()
        signal.add(waiter)
        try:
            return await waiter
        finally:
            signal.discard(waiter)
            self._waiter = None

    def interrupt(self) -> None:
        """End a pending `wait` now (it returns True); the caller re-checks why."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(True)

    def _expire(self) -> None:
        self._timer = None
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(False)

    def close(self) -> None:
        """Drop the timer (it would keep this follower alive until it fires)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
