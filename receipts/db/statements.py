"""Hot-path statements on Django's connection: prepared and server-side bound on
PostgreSQL (no parse and plan per call), plain on SQLite; run now (`prepared`) or only
sent inside a pipeline, their outcome read later (`sent`). `cursor` is the
server-side-binding cursor the store's writer runs its statements on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections

from receipts.db.one_statement import gathering
from receipts.db.pipeline import in_pipeline, results_now


def cursor() -> Any:
    """A psycopg cursor of its own on the current connection (server-side binding: the
    statements it runs with `prepare=True` are prepared once per connection)."""
    from receipts.db.converted import Cursor

    db = connections[DEFAULT_DB_ALIAS]  # one lookup of the thread's connection
    db.ensure_connection()
    return Cursor(db.connection)


def prepared(
    sql: str, params: Sequence[Any], *, wait: bool = True
) -> tuple[list[tuple[Any, ...]], int]:
    """(rows, rowcount) of one hot-path statement on the current connection: prepared and
    server-side bound on PostgreSQL (no parse and plan per call), plain on SQLite.

    Inside `pipelined()`, `wait=False` only sends the statement: it runs in order with
    the rest of the transaction and its outcome is not read (([], -1) comes back), so it
    costs no round trip of its own. `wait=True` always returns the real result. Inside
    `one_statement()`, `wait=False` gathers it (a plain INSERT or UPDATE)."""
    gathered = gathering()
    if gathered is not None:  # inside `one_statement()`: a write of the statement
        assert not wait, "a statement gathered into one has no result to wait for"
        gathered.write(sql, params)
        return [], -1
    if connection.vendor != "postgresql":
        with connection.cursor() as plain:
            plain.execute(sql, params)
            return (plain.fetchall() if plain.description else []), plain.rowcount
    from receipts.db.converted import Cursor

    connection.ensure_connection()
    pg = connection.connection
    with connection.wrap_database_errors, Cursor(pg) as bound:
        if not wait and in_pipeline():
            bound.execute(sql, params, prepare=True)
            return [], -1
        with results_now(pg):
            bound.execute(sql, params, prepare=True)
        return (bound.fetchall() if bound.description else []), bound.rowcount


def sent(sql: str, params: Sequence[Any]) -> Callable[[], tuple[list[tuple[Any, ...]], int]]:
    """`prepared` whose outcome is read later. Inside `pipelined()` on PostgreSQL the
    statement only travels: its (rows, rowcount) come with the next result the block
    reads or with its end, and the returned function gives them then (once). Elsewhere it
    runs at once."""
    if connection.vendor != "postgresql" or not in_pipeline():
        outcome = prepared(sql, params)
        return lambda: outcome
    from receipts.db.converted import Cursor

    bound = Cursor(connection.connection)
    with connection.wrap_database_errors:
        bound.execute(sql, params, prepare=True)

    def outcome_after_sync() -> tuple[list[tuple[Any, ...]], int]:
        with connection.wrap_database_errors, bound:
            return (bound.fetchall() if bound.description else []), bound.rowcount

    return outcome_after_sync
