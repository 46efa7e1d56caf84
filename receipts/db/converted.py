"""psycopg's placeholder conversion, remembered for every hot-path statement (a workaround
of its internals, pinned by tests/integration/receipts/test_db_door.py).

psycopg turns a statement's `%s` placeholders into `$n` by splitting its whole text, and
remembers the result only for statements of at most 50 parameters and 4 KiB. The
one-statement transactions of the hot path are longer (an attempt's begin has about 60
parameters, a completion sent with the next begin about 110), so every execute split
their text again (in paired drains, 0.1-0.3 of a worker process's 1.4-1.8 core-ms a
job). Their texts are fixed strings (a varying row count travels as arrays), so a bounded
cache holds them all.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import psycopg
from psycopg._queries import PostgresQuery, _query2pg_nocache

CACHED = 512  # statement texts: the hot path has a few dozen


@lru_cache(maxsize=CACHED)
def _converted(query: bytes, encoding: str) -> Any:
    return _query2pg_nocache(query, encoding)


class _Query(PostgresQuery):
    def convert(self, query: Any, vars: Any) -> None:
        if vars is None or not isinstance(query, str | bytes):
            super().convert(query, vars)
            return
        converted = _converted(self._ensure_bytes(query), self._tx.encoding)
        self.query, self._want_formats, self._order, self._parts = converted
        self.dump(vars)


class Cursor(psycopg.Cursor[Any]):
    """psycopg's cursor, with every statement's conversion remembered."""

    _query_cls = _Query
