"""The change feed: one per process (per event loop), shared by every live client.

One advancer task turns wake-ups (PostgreSQL NOTIFY through `listener`, a timer on
SQLite, an A-7 callback) into a moving stable horizon (`horizon`) and reads, once for
the whole process, the positions of the receipts that became final. They go into a ring
of recent entries (indexed by stream too). Waiting clients are woken through signals: a
client of one stream (job events, wait) waits on that stream's signal, set only when the
stream has news, so an append to one job wakes that job's clients and not the thousand
others; clients of a prefix wait on the shared signal. A woken client picks its own
entries from the ring, so an idle client costs a cursor and no database connection, and
an append costs one query per process, not one per client. Clients woken together share
the filtering and rendering of the same batch (`shared`). Clients that fell behind the
ring read the database instead (`follower`).

Must not: start at import (the test client and WSGI never pay for it), touch a client's
request context, or deliver a sequence above the stable horizon.
"""

from __future__ import annotations

import asyncio
import bisect
import contextvars
import json
import logging
import operator
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Hashable
from typing import NamedTuple, TypeVar, cast

from django.db import connections

from observability.logs import log_event
from receipts.live import db, horizon, listener, reads
from receipts.live.config import CONFIG
from receipts.live.reads import Entry

logger = logging.getLogger("receipt.live")
PENDING_RECHECK_S = 0.05  # a candidate horizon waits on open writers; aborts send no NOTIFY
PG_SAFETY_POLL_S = 2.0  # NOTIFY is the wake-up on PostgreSQL; this only bounds the worst case
MIN_INTERVAL_S = 0.005  # coalesces a burst of notifications into one probe
# After a pass that woke clients, the next pass waits as long as the loop spent on their
# wake-ups, up to MAX_COALESCE_S (T-6): with a thousand clients each wake-up is a poll and
# a socket write per client, so under a steady stream of receipts the feed puts more
# receipts in each wake-up instead of spending the whole loop on wake-ups (other requests
# keep at least half of it); with few clients it stays at MIN_INTERVAL_S.
MAX_COALESCE_S = 0.1
READY_TIMEOUT_S = 10.0
INVALIDATIONS_KEPT = 1024
MAX_BACKOFF_S = 5.0


T = TypeVar("T")
_SEQ = operator.itemgetter(0)  # Entry.seq, for bisect
_MISSING = object()


class FeedUnavailable(Exception):
    """The feed could not read the database in time (503 `database_unavailable`)."""


class Signal:
    """Set once, on the next news, waking every future added to it. Followers bring their
    own futures and deadlines (`follower.Follower.wait`): `asyncio.Event` under
    `asyncio.timeout` costs a new timer per wait, and a thousand clients wait again after
    every batch (T-6)."""

    __slots__ = ("__weakref__", "_waiters", "is_set")

    def __init__(self) -> None:
        self.is_set = False
        self._waiters: dict[asyncio.Future[bool], None] = {}

    def add(self, waiter: asyncio.Future[bool]) -> None:
        self._waiters[waiter] = None

    def discard(self, waiter: asyncio.Future[bool]) -> None:
        self._waiters.pop(waiter, None)

    def set(self) -> None:
        self.is_set = True
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(True)


class Invalidation(NamedTuple):
    number: int
    stream: str
    type: str
    org: str | None


class Feed:
    def __init__(self, *, postgres: bool, ring_size: int = CONFIG.ring_size) -> None:
        self.postgres = postgres
        self.ring_size = ring_size
        self.horizon = 0  # every seq <= horizon is final (receipts.live.horizon)
        self.floor = 0  # the ring holds every entry with floor < seq <= horizon
        self.invalidation_count = 0
        self._entries: list[Entry] = []
        self._streams: dict[str, list[Entry]] = {}  # the ring by stream, for stream followers
        self._invalidations: deque[Invalidation] = deque(maxlen=INVALIDATIONS_KEPT)
        self._tracker = horizon.Horizon()
        self._changed = Signal()  # any news (clients of a prefix)
        # news on one stream; weak: a client that went away leaves nothing behind
        self._by_stream: weakref.WeakValueDictionary[str, Signal] = weakref.WeakValueDictionary()
        self._nudged = asyncio.Event()
        self._ready = asyncio.Event()
        self._resync = False
        self._passes_started = 0
        self._passes_done = 0
        self._pass_done = asyncio.Event()
        self._woke = False  # the last pass woke clients
        self._coalescing = False  # passes are spaced by their fan-out (MAX_COALESCE_S)
        self._shared: dict[object, object] = {}  # see `shared`; emptied when the horizon moves
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

    def entries_after(self, cursor: int, *, stream: str | None = None) -> list[Entry] | None:
        """Final entries with seq > cursor (of `stream` only, if given), or None when the
        ring no longer reaches back."""
        if cursor < self.floor:
            return None
        entries = self._entries if stream is None else self._streams.get(stream, [])
        return entries[bisect.bisect_right(entries, cursor, key=_SEQ) :]

    def invalidations_after(self, number: int) -> list[Invalidation]:
        if not self._invalidations or self._invalidations[-1].number <= number:
            return []
        return [i for i in self._invalidations if i.number > number]

    def shared(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, once per horizon for every client asking with the same key. The key
        must determine the value given final entries (a cursor range and a filter): clients
        woken by one pass mostly read the same range, so they share its work and its bytes."""
        found = self._shared.get(key, _MISSING)
        if found is _MISSING:
            found = self._shared[key] = compute()
        return cast(T, found)

    def signal(self, stream: str | None) -> Signal:
        """The event set on the next news for `stream` (None: any news). Take it *before*
        reading the ring, then wait on it: nothing published in between can be missed."""
        if stream is None:
            return self._changed
        event = self._by_stream.get(stream)
        if event is None:
            event = self._by_stream[stream] = Signal()
        return event

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
        self._woke = True
        self._changed.set()
        self._changed = Signal()
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
            pause = MIN_INTERVAL_S
            if self._woke:
                self._woke = False
                woke_at = time.thread_time()
                await asyncio.sleep(0)  # queued behind every client this pass woke
                # the loop's own CPU time: on a busy machine the wall time also counts the
                # time other processes had the CPU, and pausing for that only adds latency
                pause = min(max(pause, time.thread_time() - woke_at), MAX_COALESCE_S)
            self._coalescing = pause > MIN_INTERVAL_S
            await asyncio.sleep(pause)
            timeout = PENDING_RECHECK_S if self._tracker.pending else idle_s
            try:
                async with asyncio.timeout(timeout):
                    await self._nudged.wait()
            except TimeoutError:
                pass

    async def _advance(self) -> None:
        stable = self._tracker.observe(await db.run(horizon.probe))
        if self._coalescing and self._tracker.pending and self._ready.is_set():
            # The writers that probe saw usually end within milliseconds. Passes are far
            # apart now, so look once more before publishing: what committed before this
            # pass goes out with it, not a whole fan-out and pause later.
            await asyncio.sleep(MIN_INTERVAL_S)
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
            self._streams = {}
            self.floor = entries[0].seq - 1
        else:
            self._entries.extend(entries)
        for entry in entries:
            self._streams.setdefault(entry.stream, []).append(entry)
        if len(self._entries) > self.ring_size * 5 // 4:  # trim in chunks, not per append
            drop = len(self._entries) - self.ring_size
            self.floor = self._entries[drop - 1].seq
            for stream, count in Counter(e.stream for e in self._entries[:drop]).items():
                kept = self._streams[stream]
                if len(kept) == count:
                    del self._streams[stream]
                else:
                    del kept[:count]  # a stream's entries are in seq order: the oldest go
            del self._entries[:drop]
        self.horizon = stable
        self._shared = {}
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
