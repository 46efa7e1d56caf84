"""The single append and what reads it: a stream locked, sealed onto and projected in
one transaction (S-3 to S-9), the reads of receipts and stream rows, and verification.

Appends lock the stream row (an upsert that returns the head: a row lock on
PostgreSQL, the database write lock of an IMMEDIATE transaction on SQLite), seal the
receipts onto the head, insert them, run the family's projector in the same
transaction (S-5), move the head and, on PostgreSQL, `pg_notify` (S-9).
Each row keeps the canonical text its hash covers (`sealed`) beside the JSON columns:
reads decode body and context from that text, so every reader (folds, the API, the
admin) gets exactly what was sealed on either database, and verification checks both.
Callers go through the `receipts.store` facade. Nothing here updates or deletes a
receipt row.
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from receipts import registry
from receipts.clock import now_ms as wall_clock_ms
from receipts.core.canonical import check_json
from receipts.core.chain import (
    ChainWalk,
    Receipt,
    StreamRecord,
    Verification,
    check_against_head,
    seal,
    unseal,
)
from receipts.core.chain import fold as fold_receipts
from receipts.core.chain import state_at as state_at_receipts
from receipts.core.storable import first_unstorable
from receipts.db import in_pipeline
from receipts.db.one_statement import gathering
from receipts.errors import ExpectedPrevMismatch, InvalidEvent, PartialEventIds
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow
from receipts.writer import Writer

# Who wants to know how long appends take (the jobs app feeds a /metrics histogram): called
# with the stream, the seconds one append took (sealing, insert, projector) and its receipts.
append_observers: list[Callable[[str, float, int], None]] = []


def observe(stream: str, started: float, receipts: int) -> None:
    if append_observers:
        elapsed = time.perf_counter() - started
        for observer in append_observers:
            observer(stream, elapsed, receipts)


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()  # expected_prev default: no head check (None means "the stream must be new")
MAX_STREAM_NAME = 255
_NUL_ESCAPE = "\\u0000"  # how canonical JSON writes U+0000
_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f]")  # \s is str.isspace()


def check_stream_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > MAX_STREAM_NAME:
        raise InvalidEvent(f"stream name must be 1..{MAX_STREAM_NAME} characters")
    if _SPACE_OR_CONTROL.search(name):
        raise InvalidEvent(f"stream name {name!r} contains whitespace or control characters")


@dataclass
class StreamHandle:
    """A stream locked for the current transaction; appends go through it."""

    name: str
    head: str | None
    count: int
    existed: bool
    writer: Writer
    cache: dict[str, Any] = field(default_factory=dict)  # shared by services and projectors
    read: list[tuple[Any, ...]] = field(default_factory=list)  # rows of open_stream's `read`
    appended: list[Receipt] = field(default_factory=list)

    def append(
        self,
        events: Sequence[dict[str, Any]] | dict[str, Any],
        *,
        expected_prev: Any = ANY,
        event_id: str | None = None,
        context: dict[str, Any] | None = None,
        hints: dict[str, Any] | None = None,
        now_ms: int | None = None,
    ) -> list[Receipt]:
        started = time.perf_counter()
        batch = [events] if isinstance(events, dict) else list(events)
        if not batch:
            raise InvalidEvent("append needs at least one event")
        event_ids = _event_ids(event_id, len(batch))
        if event_ids:
            existing = _existing_for_event_ids(self.name, event_ids)
            if len(existing) == len(event_ids):
                return existing  # the command already happened: idempotent (S-4)
            if existing:
                raise PartialEventIds(
                    f"event ids of one command partly exist on {self.name}: "
                    f"{sorted(r.hints['eventId'] for r in existing if r.hints)}"
                )
        if expected_prev is not ANY and expected_prev != self.head:
            raise ExpectedPrevMismatch(expected_prev, self.head)
        ts = wall_clock_ms() if now_ms is None else now_ms
        _check_hints(hints, event_id, self.name)
        sealed = []
        prev = self.head
        for index, body in enumerate(batch):
            receipt_hints = dict(hints or {})
            if event_ids:
                receipt_hints["eventId"] = event_ids[index]
            try:
                if hints is not None:
                    check_json(hints, path="$.hints")
                receipt = seal(
                    stream=self.name,
                    prev=prev,
                    body=body,
                    ts=ts,
                    random_hex16=secrets.token_hex(8),
                    context=context,
                    hints=receipt_hints or None,
                )
            except ValueError as error:  # a CanonicalJSONError is one
                raise InvalidEvent(f"event {index} of {self.name}: {error}") from None
            if len(receipt.type) > 100:
                raise InvalidEvent(f"event type longer than 100 characters on {self.name}")
            refuse_nul(receipt, index)
            sealed.append(receipt)
            prev = receipt.hash
        first = self.count + 1
        positions = self.writer.write(
            sealed,
            first_stream_seq=first,
            event_ids=event_ids or [None] * len(sealed),
            head=sealed[-1].hash,
            count=self.count + len(sealed),
        )
        written = _positioned(sealed, first, positions)
        self.head = written[-1].hash
        self.count += len(written)
        self.appended.extend(written)
        family = registry.family_for(self.name)
        if family and family.projector:
            family.projector.apply(self, written)
        observe(self.name, started, len(written))
        return written


def refuse_nul(receipt: Receipt, index: int) -> None:
    """PostgreSQL's jsonb and text refuse U+0000: refuse it on both databases alike (S-3).
    The escape in the sealed text may also be a string's own backslash and "u0000", so
    the walk (naming the path) decides; a clean receipt costs one substring search."""
    if receipt.sealed is None or _NUL_ESCAPE not in receipt.sealed:
        return
    found = first_unstorable({"body": receipt.body, "context": receipt.context})
    if found is not None:
        raise InvalidEvent(f"event {index} of {receipt.stream}: {found[1]} at {found[0]}")


def _check_hints(hints: dict[str, Any] | None, event_id: str | None, stream: str) -> None:
    """Hints are stored, not sealed: refuse text no database stores in them here."""
    found = first_unstorable(hints, "$.hints") if hints else None
    found = found or (first_unstorable(event_id, "event_id") if event_id else None)
    if found is not None:
        raise InvalidEvent(f"{found[1]} at {found[0]} on {stream}")


def _event_ids(event_id: str | None, n: int) -> list[str]:
    if event_id is None:
        return []
    if not isinstance(event_id, str) or not event_id or len(event_id) > 200:
        raise InvalidEvent("event_id must be a non-empty string of at most 200 characters")
    return [event_id] if n == 1 else [f"{event_id}#{i}" for i in range(n)]


def _existing_for_event_ids(stream: str, event_ids: list[str]) -> list[Receipt]:
    rows = ReceiptRow.objects.filter(stream=stream, event_id__in=event_ids).order_by("stream_seq")
    return _receipts(rows)


def _positioned(
    receipts: list[Receipt], first_stream_seq: int, positions: dict[int, int] | None
) -> list[Receipt]:
    """The receipts at their stream seqs, and global seqs unless those were deferred."""
    out = []
    for offset, r in enumerate(receipts):
        stream_seq = first_stream_seq + offset
        seq = None if positions is None else positions[stream_seq]
        out.append(r.at(seq, stream_seq))
    return out


@contextmanager
def open_stream(
    name: str,
    *,
    savepoint: bool = True,
    read: tuple[str, Sequence[Any]] | None = None,
    new: bool = False,
    assume: tuple[str, int] | None = None,
) -> Iterator[StreamHandle]:
    """Lock `name` (creating it if new) for the rest of the current transaction.

    `read`, a statement to run under the lock (a projector's row), travels with the lock
    on PostgreSQL: its rows are on `handle.read`. `new`: the name was just generated, so
    the stream is most likely new (only which lock statement is cheaper depends on it).

    `assume` (head, receipt count), on PostgreSQL inside `pipelined()` or
    `one_statement()`: the stream is believed to end there, so the lock is sent without
    waiting for it and appends follow at once; if it does not, the transaction fails when
    the pipeline syncs (`db.AssumptionRefused`) and nothing of it is kept. Elsewhere it is
    ignored. Inside `one_statement()` it is required, and no transaction is opened.

    Opens a transaction when none is active. Inside one, a savepoint keeps a refused
    append from poisoning the caller's transaction; services that own the whole
    transaction pass savepoint=False to spare the two round trips. Callers that lock
    several streams must do so in a stable order.
    """
    check_stream_name(name)
    gathered = gathering() is not None  # one statement: in autocommit, no transaction here
    with nullcontext() if gathered else transaction.atomic(savepoint=savepoint):
        writer = Writer()
        try:
            head: str | None
            rows: list[tuple[Any, ...]] = []
            if assume is not None and writer.postgres and (gathered or in_pipeline()):
                writer.send_held(name, *assume)
                head, count = assume
            else:
                assert not gathered, "one statement appends only to a stream of known head"
                head, count, rows = writer.lock(name, read, new=new)
            handle = StreamHandle(
                name=name, head=head, count=count, existed=count > 0, writer=writer, read=rows
            )
            yield handle
            if not handle.appended and not handle.existed:
                writer.drop_if_empty(name)  # never leave an empty stream behind
        finally:
            writer.close()


def append(
    stream: str,
    events: Sequence[dict[str, Any]] | dict[str, Any],
    *,
    expected_prev: Any = ANY,
    event_id: str | None = None,
    context: dict[str, Any] | None = None,
    hints: dict[str, Any] | None = None,
    now_ms: int | None = None,
) -> list[Receipt]:
    """Append one or more receipts to `stream` atomically (S-4)."""
    with open_stream(stream) as handle:
        return handle.append(
            events,
            expected_prev=expected_prev,
            event_id=event_id,
            context=context,
            hints=hints,
            now_ms=now_ms,
        )


# ---- reads -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamInfo:
    name: str
    head: str | None
    count: int
    last_ts: int | None
    updated_at: int


def _info(row: StreamRow) -> StreamInfo:
    return StreamInfo(row.name, row.head, row.receipt_count, row.last_ts, row.updated_at)


def stream_info(stream: str) -> StreamInfo | None:
    row = StreamRow.objects.filter(name=stream).first()
    return _info(row) if row else None


def list_streams(
    prefix: str = "", *, after: str | None = None, limit: int = 100
) -> list[StreamInfo]:
    """Streams by name (keyset: `after` is the last name of the previous page)."""
    rows = StreamRow.objects.filter(receipt_count__gt=0)
    if prefix:
        rows = rows.filter(name__startswith=prefix)
    if after:
        rows = rows.filter(name__gt=after)
    return [_info(r) for r in rows.order_by("name")[: max(1, min(limit, 1000))]]


_FIELDS = ("seq", "stream", "stream_seq", "receipt_id", "ts", "prev", "hash", "hints", "sealed")


def _receipts(rows: QuerySet[ReceiptRow], *, stored: bool = False) -> list[Receipt]:
    """`rows` (ordered, perhaps sliced) as receipts.

    By default body and context are exactly what was sealed, decoded from the sealed
    text; the JSON columns (respelled by jsonb in rows older than the `json` columns)
    are not even selected. Rows from before the sealed text (NULL) take their JSON
    columns, in one more query. `stored=True` gives the JSON columns as the database
    holds them, beside the sealed text: what verification compares.
    """
    if stored:
        return [
            _receipt(*row[:-2], body=row[-2], context=row[-1])
            for row in rows.values_list(*_FIELDS, "body", "context")
        ]
    found = list(rows.values_list(*_FIELDS))
    legacy = [row[0] for row in found if row[-1] is None]
    columns = (
        {
            seq: (body, context)
            for seq, body, context in ReceiptRow.objects.filter(seq__in=legacy).values_list(
                "seq", "body", "context"
            )
        }
        if legacy
        else {}
    )
    out = []
    for row in found:
        body, context = unseal(row[-1]) if row[-1] is not None else columns[row[0]]
        out.append(_receipt(*row, body=body, context=context))
    return out


def _receipt(
    seq: int,
    stream: str,
    stream_seq: int,
    receipt_id: str,
    ts: int,
    prev: str | None,
    hash: str,
    hints: dict[str, Any] | None,
    sealed: str | None,
    *,
    body: dict[str, Any],
    context: dict[str, Any] | None,
) -> Receipt:
    return Receipt(
        id=receipt_id,
        ts=ts,
        stream=stream,
        prev=prev,
        body=body,
        hash=hash,
        context=context,
        hints=hints,
        seq=seq,
        stream_seq=stream_seq,
        sealed=sealed,
    )


def read(
    stream: str, *, after: int = 0, limit: int | None = None, stored: bool = False
) -> list[Receipt]:
    """Receipts of `stream` with stream_seq > `after`, in order (`stored`: see `_receipts`)."""
    rows = ReceiptRow.objects.filter(stream=stream, stream_seq__gt=after).order_by("stream_seq")
    if limit is not None:
        rows = rows[:limit]
    return _receipts(rows, stored=stored)


def iter_receipts(
    stream: str, *, after: int = 0, until: int | None = None, stored: bool = False
) -> Iterator[Receipt]:
    """The receipts of `stream` after position `after` (up to `until`) in keyset pages of
    VERIFY_PAGE, never the whole stream in memory (`stored`: see `_receipts`)."""
    while until is None or after < until:
        limit = VERIFY_PAGE if until is None else min(VERIFY_PAGE, until - after)
        page = read(stream, after=after, limit=limit, stored=stored)
        yield from page
        if len(page) < limit:
            return
        after = page[-1].stream_seq or after + len(page)


def read_global(*, after_seq: int = 0, prefix: str = "", limit: int = 500) -> list[Receipt]:
    """Receipts across streams by global sequence (live views, resume)."""
    rows = ReceiptRow.objects.filter(seq__gt=after_seq)
    if prefix:
        rows = rows.filter(stream__startswith=prefix)
    return _receipts(rows.order_by("seq")[:limit])


def read_seq_range(after_seq: int, until_seq: int, *, stored: bool = False) -> list[Receipt]:
    """Receipts across streams with after_seq < seq <= until_seq, by global sequence."""
    rows = ReceiptRow.objects.filter(seq__gt=after_seq, seq__lte=until_seq).order_by("seq")
    return _receipts(rows, stored=stored)


def last_seq() -> int:
    row = ReceiptRow.objects.order_by("-seq").values_list("seq", flat=True).first()
    return row or 0


# ---- verify (S-6, and each chain against its stream row) --------------------------------------

VERIFY_PAGE = 1000  # stream names per keyset page


def stream_record(info: StreamInfo | None) -> StreamRecord | None:
    return None if info is None else StreamRecord(info.head, info.count, info.last_ts)


def verify(stream: str) -> Verification:
    """S-6 over what the database holds, then the chain against its stream row
    (`check_against_head`): each sealed text must hash to its receipt's hash, the JSON
    columns must still hold the values it seals, the positions run 1, 2, 3..., and the
    row's count, head and newest timestamp must be the chain's.

    No transaction is needed for a consistent answer beside live writers: the row is read
    after the receipts, and an append moves both in one commit, so the row counts every
    receipt the walk saw and the walk then reads on to the row's count. A stream removed
    meanwhile (retention deletes the row and the receipts in one commit) is gone, not
    broken: it verifies as empty, like any stream that is not there."""
    walk = ChainWalk(stream)
    walk.feed(iter_receipts(stream, stored=True))
    if walk.broken is not None:
        return walk.result()
    row = stream_info(stream)
    if row is not None and row.count > walk.count:
        walk.feed(iter_receipts(stream, after=walk.count, until=row.count, stored=True))
    result = check_against_head(walk.result(), stream_record(row))
    if not result.ok and result.index is None and _gone(stream):
        return Verification(stream, True, 0, None)
    return result


def _gone(stream: str) -> bool:
    """Neither the stream row nor any receipt of `stream` is there (any longer)."""
    return (
        not StreamRow.objects.filter(name=stream).exists()
        and not ReceiptRow.objects.filter(stream=stream).exists()
    )


def verify_many(
    streams: Sequence[str], *, rows: Mapping[str, StreamRecord | None] | None = None
) -> dict[str, Verification]:
    """`verify` of each of `streams`, their receipts read in one query (retention checks a
    whole batch before removing it). `rows`: the stream rows as the caller holds them
    (locked, so they cannot move); read here, after the receipts, when not given."""
    names = list(streams)
    found: dict[str, ChainWalk] = {name: ChainWalk(name) for name in names}
    query = ReceiptRow.objects.filter(stream__in=names).order_by("stream", "stream_seq")
    for stream, group in itertools.groupby(_receipts(query, stored=True), lambda r: r.stream):
        found[stream].feed(group)
    if rows is None:
        rows = {
            row.name: stream_record(_info(row)) for row in StreamRow.objects.filter(name__in=names)
        }
    return {name: check_against_head(walk.result(), rows.get(name)) for name, walk in found.items()}


def stream_names(prefix: str = "") -> Iterator[str]:
    """The name of every stream row under `prefix` (empty ones too: verify reports them),
    by keyset pages."""
    after: str | None = None
    while True:
        rows = StreamRow.objects.order_by("name")
        if prefix:
            rows = rows.filter(name__startswith=prefix)
        if after is not None:
            rows = rows.filter(name__gt=after)
        page = list(rows.values_list("name", flat=True)[:VERIFY_PAGE])
        yield from page
        if len(page) < VERIFY_PAGE:
            return
        after = page[-1]


def rowless_streams(prefix: str = "") -> Iterator[str]:
    """Streams under `prefix` that have receipts but no stream row (removed by hand, half
    way), by keyset pages. Verifying everything, this reads every receipt."""
    after: str | None = None
    no_row = ~Exists(StreamRow.objects.filter(name=OuterRef("stream")))
    while True:
        rows = ReceiptRow.objects.filter(no_row)
        if prefix:
            rows = rows.filter(stream__startswith=prefix)
        if after is not None:
            rows = rows.filter(stream__gt=after)
        page = list(
            rows.order_by("stream").values_list("stream", flat=True).distinct()[:VERIFY_PAGE]
        )
        yield from page
        if len(page) < VERIFY_PAGE:
            return
        after = page[-1]


def _reducer_for(stream: str, reducer: Any) -> Any:
    if reducer is not None:
        return reducer
    family = registry.family_for(stream)
    if family is None or family.reducer is None:
        raise LookupError(f"no reducer registered for stream {stream!r}")
    return family.reducer


def fold(stream: str, reducer: Any = None) -> Any:
    """State of `stream` folded with `reducer` (default: its family's reducer) (S-7)."""
    return fold_receipts(iter_receipts(stream), _reducer_for(stream, reducer))


def state_at(stream: str, n: int, reducer: Any = None) -> Any:
    """State after the first `n` receipts of `stream` (time travel, S-7)."""
    receipts = read(stream, limit=max(0, n))
    return state_at_receipts(receipts, n, _reducer_for(stream, reducer))
