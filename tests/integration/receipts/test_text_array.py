"""A column sent as one binary `text[]` parameter reaches PostgreSQL as the texts it
holds, in order, NULLs and any script included (T-1: set-based writes send each column
so)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from receipts.text_array import TextArray, encode

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]


def _unnested(values: list[str | None]) -> list[str | None]:
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            "SELECT v FROM unnest(%b::text[]) WITH ORDINALITY AS u(v, n) ORDER BY n",
            [TextArray(values)],
        )
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.parametrize(
    "values",
    [
        ["a"],
        ["jobs/x", None, "", "héllo ✓ 𝄞", '{"k": "\\"quoted\\""}', None],
        [None],
        ["x" * 100_000, "y"],
    ],
)
def test_the_server_reads_the_texts_in_order(values):
    assert _unnested(values) == values


def test_an_empty_column_is_an_empty_array():
    assert _unnested([]) == []
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute("SELECT cardinality(%b::text[])", [TextArray([])])
        assert cursor.fetchone() == (0,)


def test_the_wire_form_is_postgresqls_binary_array():
    assert encode(["ab", None]) == (
        b"\x00\x00\x00\x01"  # one dimension
        b"\x00\x00\x00\x01"  # has nulls
        b"\x00\x00\x00\x19"  # text
        b"\x00\x00\x00\x02\x00\x00\x00\x01"  # two elements from index 1
        b"\x00\x00\x00\x02ab"
        b"\xff\xff\xff\xff"
    )
