"""The SQL of an append, per database (S-3, S-4, S-9). Only `receipts.store` calls it;
how the statements travel (prepared, pipelined, encoded) is `receipts.db`'s.

PostgreSQL: statements go through one server-side-binding psycopg cursor and are
prepared (the hot path runs the same few statements millions of times), and the receipt
insert, the head update and `pg_notify` travel as ONE statement (data-modifying CTEs), so
an append costs three round trips: lock, write, commit. SQLite: the same steps as plain
statements (it has no data-modifying CTEs and nothing to notify). Each receipt row carries
its sealed text (S-2) in the same INSERT as its JSON columns (`json` text on PostgreSQL).

Opening many new streams at once has two generations of statements, each serving its own
case. `send_open_new` (PostgreSQL, every read model of the streams with `insert_new`):
the stream rows, the receipts and the read-model rows as ONE statement per chunk.
`create_streams` and `write_first` (or both as `send_first` inside `pipeline`): SQLite,
a read model without `insert_new`, and the careful path of a batch where some stream
exists; one statement for the stream rows and one (with a `pg_notify` per receipt) for
the receipts per chunk of streams, the read models written by their projectors after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache, cached_property
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections

from receipts import wire_json
from receipts.core.chain import Receipt
from receipts.db import NOTIFY_CHANNEL, in_pipeline, positions_deferred, refused_unless_found
from receipts.db import pipeline as db_pipeline
from receipts.db.one_statement import gathering
from receipts.db.params import dump as _dump
from receipts.db.params import text_rows
from receipts.db.statements import cursor as bound_cursor
from receipts.errors import ExpectedPrevMismatch

_COLUMNS = (
    "stream, stream_seq, receipt_id, ts, prev, hash, event_type, body, context, hints, "
    "event_id, sealed"
)
_LOCK = (
    "INSERT INTO receipt_stream (name, head, receipt_count, last_ts, updated_at) "
    "VALUES (%s, NULL, 0, NULL, 0) "
    "ON CONFLICT (name) DO UPDATE SET name = excluded.name "
    "RETURNING head, receipt_count"
)
# PostgreSQL: an existing stream (every append but a stream's first) is locked with FOR
# UPDATE, which writes no new row version; only a missing one takes the upsert above (two
# creators meet in its ON CONFLICT, as before). One statement, one round trip.
_LOCK_PG = (
    "WITH found AS (SELECT head, receipt_count FROM receipt_stream WHERE name = %s FOR UPDATE), "
    "created AS (INSERT INTO receipt_stream (name, head, receipt_count, last_ts, updated_at) "
    "SELECT %s, NULL, 0, NULL, 0 WHERE NOT EXISTS (SELECT 1 FROM found) "
    "ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING head, receipt_count) "
    "SELECT head, receipt_count FROM found UNION ALL SELECT head, receipt_count FROM created"
)
# PostgreSQL: the lock of a stream the caller believes ends at a known head, sent without
# waiting for it (`Writer.send_held`). When the row is not there as believed (another
# append moved it, or it is gone) the transaction fails whole when the pipeline syncs
# (`db.AssumptionRefused`) and nothing of it is kept.
_HELD_PG = refused_unless_found(
    "SELECT 1 FROM receipt_stream WHERE name = %s AND head = %s AND receipt_count = %s FOR UPDATE"
)
# Inside `one_statement()`: the lock is the head's move itself, from the head assumed
# (a stream that moved meanwhile touches no row, and the statement is refused).
_MOVE_HELD_PG = (
    "UPDATE receipt_stream SET head = %s, receipt_count = %s, last_ts = %s, updated_at = %s "
    "WHERE name = %s AND head = %s AND receipt_count = %s RETURNING 1"
)


def _notify_inserted(ins: str = "ins") -> str:
    """The live-event notification of each receipt the CTE `ins` inserted."""
    return (
        f"SELECT pg_notify('{NOTIFY_CHANNEL}', "
        f"{ins}.seq::text || ' ' || %s::text || ' ' || {ins}.event_type) FROM {ins}"
    )


_NOTIFY_INSERTED = _notify_inserted()
_UPDATE_HEAD = (
    "UPDATE receipt_stream SET head = %s, receipt_count = %s, last_ts = %s, "
    "updated_at = %s WHERE name = %s"
)
_DROP_EMPTY = "DELETE FROM receipt_stream WHERE name = %s AND receipt_count = 0"
# Opening many streams (the first receipt of each). PostgreSQL: statements of a fixed shape
# whose one parameter is a chunk as a JSON array of rows (no placeholder per value for
# psycopg to parse and adapt; bodies nested as they are), receipts with global seqs
# reserved beforehand (`_RESERVE`), so nothing waits for a result. SQLite: multi-row
# VALUES, the seqs from RETURNING.
_RESERVE = (
    "WITH q AS MATERIALIZED (SELECT pg_get_serial_sequence('receipt_receipt', 'seq')"
    "::regclass AS s) SELECT nextval(q.s) FROM q, generate_series(1, %s)"
)
_CREATE_PG = (
    "INSERT INTO receipt_stream (name, head, receipt_count, last_ts, updated_at) "
    "SELECT s, h, 1, t, t FROM jsonb_to_recordset(%s::jsonb) AS v(s text, h text, t bigint) "
    "ON CONFLICT (name) DO NOTHING RETURNING name"
)
_CREATE_SQLITE = (
    "INSERT INTO receipt_stream (name, head, receipt_count, last_ts, updated_at) "
    "VALUES {rows} ON CONFLICT (name) DO NOTHING RETURNING name"
)
_WRITE_FIRST_PG = (
    f"WITH ins AS (INSERT INTO receipt_receipt (seq, {_COLUMNS}) "
    "SELECT q, s, 1, i, t, p, h, e, b, c, x, NULL, z FROM jsonb_to_recordset(%s::jsonb) AS v("
    "q bigint, s text, i text, t bigint, p text, h text, e text, b json, c json, x json, "
    "z text) "
    "RETURNING seq, stream, event_type) "
    f"SELECT pg_notify('{NOTIFY_CHANNEL}', "
    "ins.seq::text || ' ' || ins.stream::text || ' ' || ins.event_type) FROM ins"
)
_WRITE_FIRST_SQLITE = (
    f"INSERT INTO receipt_receipt ({_COLUMNS}) VALUES {{rows}} RETURNING seq, stream"
)
# PostgreSQL: new streams each with its first receipt, and their read-model rows, as ONE
# statement (one round trip; outside a transaction its own commit): the stream rows, the
# receipts in the order given (global seqs from the sequence, ascending), a `pg_notify`
# each, then `{rows}`, the projectors' INSERTs as further data-modifying CTEs. A name that
# exists fails the stream insert (unique name) and with it the whole statement.
# Each column comes as its own binary text array (`unnest` zips them; one row: a VALUES row
# of texts, `text_rows`): the server reads the values as they are, with no JSON document
# around them to parse (nor the sealed texts as JSON strings of escaped quotes, unescaped
# character by character), and parses only the JSON columns.
_OPEN_NEW_PG = (
    "WITH v AS MATERIALIZED (SELECT s, i, t::bigint AS t, h, e, b::json AS b, "
    "c::json AS c, z, o FROM {source} AS v(s, i, t, h, e, b, c, z, o)), "
    "st AS (INSERT INTO receipt_stream (name, head, receipt_count, last_ts, updated_at) "
    "SELECT s, h, 1, t, t FROM v), "
    f"ins AS (INSERT INTO receipt_receipt ({_COLUMNS}) "
    "SELECT s, 1, i, t, NULL, h, e, b, c, NULL, NULL, z FROM v ORDER BY o "
    "RETURNING seq, stream, event_type), "
    f"note AS (SELECT pg_notify('{NOTIFY_CHANNEL}', "
    "ins.seq::text || ' ' || ins.stream::text || ' ' || ins.event_type) FROM ins)"
    "{rows} "
    "{result}"
)
# What the statement returns: each stream's global seq, or (positions left unread) only
# the count that makes the notifications run.
_OPEN_NEW_SEQS = "SELECT ins.seq, ins.stream FROM ins, (SELECT count(*) FROM note) AS n"
_OPEN_NEW_COUNT = "SELECT count(*) FROM note"
# Variables per statement on SQLite (its default limit).
MAX_PARAMS = 32766


def chunks(items: Sequence[Any], width: int) -> list[Sequence[Any]]:
    """`items` cut so that `width` variables per item stay within MAX_PARAMS per statement."""
    size = MAX_PARAMS // width
    return [items[i : i + size] for i in range(0, len(items), size)]


@cache
def _insert_pg(n: int) -> str:
    """PostgreSQL: the INSERT of `n` receipts of one stream (`_rows`' parameters)."""
    one = "(%s, %s, %s, %s, %s, %s, %s, %s::json, %s::json, %s::json, %s, %s)"
    return (
        f"INSERT INTO receipt_receipt ({_COLUMNS}) VALUES {', '.join([one] * n)} "
        "RETURNING seq, stream_seq, event_type"
    )


@cache
def _open_new_sql(source: str, inserts: tuple[str, ...], positions: bool) -> str:
    return _OPEN_NEW_PG.format(
        source=source,
        rows="".join(f", r{k} AS ({insert})" for k, insert in enumerate(inserts)),
        result=_OPEN_NEW_SEQS if positions else _OPEN_NEW_COUNT,
    )


def _streams_json(receipts: Sequence[Receipt]) -> str:
    return wire_json.dumps([{"s": r.stream, "h": r.hash, "t": r.ts} for r in receipts])


def _receipts_json(receipts: Sequence[Receipt]) -> str:
    return wire_json.dumps(
        [
            {
                "q": r.seq,
                "s": r.stream,
                "i": r.id,
                "t": r.ts,
                "p": r.prev,
                "h": r.hash,
                "e": r.type,
                "b": r.body,
                "c": r.context,
                "x": r.hints,
                "z": r.sealed,
            }
            for r in receipts
        ]
    )


def _first(receipts: Sequence[Receipt], seqs: Sequence[int]) -> list[Receipt]:
    """`receipts` positioned as the first of their streams, at global `seqs`."""
    return [r.at(seq, 1) for r, seq in zip(receipts, seqs, strict=True)]


def _row(r: Receipt, stream_seq: int, event_id: str | None) -> list[Any]:
    """One receipt's column values, in the INSERT's column order."""
    return [
        r.stream,
        stream_seq,
        r.id,
        r.ts,
        r.prev,
        r.hash,
        r.type,
        _dump(r.body),
        _dump(r.context),
        _dump(r.hints),
        event_id,
        r.sealed,
    ]


def _rows(
    receipts: Sequence[Receipt], first_stream_seq: int, event_ids: Sequence[str | None]
) -> list[Any]:
    params: list[Any] = []
    for offset, (r, event_id) in enumerate(zip(receipts, event_ids, strict=True)):
        params += _row(r, first_stream_seq + offset, event_id)
    return params


class Writer:
    """One stream's writes inside the current transaction."""

    def __init__(self) -> None:
        self._held: tuple[str, int] | None = None  # the head assumed, in one statement
        db = connections[DEFAULT_DB_ALIAS]  # one lookup of the thread's connection
        self.postgres = db.vendor == "postgresql"
        if self.postgres:
            db.ensure_connection()

    @cached_property
    def _cursor(self) -> Any:
        """Made on first use: opening new streams sends through cursors of its own."""
        if not self.postgres:
            return connection.cursor()
        return bound_cursor()  # server-side binding

    def _run(self, sql: str, params: Sequence[Any], *, rows: bool = True) -> list[tuple[Any, ...]]:
        """Run a statement; its result rows when `rows` (in pipeline mode that waits for
        them), else nothing (in pipeline mode it is only sent)."""
        # Django's wrapper turns driver errors into django.db errors, as for any query.
        with connection.wrap_database_errors:
            if self.postgres:
                self._cursor.execute(sql, params, prepare=True)
                if not rows or not (self._cursor.description or in_pipeline()):
                    return []
                return self._cursor.fetchall()
            self._cursor.execute(sql, params)
            return self._cursor.fetchall() if self._cursor.description else []

    def execute(self, sql: str, params: Sequence[Any]) -> None:
        """A write of the append's transaction on the append's cursor (prepared on
        PostgreSQL, only sent in pipeline mode): projectors write their read-model rows
        through it. Inside `one_statement()` it is gathered instead (a plain INSERT or
        UPDATE)."""
        gathered = gathering()
        if gathered is not None:
            gathered.write(sql, params)
            return
        self._run(sql, params, rows=False)

    def _lock_statement(self, name: str, new: bool) -> tuple[str, list[str]]:
        return (_LOCK_PG, [name, name]) if self.postgres and not new else (_LOCK, [name])

    def lock(
        self, name: str, read: tuple[str, Sequence[Any]] | None = None, *, new: bool = False
    ) -> tuple[str | None, int, list[tuple[Any, ...]]]:
        """Lock the stream row: (head, count, rows of `read`). `read`, a statement the
        caller needs under the lock (its read model's row), runs right after the lock in
        the same round trip on PostgreSQL. `new`: the stream is most likely new (a fresh
        id), so the upsert alone is the cheaper lock; either statement is correct."""
        if read is None or not self.postgres:
            head, count = self._run(*self._lock_statement(name, new))[0]
            return head, count, (self._run(*read) if read is not None else [])
        with connection.wrap_database_errors, bound_cursor() as reader:
            with db_pipeline.results_together():
                self._cursor.execute(*self._lock_statement(name, new), prepare=True)
                reader.execute(read[0], read[1], prepare=True)
            head, count = self._cursor.fetchone()
            return head, count, reader.fetchall()

    def write(
        self,
        receipts: Sequence[Receipt],
        *,
        first_stream_seq: int,
        event_ids: Sequence[str | None],
        head: str,
        count: int,
    ) -> dict[int, int] | None:
        """Insert `receipts`, move the head; returns {stream_seq: global seq}, or None
        where positions are deferred (`positions_deferred`: the write is only sent)."""
        stream, last_ts = receipts[0].stream, receipts[-1].ts
        params = _rows(receipts, first_stream_seq, event_ids)
        gathered = gathering()
        if gathered is not None:  # one statement: the head moves only from the one assumed
            assert self._held is not None
            gathered.require(_MOVE_HELD_PG, [head, count, last_ts, last_ts, stream, *self._held])
            inserted = gathered.fresh("ins")
            gathered.write(_insert_pg(len(receipts)), params, name=inserted)
            note = gathered.fresh("note")
            gathered.write(_notify_inserted(inserted), [stream], name=note)
            gathered.read(note)
            return None
        try:
            if self.postgres:
                sql = (
                    f"WITH ins AS ({_insert_pg(len(receipts))}), "
                    "upd AS (UPDATE receipt_stream SET head = %s, receipt_count = %s, "
                    "last_ts = %s, updated_at = %s WHERE name = %s), "
                    f"note AS ({_NOTIFY_INSERTED}) "
                    "SELECT ins.seq, ins.stream_seq FROM ins, (SELECT count(*) FROM note) AS n"
                )
                args = [*params, head, count, last_ts, last_ts, stream, stream]
                if positions_deferred():
                    self._run(sql, args, rows=False)
                    return None
                rows = self._run(sql, args)
            else:
                one = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                sql = (
                    f"INSERT INTO receipt_receipt ({_COLUMNS}) VALUES "
                    f"{', '.join([one] * len(receipts))} RETURNING seq, stream_seq"
                )
                rows = self._run(sql, params)
                self._run(_UPDATE_HEAD, [head, count, last_ts, last_ts, stream], rows=False)
        except IntegrityError as error:
            # The stream lock makes this unreachable in normal operation; the unique
            # (stream, stream_seq) index is the last line of defence against a fork (S-4).
            raise ExpectedPrevMismatch(receipts[0].prev, None) from error
        return {stream_seq: seq for seq, stream_seq in rows}

    def reserve_seqs(self, n: int) -> list[int] | None:
        """PostgreSQL: `n` global seqs from the receipts' sequence, ascending, in one round
        trip (so a batch knows every position before it writes: nothing then waits for a
        result); SQLite: None (its inserts return them)."""
        if not self.postgres:
            return None
        return sorted(seq for (seq,) in self._run(_RESERVE, [n]))

    def create_streams(self, receipts: Sequence[Receipt]) -> set[str]:
        """Insert the row of each receipt's stream, already headed by that receipt (each
        receipt opens its stream); the names that were new. An existing row is left as it
        is, and a row another transaction is inserting waits for it (as `lock` does)."""
        if self.postgres:
            return {name for (name,) in self._run(_CREATE_PG, [_streams_json(receipts)])}
        created: set[str] = set()
        for part in chunks(receipts, 5):
            params: list[Any] = []
            for r in part:
                params += [r.stream, r.hash, 1, r.ts, r.ts]
            sql = _CREATE_SQLITE.format(rows=", ".join(["(%s, %s, %s, %s, %s)"] * len(part)))
            created.update(name for (name,) in self._run(sql, params))
        return created

    def write_first(self, receipts: Sequence[Receipt]) -> list[Receipt]:
        """Insert receipts that each open their stream (stream_seq 1; the stream rows come
        from `create_streams`) and, on PostgreSQL, notify each one as `write` does; they
        come back positioned, global seqs in the order of `receipts` (on PostgreSQL
        reserved here)."""
        placed: list[Receipt] = []
        try:
            if self.postgres:
                reserved = self.reserve_seqs(len(receipts))
                assert reserved is not None
                placed = _first(receipts, reserved)
                self._run(_WRITE_FIRST_PG, [_receipts_json(placed)], rows=False)
                return placed
            for part in chunks(receipts, 12):
                params: list[Any] = []
                for r in part:
                    params += _row(r, 1, None)
                sql = _WRITE_FIRST_SQLITE.format(
                    rows=", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(part))
                )
                by_stream = {stream: seq for seq, stream in self._run(sql, params)}
                placed += _first(part, [by_stream[r.stream] for r in part])
        except IntegrityError as error:
            # A stream that already had its first receipt (S-4).
            raise ExpectedPrevMismatch(None, None) from error
        return placed

    def send_open_new(
        self,
        receipts: Sequence[Receipt],
        rows: Sequence[tuple[str, Sequence[Any]]],
        *,
        positions: bool = True,
    ) -> Callable[[], dict[str, int]]:
        """PostgreSQL: insert receipts that each open a new stream, their stream rows and
        `rows` ((an INSERT, its parameters) per read model; `text_arrays` helps) in one
        statement; returns the function that reads {stream: global seq} (inside
        `pipeline`, call it after the block; without `positions` the statement returns no
        seqs and the function must not be called). Outside a transaction the statement
        commits on its own. A stream that exists fails it with an IntegrityError (on
        sending, or in a pipeline when it syncs) and nothing of it is written."""
        assert self.postgres
        source, columns = text_rows(
            [(r.stream, r.id, r.ts, r.hash, r.type, r.body, r.context, r.sealed) for r in receipts],
            8,
            json=(5, 6),
            ordinal=True,
        )
        sql = _open_new_sql(source, tuple(insert for insert, _ in rows), positions)
        for _, params in rows:
            columns += params
        db = connections[DEFAULT_DB_ALIAS]  # one lookup of the thread's connection
        cursor = bound_cursor()
        with db.wrap_database_errors:
            cursor.execute(sql, columns, prepare=True)

        def seqs() -> dict[str, int]:
            with db.wrap_database_errors, cursor:
                return {stream: seq for seq, stream in cursor.fetchall()}

        return seqs

    @contextmanager
    def pipeline(self) -> Iterator[None]:
        """PostgreSQL: statements in the block are sent without waiting for their results
        (psycopg pipeline mode), so the server writes one chunk while the caller prepares
        the next; results come when asked for, errors at the latest when the block ends.
        SQLite: nothing changes."""
        with db_pipeline.pipeline():
            yield

    def send_first(
        self, receipts: Sequence[Receipt], seqs: Sequence[int] | None
    ) -> tuple[list[Receipt], Callable[[], set[str]]]:
        """`create_streams` then `write_first` (at `seqs`, from `reserve_seqs`) without
        waiting for either (inside `pipeline`): the receipts positioned, and a function
        that waits for the names created. A receipt whose stream row existed shows as its
        name missing from those, or as an IntegrityError (then, or later in the block)."""
        if not self.postgres:
            names = self.create_streams(receipts)
            placed = self.write_first(receipts)
            return placed, lambda: names
        assert seqs is not None
        placed = _first(receipts, seqs)
        streams = bound_cursor()
        with connection.wrap_database_errors, bound_cursor() as written:
            streams.execute(_CREATE_PG, [_streams_json(placed)], prepare=True)
            written.execute(_WRITE_FIRST_PG, [_receipts_json(placed)], prepare=True)

        def created() -> set[str]:
            with connection.wrap_database_errors, streams:
                return {name for (name,) in streams.fetchall()}

        return placed, created

    def send_held(self, name: str, head: str, count: int) -> None:
        """PostgreSQL, inside `pipelined()`: lock `name` assuming it ends at `head` after
        `count` receipts, without waiting (`_HELD_PG`: a wrong assumption fails the
        transaction when it syncs)."""
        assert self.postgres
        if gathering() is not None:  # the head's move is the lock (`write`)
            self._held = (head, count)
            return
        assert in_pipeline()
        self._run(_HELD_PG, [name, head, count], rows=False)

    def drop_if_empty(self, name: str) -> None:
        self._run(_DROP_EMPTY, [name], rows=False)

    def close(self) -> None:
        if "_cursor" in self.__dict__:
            self._cursor.close()
