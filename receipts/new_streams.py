"""Many new streams opened at once, set-based (T-1): the twin of the single append
(`receipts.append`) for streams that do not exist yet, writing exactly what one append
per stream would. On PostgreSQL, when every read model joins (`insert_new`), one
statement per chunk writes the stream rows, the receipts and the read-model rows;
otherwise the older statements of the writer (`create_streams`, `write_first`) and the
projectors after them. A batch where some name exists falls back to the single append
for those. Callers go through the `receipts.store` facade.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction

from receipts import registry
from receipts.append import StreamHandle, check_stream_name, observe, open_stream, refuse_nul
from receipts.clock import now_ms as wall_clock_ms
from receipts.core.chain import Receipt, seal
from receipts.db import in_pipeline
from receipts.errors import ExpectedPrevMismatch, InvalidEvent
from receipts.writer import Writer


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
    observe(new[0].name, started, len(new))
    return handles


class _Taken(Exception):
    """A stream row of the batch existed: the pipelined attempt is rolled back."""


_CHUNK = 250  # streams per statement: small enough to overlap sealing with writing


def _joining_families(new: Sequence[NewStream]) -> list[registry.StreamFamily | None] | None:
    """On PostgreSQL, when every read model of these streams can hand its new rows to the
    receipts' own statement (`insert_new`): each stream's family (None where it has no
    projector). None when one cannot, and on SQLite."""
    if connections[DEFAULT_DB_ALIAS].vendor != "postgresql":
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
        if len(new) <= _CHUNK and not connections[DEFAULT_DB_ALIAS].in_atomic_block:
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
    if connections[DEFAULT_DB_ALIAS].vendor != "postgresql":
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
    if not (in_pipeline() and connections[DEFAULT_DB_ALIAS].in_atomic_block):
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
    observe(new[0].name, started, len(new))
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
        refuse_nul(receipt, 0)
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
