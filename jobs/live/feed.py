"""The change feed: one per process (per event loop), shared by every live client.

One advancer task turns wake-ups (PostgreSQL NOTIFY through `listener`, a timer on
SQLite, an A-7 callback) into a moving stable horizon (`horizon`) and reads, once for
the whole process, the positions of the receipts that became final. They go into a ring
of recent entries. Waiting clients are woken through events: a client of one stream
(job events, wait) waits on that stream's event, set only when the stream has news, so
an append to one job wakes that job's clients and not the thousand others; clients of a
prefix wait on the shared event. A woken client picks its own entries from the ring, so
an idle client costs a cursor and no database connection, and an append costs one query
per process, not one per client. Clients that fell behind the ring read the database
instead (`follower`).

Must not: start at import (the test client and WSGI never pay for it), touch a client's
request context, or deliver a sequence above the stable horizon.
"""

from __future__ import annotations

import asyncio
import bisect
import contextvars
import json
import logging
import weakref
from collections import deque
from typing import NamedTuple

from django.db import connections

from jobs.live import db, horizon, listener, reads
from jobs.live.config import CONFIG
from jobs.live.reads import Entry
from observability.logs import log_event

logger = logging.getLogger("receipt.live")
PENDING_RECHECK_S = 0.05  # a candidate horizon waits on open writers; aborts send no NOTIFY
PG_SAFETY_POLL_S = 2.0  # NOTIFY is the wake-up on PostgreSQL; this only bounds the worst case
MIN_INTERVAL_S = 0.005  # coalesces a burst of notifications into one probe
READY_TIMEOUT_S = 10.0
INVALIDATIONS_KEPT = 1024
MAX_BACKOFF_S = 5.0


class FeedUnavailable(Exception):
    """The feed could not read the database in time (503 `live_unavailable`)."""


class Invalidation(NamedTuple):
    number: int
    stream: str
    type: str
    org: str | None


class Feed:
    def __init__(self, *, postgres: bool, ring_size: int = CONFIG.ring_size) -> None:
        self.postgres = postgres
        self.ring_size = ring_size
        self.horizon = 0  # every seq <= horizon is final (jobs.live.horizon)
        self.floor = 0  # the ring holds every entry with floor < seq <= horizon
        self.invalidation_count = 0
        self._entries: list[Entry] = []
        self._invalidations: deque[Invalidation] = deque(maxlen=INVALIDATIONS_KEPT)
        self._tracker = horizon.Horizon()
        self._changed = asyncio.Event()  # any news (clients of a prefix)
        # news on one stream; weak: a client that went away leaves nothing behind
        self._by_stream: weakref.WeakValueDictionary[str, asyncio.Event] = (
            weakref.WeakValueDictionary()
        )
        self._nudged = asyncio.Event()
        self._ready = asyncio.Event()
        self._resync = False
        self._passes_started = 0
        self._passes_done = 0
        self._pass_done = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        # An empty context: the tasks outlive the request that started them, and must not
        # inherit its ThreadSensitiveContext or anything else scoped to that request.
        context = contextvars.Context()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._advance_forever(), context=context))
        if self.postgres:
            self._tasks.append(
                loop.create_task(
                    listener.listen(
                        on_receipt=self.nudge,
                        on_invalidate=self._invalidated_elsewhere,
                        on_connected=self._reconnected,
                    ),
                    context=context,
                )
            )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    @property
    def alive(self) -> bool:
        return bool(self._tasks) and not any(task.done() for task in self._tasks)

    async def ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._ready.wait()
        except TimeoutError:
            raise FeedUnavailable("live events cannot read the database right now") from None

    async def catch_up(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Return after a probe that started after this call: the horizon then covers every
        receipt committed before the client connected, so `init` reflects "now"."""
        target = self._passes_started + 1
        self.nudge()
        try:
            async with asyncio.timeout(timeout):
                while self._passes_done < target:
                    await self._pass_done.wait()
        except TimeoutError:
            raise FeedUnavailable("live events cannot read the database right now") from None

    # ---- what clients read (event loop only) -----------------------------------------------

    def entries_after(self, cursor: int) -> list[Entry] | None:
        """Final entries with seq > cursor, or None when the ring no longer reaches back."""
        if cursor < self.floor:
            return None
        start = bisect.bisect_right(self._entries, cursor, key=lambda e: e.seq)
        return self._entries[start:]

    def invalidations_after(self, number: int) -> list[Invalidation]:
        return [i for i in self._invalidations if i.number > number]

    def signal(self, stream: str | None) -> asyncio.Event:
        """The event set on the next news for `stream` (None: any news). Take it *before*
        reading the ring, then wait on it: nothing published in between can be missed."""
        if stream is None:
            return self._changed
        event = self._by_stream.get(stream)
        if event is None:
            event = self._by_stream[stream] = asyncio.Event()
        return event

    @staticmethod
    async def wait(signal: asyncio.Event, timeout: float) -> bool:
        """Until `signal` is set (True) or `timeout` passes (False)."""
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                await signal.wait()
        except TimeoutError:
            return False
        return True

    # ---- what moves it (event loop only) -------------------------------------------------------

    def nudge(self) -> None:
        self._nudged.set()

    def invalidate(self, stream: str, event_type: str, org: str | None) -> None:
        """A-7: tell clients of `stream` to re-check, and re-probe in case it was a write."""
        self.invalidation_count += 1
        self._invalidations.append(Invalidation(self.invalidation_count, stream, event_type, org))
        self._wake([stream])
        self.nudge()

    def _invalidated_elsewhere(self, payload: str) -> None:
        try:
            body = json.loads(payload)
            self.invalidate(body["stream"], body["type"], body.get("org"))
        except (ValueError, KeyError, TypeError):
            log_event(
                logger,
                "live.bad_invalidation",
                "ignored a malformed invalidation",
                level=logging.WARNING,
            )

    def _reconnected(self) -> None:
        # Wake everyone once the listener is back: they re-read from their own cursors.
        self._resync = True
        self.nudge()

    def _wake(self, streams: list[str] | None) -> None:
        """Wake clients of `streams` and of any prefix; None wakes every client."""
        self._changed.set()
        self._changed = asyncio.Event()
        if streams is None:
            events = list(self._by_stream.values())
            self._by_stream.clear()
        else:
            events = [e for s in set(streams) if (e := self._by_stream.pop(s, None)) is not None]
        for event in events:
            event.set()

    # ---- the advancer --------------------------------------------------------------------------

    async def _advance_forever(self) -> None:
        delay = PENDING_RECHECK_S
        idle_s = PG_SAFETY_POLL_S if self.postgres else CONFIG.poll_ms / 1000
        while True:
            self._nudged.clear()  # a nudge during the probe below makes another pass
            self._passes_started += 1
            failure: Exception | None = None
            try:
                await self._advance()
            except Exception as error:  # the database is down or busy: keep trying
                failure = error
            self._passes_done = self._passes_started  # even a failed pass: nobody hangs on it
            self._pass_done.set()
            self._pass_done = asyncio.Event()
            if failure is not None:
                log_event(
                    logger,
                    "live.feed_error",
                    f"live events feed cannot advance: {failure}",
                    level=logging.WARNING,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            delay = PENDING_RECHECK_S
            await asyncio.sleep(MIN_INTERVAL_S)
            timeout = PENDING_RECHECK_S if self._tracker.pending else idle_s
            try:
                async with asyncio.timeout(timeout):
                    await self._nudged.wait()
            except TimeoutError:
                pass

    async def _advance(self) -> None:
        stable = self._tracker.observe(await db.run(horizon.probe))
        if stable is None:
            return
        if not self._ready.is_set():
            self.horizon = self.floor = stable  # history before the first client is in the DB
            self._ready.set()
            return
        if stable > self.horizon:
            entries = await db.run(
                reads.entries_between, self.horizon, stable, limit=self.ring_size, newest=True
            )
            self._extend(entries, stable)
        elif self._resync:
            self._resync = False
            self._wake(None)

    def _extend(self, entries: list[Entry], stable: int) -> None:
        truncated = len(entries) >= self.ring_size
        if truncated:  # a burst larger than the ring: keep its tail
            self._entries = entries
            self.floor = entries[0].seq - 1
        else:
            self._entries.extend(entries)
            if len(self._entries) > self.ring_size * 5 // 4:  # trim in chunks, not per append
                drop = len(self._entries) - self.ring_size
                self.floor = self._entries[drop - 1].seq
                del self._entries[:drop]
        self.horizon = stable
        # Everyone after a truncation or a reconnect: their cursors may now be behind.
        self._wake(None if truncated or self._resync else [e.stream for e in entries])
        self._resync = False


_feeds: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Feed] = weakref.WeakKeyDictionary()


def existing() -> Feed | None:
    """This loop's feed if a live client already started it."""
    feed = _feeds.get(asyncio.get_running_loop())
    return feed if feed is not None and feed.alive else None


async def running() -> Feed:
    """This loop's feed, started on first use; raises FeedUnavailable if it cannot read."""
    loop = asyncio.get_running_loop()
    feed = _feeds.get(loop)
    if feed is None or not feed.alive:
        if feed is not None:  # a task died (logged); never leave its listener behind
            await feed.stop()
        feed = Feed(postgres=connections["default"].vendor == "postgresql")
        _feeds[loop] = feed
        feed.start()
    await feed.ready()
    return feed
