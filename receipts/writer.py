"""The SQL of an append, per database (S-3, S-4, S-9). Only `receipts.store` calls it.

PostgreSQL: statements go through one server-side-binding psycopg cursor and are
prepared (the hot path runs the same few statements millions of times), and the receipt
insert, the head update and `pg_notify` travel as ONE statement (data-modifying CTEs), so
an append costs three round trips: lock, write, commit. SQLite: the same steps as plain
statements (it has no data-modifying CTEs and nothing to notify).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, connection

from receipts.core.chain import Receipt
from receipts.errors import ExpectedPrevMismatch

NOTIFY_CHANNEL = "receipt"
_COLUMNS = "stream, stream_seq, receipt_id, ts, prev, hash, event_type, body, context, hints, event_id"
_LOCK = (
    "INSERT INTO receipt_stream (name, head, receipt_count, last_ts, updated_at) "
    "VALUES (%s, NULL, 0, NULL, 0) "
    "ON CONFLICT (name) DO UPDATE SET name = excluded.name "
    "RETURNING head, receipt_count"
)
_UPDATE_HEAD = ("UPDATE receipt_stream SET head = %s, receipt_count = %s, last_ts = %s, "
                "updated_at = %s WHERE name = %s")
_DROP_EMPTY = "DELETE FROM receipt_stream WHERE name = %s AND receipt_count = 0"


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _rows(receipts: Sequence[Receipt], first_stream_seq: int,
          event_ids: Sequence[str | None]) -> list[Any]:
    params: list[Any] = []
    for offset, (r, event_id) in enumerate(zip(receipts, event_ids, strict=True)):
        params += [r.stream, first_stream_seq + offset, r.id, r.ts, r.prev, r.hash, r.type,
                   _dump(r.body), _dump(r.context), _dump(r.hints), event_id]
    return params


class Writer:
    """One stream's writes inside the current transaction."""

    def __init__(self) -> None:
        self.postgres = connection.vendor == "postgresql"
        if self.postgres:
            import psycopg

            connection.ensure_connection()
            self._cursor: Any = psycopg.Cursor(connection.connection)  # server-side binding
        else:
            self._cursor = connection.cursor()

    def _run(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        # Django's wrapper turns driver errors into django.db errors, as for any query.
        with connection.wrap_database_errors:
            if self.postgres:
                self._cursor.execute(sql, params, prepare=True)
            else:
                self._cursor.execute(sql, params)
            return self._cursor.fetchall() if self._cursor.description else []

    def lock(self, name: str) -> tuple[str | None, int]:
        head, count = self._run(_LOCK, [name])[0]
        return head, count

    def write(self, receipts: Sequence[Receipt], *, first_stream_seq: int,
              event_ids: Sequence[str | None], head: str, count: int) -> dict[int, int]:
        """Insert `receipts`, move the head; returns {stream_seq: global seq}."""
        stream, last_ts = receipts[0].stream, receipts[-1].ts
        params = _rows(receipts, first_stream_seq, event_ids)
        try:
            if self.postgres:
                one = "(%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb, %s)"
                sql = (
                    f"WITH ins AS (INSERT INTO receipt_receipt ({_COLUMNS}) VALUES "
                    f"{', '.join([one] * len(receipts))} RETURNING seq, stream_seq, event_type), "
                    "upd AS (UPDATE receipt_stream SET head = %s, receipt_count = %s, "
                    "last_ts = %s, updated_at = %s WHERE name = %s), "
                    f"note AS (SELECT pg_notify('{NOTIFY_CHANNEL}', "
                    "ins.seq::text || ' ' || %s::text || ' ' || ins.event_type) FROM ins) "
                    "SELECT ins.seq, ins.stream_seq FROM ins, (SELECT count(*) FROM note) AS n"
                )
                rows = self._run(sql, [*params, head, count, last_ts, last_ts, stream, stream])
            else:
                one = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                sql = (f"INSERT INTO receipt_receipt ({_COLUMNS}) VALUES "
                       f"{', '.join([one] * len(receipts))} RETURNING seq, stream_seq")
                rows = self._run(sql, params)
                self._run(_UPDATE_HEAD, [head, count, last_ts, last_ts, stream])
        except IntegrityError as error:
            # The stream lock makes this unreachable in normal operation; the unique
            # (stream, stream_seq) index is the last line of defence against a fork (S-4).
            raise ExpectedPrevMismatch(receipts[0].prev, None) from error
        return {stream_seq: seq for seq, stream_seq in rows}

    def drop_if_empty(self, name: str) -> None:
        self._run(_DROP_EMPTY, [name])

    def close(self) -> None:
        self._cursor.close()
