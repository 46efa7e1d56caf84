"""C-8: which database errors mean "the database cannot be reached" (a 503 with
Retry-After), and which stay bugs or refusals (a 500, or their own answer)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError
from psycopg import errors as pg
from psycopg_pool import PoolTimeout

from jobs.api.errors import is_database_unavailable


def wrapped(cause: BaseException, text: str | None = None) -> OperationalError:
    """As Django's error wrapper raises it: its own class, the driver's error as cause."""
    error = OperationalError(text or str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    "error",
    [
        # PostgreSQL stopped or unreachable: refused at connect time (no SQLSTATE)
        wrapped(
            psycopg.OperationalError(
                'connection failed: connection to server at "127.0.0.1", port 5432 '
                "failed: Connection refused"
            )
        ),
        # the server went away under an open connection
        wrapped(
            psycopg.OperationalError(
                "consuming input failed: server closed the connection unexpectedly"
            )
        ),
        wrapped(psycopg.OperationalError("the connection is lost")),
        # a stop or crash restart (SQLSTATE 57P01, 57P02), a server still starting (57P03)
        wrapped(pg.AdminShutdown("terminating connection due to administrator command")),
        wrapped(pg.CrashShutdown("terminating connection due to crash of another process")),
        wrapped(pg.CannotConnectNow("the database system is starting up")),
        wrapped(pg.TooManyConnections("sorry, too many clients already")),
        wrapped(pg.ConnectionFailure("connection failure")),
        # the API's connection pool found no connection in time
        wrapped(PoolTimeout("couldn't get a connection after 5.00 sec")),
        InterfaceError("connection already closed"),
        # SQLite: busy past its timeout, or its file cannot be opened
        OperationalError("database is locked"),
        OperationalError("unable to open database file"),
    ],
    ids=lambda error: str(error)[:40],
)
def test_errors_of_a_database_out_of_reach(error):
    assert is_database_unavailable(error)


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("no such table: jobs_job"),
        wrapped(pg.UndefinedTable('relation "jobs_job" does not exist')),
        wrapped(pg.SerializationFailure("could not serialize access")),
        wrapped(pg.QueryCanceled("canceling statement due to statement timeout")),
        IntegrityError("UNIQUE constraint failed: receipt.stream, receipt.seq"),
        DatabaseError("disk I/O error"),
        RuntimeError("connection refused"),  # not a database error at all
    ],
    ids=lambda error: str(error)[:40],
)
def test_other_errors_are_not_an_outage(error):
    assert not is_database_unavailable(error)
