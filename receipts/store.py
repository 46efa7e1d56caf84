"""The append-only store: the only writer of receipt rows (S-3 to S-9).

Appends lock the stream row (an upsert that returns the head: a row lock on
PostgreSQL, the database write lock of an IMMEDIATE transaction on SQLite), seal the
receipts onto the head, insert them, run the family's projector in the same
transaction (S-5), move the head and, on PostgreSQL, `pg_notify` (S-9).
Each row keeps the canonical text its hash covers (`sealed`) beside the JSON columns:
reads decode body and context from that text, so every reader (folds, the API, the
admin) gets exactly what was sealed on either database, and verification checks both.
`append_new_streams` does the same for many new streams at once, set-based. Nothing here
updates or deletes a receipt row.
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef, QuerySet

from receipts import registry
from receipts.clock import now_ms as wall_clock_ms
from receipts.core.canonical import CanonicalJSONError, check_json
from receipts.core.chain import (
    ChainWalk,
    Receipt,
    StreamRecord,
    Verification,
    as_sealed,
    check_against_head,
    seal,
    unseal,
)
from receipts.core.chain import fold as fold_receipts
from receipts.core.chain import state_at as state_at_receipts
from receipts.core.chain import verify as verify_receipts
from receipts.core.storable import first_unstorable
from receipts.db import in_pipeline
from receipts.errors import ExpectedPrevMismatch, InvalidEvent, PartialEventIds, ReplayRefused
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow
from receipts.writer import Writer

# Who wants to know how long appends take (the jobs app feeds a /metrics histogram): called
# with the stream, the seconds one append took (sealing, insert, projector) and its receipts.
append_observers: list[Callable[[str, float, int], None]] = []


def _observe(stream: str, started: float, receipts: int) -> None:
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
            except CanonicalJSONError as error:
                raise InvalidEvent(f"event {index} of {self.name}: {error}") from None
            except ValueError as error:
                raise InvalidEvent(f"event {index} of {self.name}: {error}") from None
            if len(receipt.type) > 100:
                raise InvalidEvent(f"event type longer than 100 characters on {self.name}")
            _refuse_nul(receipt, index)
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
        _observe(self.name, started, len(written))
        return written


def _refuse_nul(receipt: Receipt, index: int) -> None:
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

    `assume` (head, receipt count), on PostgreSQL inside `pipelined()`: the stream is
    believed to end there, so the lock is sent without waiting for it and appends follow
    at once; if it does not, the transaction fails when the pipeline syncs
    (`db.AssumptionRefused`) and nothing of it is kept. Elsewhere it is ignored.

    Opens a transaction when none is active. Inside one, a savepoint keeps a refused
    append from poisoning the caller's transaction; services that own the whole
    transaction pass savepoint=False to spare the two round trips. Callers that lock
    several streams must do so in a stable order.
    """
    check_stream_name(name)
    with transaction.atomic(savepoint=savepoint):
        writer = Writer()
        try:
            head: str | None
            rows: list[tuple[Any, ...]] = []
            if assume is not None and writer.postgres and in_pipeline():
                writer.send_held(name, *assume)
                head, count = assume
            else:
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


@dataclass(frozen=True)
class NewStream:
    """The first receipt of a stream that does not exist yet (`append_new_streams`)."""

    name: str
    body: dict[str, Any]
    context: dict[str, Any] | None = None


# A further data-modifying part of the statement that opens new streams: for the positions
# (in `new`) of one chunk, (an INSERT, its parameters: `db.text_rows`).
Joined = Callable[[Sequence[int]], tuple[str, Sequence[Any]]]


def append_new_streams(
    new: Sequence[NewStream],
    *,
    now_ms: int | None = None,
    joined: Joined | None = None,
) -> list[StreamHandle]:
    """Open many new streams, each with its first receipt, in a few statements (T-1).

    Writes exactly what `append(s.name, s.body, expected_prev=None, context=s.context,
    now_ms=now_ms)` for each stream in order would, and refuses like it: a stream that
    already has receipts (or comes twice) raises ExpectedPrevMismatch, and nothing of the
    call stays written. The stream rows, the receipts (with their `pg_notify`) and, when
    the family projector has `apply_many`, the read-model rows take a statement per chunk
    of streams (on PostgreSQL pipelined: the server writes one chunk while the next is
    sealed); a projector without `apply_many` gets `apply` per stream. As with single
    appends, concurrent transactions opening the same names must list them in one order.

    Returns one handle per stream, in order, as that append would leave it: `appended`
    holds the receipt with its positions (global seqs ascend in order), `cache` what the
    projector put there. The handles are closed: append to these streams again through
    `open_stream`.

    `joined`: rows of the caller's own that commit in the receipts' statement, chunk by
    chunk, where there is one (PostgreSQL, every read model with `insert_new`); the
    caller knows it was used when it was called. Used, nothing falls back: a name that exists raises ExpectedPrevMismatch
    with nothing written, and the caller goes its own careful way.

    `send_new_streams` writes the same without waiting for any of it.
    """
    if not new:
        return []
    started = time.perf_counter()
    ts = wall_clock_ms() if now_ms is None else now_ms
    families = _joining_families(new)
    if families is None:
        joined = None  # the caller's rows join only the set-based statement
    try:
        if families is not None:
            handles = _open_new_at_once(new, families, ts, joined)
        else:
            with transaction.atomic():
                handles = _open_new(new, ts)
    except (_Taken, ExpectedPrevMismatch, IntegrityError) as error:
        if joined is not None:
            raise ExpectedPrevMismatch(None, None) from error
        # a name exists (or comes twice): that attempt rolled back; go carefully
        with transaction.atomic():
            handles = _open_new_carefully(new, ts)
    _observe(new[0].name, started, len(new))
    return handles


class _Taken(Exception):
    """A stream row of the batch existed: the pipelined attempt is rolled back."""


_CHUNK = 250  # streams per statement: small enough to overlap sealing with writing


def _joining_families(new: Sequence[NewStream]) -> list[registry.StreamFamily | None] | None:
    """On PostgreSQL, when every read model of these streams can hand its new rows to the
    receipts' own statement (`insert_new`): each stream's family (None where it has no
    projector). None when one cannot, and on SQLite."""
    if connection.vendor != "postgresql":
        return None
    families: list[registry.StreamFamily | None] = []
    for item in new:
        family = registry.family_for(item.name)
        if family is None or family.projector is None:
            families.append(None)
        elif registry.joining(family.projector) is None:
            return None
        else:
            families.append(family)
    return families


def _open_new_at_once(
    new: Sequence[NewStream],
    families: Sequence[registry.StreamFamily | None],
    ts: int,
    joined: Joined | None,
) -> list[StreamHandle]:
    """PostgreSQL: the stream rows, the receipts and the read-model rows of new streams as
    one statement per chunk (`Writer.send_open_new`). One chunk outside a transaction is
    its own transaction: the whole append is one round trip (T-1). Inside one, a
    savepoint keeps a refusal from poisoning the caller's transaction, as for any append;
    several chunks are one transaction, pipelined (the server writes one chunk while the
    next is sealed)."""
    writer = Writer()
    try:
        if len(new) <= _CHUNK and not connection.in_atomic_block:
            return _placed([_send_new(writer, new, families, 0, ts, {}, joined)])
        with transaction.atomic():
            if len(new) <= _CHUNK:
                return _placed([_send_new(writer, new, families, 0, ts, {}, joined)])
            heads: dict[str, str] = {}
            with writer.pipeline():
                sent = [
                    _send_new(writer, new, families, start, ts, heads, joined)
                    for start in range(0, len(new), _CHUNK)
                ]
            return _placed(sent)
    finally:
        writer.close()


# The first chunk of a sent run: small, so that the server starts writing while the
# client seals the rest.
_FIRST_CHUNK = 50


def chunk_bounds(count: int) -> list[tuple[int, int]]:
    """How to cut a run of `count` new streams into `send_new_streams` calls: (start, end)
    of each chunk, the first small. One chunk on SQLite, where nothing is sent ahead."""
    if connection.vendor != "postgresql":
        return [(0, count)] if count else []
    starts = [0, *range(min(_FIRST_CHUNK, count), count, _CHUNK)] if count else []
    return list(itertools.pairwise([*starts, count]))


def send_new_streams(
    new: Sequence[NewStream], *, now_ms: int | None = None, joined: Joined | None = None
) -> list[StreamHandle] | None:
    """Open new streams with one statement that is only sent (PostgreSQL, inside
    `pipelined_transaction`, for streams whose read models join the receipts' statement):
    what `append_new_streams` writes, with the handles at once. Their receipts' global
    seqs are never read (None; stream seqs are 1); a name that exists fails the
    transaction when it ends (IntegrityError), nothing of it written. The caller does its
    own work while the server writes, and cuts a long run with `chunk_bounds`.

    None, with nothing sent, where this cannot be (SQLite, no pipelined transaction, a
    read model without `insert_new`): `append_new_streams` then."""
    if not new:
        return []
    if not (in_pipeline() and connection.in_atomic_block):
        return None
    families = _joining_families(new)
    if families is None:
        return None
    if len(new) > _CHUNK:
        raise ValueError(f"at most {_CHUNK} new streams a statement: cut with chunk_bounds")
    started = time.perf_counter()
    ts = wall_clock_ms() if now_ms is None else now_ms
    writer = Writer()
    try:
        handles = _send_new(writer, new, families, 0, ts, {}, joined, positions=False)[0]
    finally:
        writer.close()
    _observe(new[0].name, started, len(new))
    return handles


def _send_new(
    writer: Writer,
    new: Sequence[NewStream],
    families: Sequence[registry.StreamFamily | None],
    start: int,
    ts: int,
    heads: dict[str, str],
    joined: Joined | None,
    *,
    positions: bool = True,
) -> tuple[list[StreamHandle], Callable[[], dict[str, int]]]:
    """Seal and project the chunk of `new` from `start` (at most `_CHUNK` streams) and send
    its statement: the handles, and the function that reads the receipts' global seqs
    (inside `writer.pipeline()`, once the pipeline has synced; only with `positions`)."""
    end = min(len(new), start + _CHUNK)
    sealed = _seal_first(new[start:end], ts, heads)
    handles = [_handle(r, writer) for r in sealed]
    groups: dict[str, tuple[Any, list[int]]] = {}
    for offset, family in enumerate(families[start:end]):
        if family is not None:
            groups.setdefault(family.prefix, (family.projector, []))[1].append(offset)
    rows = [
        projector.insert_new([(handles[p], handles[p].appended) for p in offsets])
        for projector, offsets in groups.values()
    ]
    if joined is not None:
        rows.append(joined(range(start, end)))
    return handles, writer.send_open_new(sealed, rows, positions=positions)


def _placed(
    sent: list[tuple[list[StreamHandle], Callable[[], dict[str, int]]]],
) -> list[StreamHandle]:
    """The handles of every chunk, each receipt at its global seq."""
    out = []
    for handles, seqs in sent:
        found = seqs()
        for handle in handles:
            first = handle.appended[0]
            handle.appended[0] = first.at(found[handle.name], 1)
        out += handles
    return out


def _open_new(new: Sequence[NewStream], ts: int) -> list[StreamHandle]:
    """The optimistic attempt: every name is new. On PostgreSQL nothing waits for a
    result until the end (the global seqs are reserved first), so the server writes one
    chunk while the next is sealed and projected. Raises _Taken, or IntegrityError from
    the receipts' unique (stream, stream_seq), when a name is not new."""
    writer = Writer()
    try:
        seqs = writer.reserve_seqs(len(new))
        with writer.pipeline():
            heads: dict[str, str] = {}
            handles: list[StreamHandle] = []
            created = []
            for start in range(0, len(new), _CHUNK):
                part = _seal_first(new[start : start + _CHUNK], ts, heads)
                placed, names = writer.send_first(part, seqs and seqs[start : start + len(part)])
                created.append(names)
                chunk = [_handle(r, writer) for r in placed]
                _project_new(chunk)
                handles += chunk
            if sum(len(names()) for names in created) < len(handles):
                raise _Taken
    finally:
        writer.close()
    return handles


def _open_new_carefully(new: Sequence[NewStream], ts: int) -> list[StreamHandle]:
    """The same, for a batch where some stream row exists: those take the single append
    (which waits for the lock, appends to an empty row, refuses a head)."""
    writer = Writer()
    try:
        sealed = _seal_first(new, ts, {})
        created = writer.create_streams(sealed)
        taken = {r.stream: _append_first(r) for r in sealed if r.stream not in created}
        fresh = [r for r in sealed if r.stream in created]
        placed = writer.write_first(fresh) if fresh else []
        handles = {r.stream: _handle(r, writer) for r in placed}
        _project_new(list(handles.values()))
    finally:
        writer.close()
    return [handles.get(item.name) or taken[item.name] for item in new]


def _seal_first(new: Sequence[NewStream], ts: int, heads: dict[str, str]) -> list[Receipt]:
    """Seal each stream's first receipt; `heads` (stream: hash) holds the batch so far."""
    randomness = secrets.token_hex(8 * len(new))  # one draw for the receipt ids
    part = []
    for index, item in enumerate(new):
        check_stream_name(item.name)
        try:
            receipt = seal(
                stream=item.name,
                prev=None,
                body=item.body,
                ts=ts,
                random_hex16=randomness[16 * index : 16 * index + 16],
                context=item.context,
                stream_seq=1,
            )
        except ValueError as error:  # CanonicalJSONError included
            raise InvalidEvent(f"event 0 of {item.name}: {error}") from None
        if len(receipt.type) > 100:
            raise InvalidEvent(f"event type longer than 100 characters on {item.name}")
        _refuse_nul(receipt, 0)
        if item.name in heads:  # the second append of the pair would find a head
            raise ExpectedPrevMismatch(None, heads[item.name])
        heads[item.name] = receipt.hash
        part.append(receipt)
    return part


def _handle(receipt: Receipt, writer: Writer) -> StreamHandle:
    return StreamHandle(
        name=receipt.stream,
        head=receipt.hash,
        count=1,
        existed=False,
        writer=writer,
        appended=[receipt],
    )


def _append_first(receipt: Receipt) -> StreamHandle:
    """The single append, for a stream row that existed when the batch created its own."""
    with open_stream(receipt.stream, savepoint=False) as handle:
        handle.append(receipt.body, expected_prev=None, context=receipt.context, now_ms=receipt.ts)
    return handle


def _project_new(handles: list[StreamHandle]) -> None:
    """Run each family's projector on these new streams: its `apply_many` once when it
    has one, else `apply` per stream."""
    groups: dict[str, tuple[registry.Projector, list[StreamHandle]]] = {}
    for handle in handles:
        family = registry.family_for(handle.name)
        if family and family.projector:
            groups.setdefault(family.prefix, (family.projector, []))[1].append(handle)
    for projector, group in groups.values():
        batched = registry.many(projector)
        if batched is not None:
            batched.apply_many([(handle, handle.appended) for handle in group])
        else:
            for handle in group:
                projector.apply(handle, handle.appended)


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


def iter_receipts(stream: str, *, chunk: int = 1000, stored: bool = False) -> Iterator[Receipt]:
    after = 0
    while True:
        page = read(stream, after=after, limit=chunk, stored=stored)
        yield from page
        if len(page) < chunk:
            return
        after = page[-1].stream_seq or after


def read_global(*, after_seq: int = 0, prefix: str = "", limit: int = 500) -> list[Receipt]:
    """Receipts across streams by global sequence (live views, resume)."""
    rows = ReceiptRow.objects.filter(seq__gt=after_seq)
    if prefix:
        rows = rows.filter(stream__startswith=prefix)
    return _receipts(rows.order_by("seq")[:limit])


def last_seq() -> int:
    row = ReceiptRow.objects.order_by("-seq").values_list("seq", flat=True).first()
    return row or 0


# ---- verify (S-6, and each chain against its stream row) --------------------------------------

VERIFY_PAGE = 1000  # stream names per keyset page


def _stored(stream: str, *, after: int = 0, until: int | None = None) -> Iterator[Receipt]:
    """The receipts of `stream` after position `after` (up to `until`), as stored: keyset
    pages, never the whole stream in memory."""
    while until is None or after < until:
        limit = VERIFY_PAGE if until is None else min(VERIFY_PAGE, until - after)
        page = read(stream, after=after, limit=limit, stored=True)
        yield from page
        if len(page) < limit:
            return
        after = page[-1].stream_seq or after + len(page)


def _record(info: StreamInfo | None) -> StreamRecord | None:
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
    walk.feed(_stored(stream))
    if walk.broken is not None:
        return walk.result()
    row = stream_info(stream)
    if row is not None and row.count > walk.count:
        walk.feed(_stored(stream, after=walk.count, until=row.count))
    result = check_against_head(walk.result(), _record(row))
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
        rows = {row.name: _record(_info(row)) for row in StreamRow.objects.filter(name__in=names)}
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


# ---- rebuild / replay (S-8) -----------------------------------------------------------------


@dataclass(frozen=True)
class Drift:
    stream: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @property
    def fields(self) -> list[str]:
        before, after = self.before or {}, self.after or {}
        return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))

    def to_wire(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "fields": self.fields,
            "before": {k: (self.before or {}).get(k) for k in self.fields},
            "after": {k: (self.after or {}).get(k) for k in self.fields},
        }


@dataclass
class RebuildReport:
    checked: int = 0
    drift: list[Drift] = field(default_factory=list)
    refused: list[Verification] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "drift": [d.to_wire() for d in self.drift],
            "refused": [v.to_wire() for v in self.refused],
        }


def rebuild(
    projector: registry.Projector, streams: Sequence[str], *, dry_run: bool = False
) -> RebuildReport:
    """Recompute read-model rows of `streams` from their receipts; report every difference.

    A stream whose chain does not verify is refused (reported, never projected).
    """
    report = RebuildReport()
    for stream in streams:
        receipts, verification = _read_verified(stream)
        if not verification.ok:
            report.refused.append(verification)
            continue
        receipts = [as_sealed(r) for r in receipts]  # project what was sealed, as reads do
        report.checked += 1
        with transaction.atomic():
            before = projector.snapshot(stream)
            after = projector.compute(stream, receipts)
            if before != after:
                report.drift.append(Drift(stream, before, after))
                if not dry_run:
                    projector.write(stream, after)
    return report


def _read_verified(stream: str) -> tuple[list[Receipt], Verification]:
    """The receipts of `stream` as stored, and their verification against the stream row
    as `verify` makes it (the row read after them, then read on to its count): a
    truncated chain rebuilt would hide what was removed."""
    receipts = list(iter_receipts(stream, stored=True))
    row = stream_info(stream)
    if row is not None and row.count > len(receipts):
        receipts += read(stream, after=len(receipts), limit=row.count - len(receipts), stored=True)
    return receipts, check_against_head(verify_receipts(stream, receipts), _record(row))


def matching_streams(target: str) -> list[str]:
    """`target` itself when it is a stream, else every stream under it as a prefix."""
    if stream_info(target):
        return [target]
    names: list[str] = []
    after = None
    while True:
        page = list_streams(target, after=after, limit=1000)
        names += [s.name for s in page]
        if len(page) < 1000:
            return names
        after = page[-1].name


def replay(target: str, *, dry_run: bool = False) -> RebuildReport:
    """Verify then rebuild the read model of one stream or every stream under a prefix.

    Raises ReplayRefused for a single stream whose chain is invalid; for a prefix the
    invalid ones are listed in the report's `refused`.
    """
    streams = matching_streams(target)
    report = RebuildReport()
    for stream in streams:
        family = registry.family_for(stream)
        if family is None or family.projector is None:
            verification = verify(stream)
            if not verification.ok:
                report.refused.append(verification)
            else:
                report.checked += 1
            continue
        part = rebuild(family.projector, [stream], dry_run=dry_run)
        report.checked += part.checked
        report.drift += part.drift
        report.refused += part.refused
    if len(streams) == 1 and streams[0] == target and report.refused:
        bad = report.refused[0]
        raise ReplayRefused(target, bad.reason or "invalid", bad.index)
    return report
