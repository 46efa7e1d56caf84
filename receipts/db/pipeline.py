"""Pipeline mode: statements that travel without waiting for each other, and the
transaction whose BEGIN and COMMIT travel with its statements (PostgreSQL; on SQLite each
helper is plain `atomic()` or nothing). A refused assumption, a statement sent on the
belief that a row is as the caller last saw it (`refused_unless_found`), fails such a
transaction whole and comes out of it as `AssumptionRefused`.

The psycopg internals it relies on, each covered by tests/integration/receipts/
test_pipelined_transaction.py and test_round_trips.py: the connection's current pipeline
(`_pipeline`, to sync it without opening a nested block) and autocommit turned on under
Django's transaction so that our own BEGIN travels with the first statements.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DataError, connection, connections, transaction

# division_by_zero: what a statement of `refused_unless_found` raises when the row it
# assumed is not there
_REFUSED_SQLSTATE = "22012"


class AssumptionRefused(DataError):
    """A statement sent on an assumption (`refused_unless_found`) found it false: the
    transaction failed whole and nothing of it is kept. The caller reads and decides
    again, without the assumption."""


def refused_unless_found(select: str) -> str:
    """A statement that fails (as `AssumptionRefused`, when the pipeline syncs) unless
    `select` finds a row: the lock of a row the caller believes is as it last saw it,
    sent without waiting for its answer."""
    return f"SELECT 1 / count(*) FROM ({select}) AS held"


def in_pipeline() -> bool:
    """PostgreSQL: the connection is in pipeline mode (inside `pipelined()`)."""
    db = connections[DEFAULT_DB_ALIAS]
    pg = db.connection
    return db.vendor == "postgresql" and pg is not None and bool(pg.pgconn.pipeline_status)


@contextmanager
def results_now(pg: Any) -> Iterator[None]:
    """In pipeline mode, one sync after the block: what was sent before it and in it has
    its results when the block ends (one round trip for all of it). Not a nested pipeline
    block: psycopg syncs on entering one while a statement is in flight, a round trip
    more."""
    pipeline = getattr(pg, "_pipeline", None)  # the connection's current pipeline
    if not pg.pgconn.pipeline_status:
        yield
    elif pipeline is None:  # not where this psycopg keeps it: a nested block, as before
        with pg.pipeline():
            yield
    else:
        yield
        pipeline.sync()


@contextmanager
def results_together() -> Iterator[None]:
    """PostgreSQL: the statements of the block travel together and all have their
    results when it ends: one round trip, in a pipeline or out of one."""
    pg = connection.connection
    with connection.wrap_database_errors, results_now(pg) if in_pipeline() else pg.pipeline():
        yield


@contextmanager
def pipeline() -> Iterator[None]:
    """PostgreSQL: psycopg's pipeline mode for the block on the connection as it is (a
    caller already inside its transaction): statements are sent without waiting for
    their results, which come when asked for, errors at the latest when the block ends.
    SQLite: nothing changes."""
    if connection.vendor != "postgresql":
        yield
        return
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


@contextmanager
def pipelined() -> Iterator[None]:
    """PostgreSQL: the block's statements travel without waiting for each other (psycopg
    pipeline mode). A statement's result is waited for only when it is read (a lock's
    head, a state read, a RETURNING); everything else goes with the next read or the end
    of the block: a job write costs four round trips instead of seven.

    Enter it inside the transaction (`pipelined_transaction` sends BEGIN with the first
    statements; inside a plain `atomic()` psycopg waits for its own BEGIN): the commit's
    on-commit hooks must not run in pipeline mode, where an ORM update's row count is
    unknown until the next sync. Use it only around code that reads what it
    needs (`prepared`, `Writer`, fetches), never around ORM updates, and never around code
    that recovers from a failed statement under a savepoint and goes on: statements
    prepared after the failure were skipped by the server but are believed prepared.
    SQLite: nothing."""
    if connection.vendor != "postgresql" or in_pipeline():
        yield
        return
    connection.close_if_health_check_failed()  # its SELECT 1 must not wait in the pipeline
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


# Inside `pipelined_transaction`: appends do not wait for their receipts' global seqs.
_POSITIONS_DEFERRED: ContextVar[bool] = ContextVar("receipt_positions_deferred", default=False)


def positions_deferred() -> bool:
    """Appends in this block leave their receipts' global `seq` unread (None): the writes
    travel with the rest of the block instead of waiting a round trip for it."""
    return _POSITIONS_DEFERRED.get() and in_pipeline()


@contextmanager
def pipelined_transaction(*, savepoint: bool = True) -> Iterator[None]:
    """`transaction.atomic()` around `pipelined()` whose BEGIN and COMMIT, on PostgreSQL,
    travel with the block's first and last statements instead of costing a round trip
    each. Only an outermost transaction does that, and commits only when its block ends
    normally with nothing marked for rollback; inside another transaction this is plain
    `atomic(savepoint=savepoint)` around `pipelined()`.

    Django's own commit at the end of `atomic()` then finds the connection idle and sends
    nothing; its on-commit hooks run as usual, after the commit and outside the pipeline.
    A COMMIT that fails (its error comes with the block's results) rolls back as any
    failed commit does and raises; a refused assumption raises `AssumptionRefused`.

    Appends in the block leave their receipts' global `seq` unread (`positions_deferred`):
    for code that needs the state it wrote, never the positions (the attempt machine and
    the driver)."""
    token = _POSITIONS_DEFERRED.set(True)
    try:
        with _refusal_typed(), _pipelined_transaction(savepoint=savepoint):
            yield
    finally:
        _POSITIONS_DEFERRED.reset(token)


@contextmanager
def _refusal_typed() -> Iterator[None]:
    try:
        yield
    except AssumptionRefused:
        raise
    except DataError as error:
        if getattr(error.__cause__, "sqlstate", None) != _REFUSED_SQLSTATE:
            raise
        raise AssumptionRefused(str(error)) from error


@contextmanager
def _pipelined_transaction(*, savepoint: bool) -> Iterator[None]:
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        with transaction.atomic(savepoint=savepoint), pipelined():
            yield
        return
    import psycopg

    with transaction.atomic():
        connection.close_if_health_check_failed()  # its SELECT 1 must not wait in the pipeline
        connection.ensure_connection()
        pg = connection.connection
        # psycopg begins a transaction of its own before the first statement and, in
        # pipeline mode, waits for that BEGIN: a round trip. With its autocommit on (Django
        # still counts the block as its transaction) the BEGIN is ours and travels with
        # the block's first statements; the COMMIT, or the ROLLBACK, with its last.
        pg.autocommit = True
        try:
            with pipelined(), connection.wrap_database_errors, psycopg.Cursor(pg) as cur:
                cur.execute("BEGIN")
                try:
                    yield
                    cur.execute("ROLLBACK" if connection.needs_rollback else "COMMIT")
                except BaseException:
                    _end_failed(pg, cur)
                    raise
        finally:
            if pg.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                pg.autocommit = False  # as Django set it for the block (it restores its own)
            # else a failed block: Django's rollback ends the transaction either way


def _end_failed(pg: Any, cur: Any) -> None:
    """A pipelined transaction whose block failed: ROLLBACK, and the pipeline synced here,
    so that the block's own error is the one raised (a server error also fails this sync,
    and what psycopg reports of that on leaving the pipeline would only repeat it)."""
    try:
        cur.execute("ROLLBACK")  # skipped by the server after an error; Django's rollback
        pipeline = getattr(pg, "_pipeline", None)
        if pipeline is not None:
            pipeline.sync()
    except Exception:  # the block's error is the one the caller raises
        pass
