"""One client's position in the feed: a cursor over the global sequence plus a filter.

`poll()` returns every matching receipt with cursor < seq <= the feed's horizon, from the
feed's ring when the cursor is inside it, else from the database page by page. The
cursor then moves to what was read, never past the horizon, so a client resuming from
any id it was sent (E-2 `Last-Event-ID`) gets exactly what came after it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from jobs.live import db, reads
from jobs.live.feed import Feed, Invalidation
from jobs.live.reads import Entry

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


@dataclass
class Follower:
    feed: Feed
    cursor: int
    filter: Filter
    seen_invalidation: int = 0
    polled_at: float = field(init=False, default_factory=time.monotonic)  # see snapshots
    _signal: asyncio.Event | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.seen_invalidation = self.feed.invalidation_count

    async def poll(self) -> tuple[list[Entry], list[Invalidation]]:
        """What is new now; `wait` then returns on the next news after this call began."""
        self._signal = self.feed.signal(self.filter.stream)
        self.polled_at = time.monotonic()
        found: list[Entry] = []
        while len(found) < PAGE:
            ring = self.feed.entries_after(self.cursor)
            if ring is not None:
                found += [e for e in ring if self.filter.matches(e.stream, e.org)]
                self.cursor = max(self.cursor, self.feed.horizon)
                break
            upto = self.feed.floor  # behind the ring: read the database up to where it starts
            page = await db.run(
                reads.entries_between, self.cursor, upto, limit=PAGE, **self.filter.query()
            )
            found += page
            self.cursor = page[-1].seq if len(page) == PAGE else max(self.cursor, upto)
        invalidations = [
            i
            for i in self.feed.invalidations_after(self.seen_invalidation)
            if self.filter.matches(i.stream, i.org)
        ]
        self.seen_invalidation = self.feed.invalidation_count
        return found, invalidations

    async def wait(self, timeout: float) -> bool:
        """Until the feed changes after the last `poll` (True) or `timeout` passes (False)."""
        if self._signal is None:
            return True  # never polled: poll first
        return await self.feed.wait(self._signal, timeout)
