"""The stable horizon: the highest global sequence below which nothing can still appear.

`seq` comes from a PostgreSQL sequence, taken when a receipt row is inserted, but
transactions commit in any order: a reader can see 105 committed while 104 is still in
flight and commits a moment later. A client that advanced its cursor to 105 would lose
104 for good. So live views never deliver past the horizon H, where every seq <= H is
either committed or will never exist (rolled back).

PostgreSQL: one statement reads `max(seq)` (its snapshot) and then `pg_locks` for the
transactions that may insert into receipt_receipt. Any transaction still holding an
unseen seq below that max took its RowExclusiveLock before drawing the seq and keeps it
until it ends, so the max becomes final once all of those lock holders are gone. With no
holder it is final at once; otherwise it waits as a candidate until a later probe shows
its holders gone (usually the next NOTIFY, which their own commit sends). Unrelated long
transactions do not hold the horizon back; only open receipt writers do, as they must.

SQLite has one writer at a time, so sequences commit in order and `max(seq)` is final.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection

MAX_CANDIDATES = 256
# Table lock modes that allow inserting rows; readers (AccessShare), SELECT FOR UPDATE
# (RowShare), CREATE INDEX (Share) and VACUUM (ShareUpdateExclusive) cannot draw a seq.
_WRITER_MODES = (
    "RowExclusiveLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
)
_PG_PROBE = (
    "SELECT COALESCE((SELECT max(seq) FROM receipt_receipt), 0), "
    "ARRAY(SELECT DISTINCT virtualtransaction FROM pg_locks "
    "      WHERE relation = 'receipt_receipt'::regclass AND granted "
    # pg_locks covers every database; a copy of this one (a template clone) has the same
    # table oid, and its writers must not hold this horizon back
    "        AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "        AND mode = ANY(%s) AND pid <> pg_backend_pid())"
)


@dataclass(frozen=True)
class Probe:
    max_seq: int
    writers: frozenset[str]  # virtual transaction ids that may hold unseen seqs


def probe() -> Probe:
    """Read the visible max seq and the open receipt writers (call on a live pool thread)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(_PG_PROBE, [list(_WRITER_MODES)])
            max_seq, writers = cursor.fetchone()
            return Probe(int(max_seq), frozenset(writers or ()))
        cursor.execute("SELECT COALESCE(max(seq), 0) FROM receipt_receipt")
        return Probe(int(cursor.fetchone()[0]), frozenset())


@dataclass
class Horizon:
    """Folds probes into the stable horizon. Pure: no I/O, no clock."""

    stable: int | None = None  # None until the first candidate is proved
    candidates: list[tuple[int, frozenset[str]]] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        return bool(self.candidates)

    def observe(self, probe: Probe) -> int | None:
        waiting = []
        for max_seq, writers in self.candidates:
            if writers.isdisjoint(probe.writers):  # all of them have ended since
                self._raise(max_seq)
            else:
                waiting.append((max_seq, writers))
        if not probe.writers:
            self._raise(probe.max_seq)
        elif self.stable is None or probe.max_seq > self.stable:
            newest = waiting[-1][0] if waiting else None
            if (newest is None or probe.max_seq > newest) and len(waiting) < MAX_CANDIDATES:
                waiting.append((probe.max_seq, probe.writers))
        self.candidates = [c for c in waiting if self.stable is None or c[0] > self.stable]
        return self.stable

    def _raise(self, seq: int) -> None:
        if self.stable is None or seq > self.stable:
            self.stable = seq
