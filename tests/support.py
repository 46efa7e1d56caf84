"""Helpers every test area shares."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


@contextmanager
def listening(channel: str) -> Iterator[Any]:
    """A separate PostgreSQL session (autocommit) LISTENing on `channel` of the test
    database, closed when the block ends."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    listener = psycopg.connect(
        host=db["HOST"],
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname=db["NAME"],
        autocommit=True,
    )
    try:
        listener.execute(f"LISTEN {channel}")
        yield listener
    finally:
        listener.close()


def present(value: T | None) -> T:
    """`value`, which the test expects to be there (a read of what it just wrote)."""
    assert value is not None
    return value
