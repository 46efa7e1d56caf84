"""A column sent as one binary `text[]` parameter reaches PostgreSQL as the texts it
holds, in order, NULLs and any script included (T-1: set-based writes send each column
so)."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import connection

from receipts.db import text_rows
from receipts.db.text_array import TextArray, encode

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


def _selected(rows: list[tuple], *, json: tuple[int, ...] = ()) -> list[tuple]:
    source, params = text_rows(rows, 3, json=json, ordinal=True)
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            f"SELECT a, b::bigint, c::json::text, o FROM {source} AS v(a, b, c, o) ORDER BY o",
            params,
        )
        return cursor.fetchall()


@pytest.mark.parametrize(
    "rows",
    [
        [("jobs/x", 7, {"k": ["é", None]})],
        [(None, None, None)],
        [("jobs/x", 7, {"k": 1}), (None, None, None), ("y", -1, [])],
    ],
)
def test_one_row_and_many_rows_reach_the_server_alike(rows):
    """T-1: a one-row source is a VALUES row of texts, many rows are text arrays; either
    way the statement reads the same values, cast the same, numbered from 1."""
    expected = [
        (a, b, None if c is None else json.dumps(c, ensure_ascii=False, separators=(",", ":")), n)
        for n, (a, b, c) in enumerate(rows, 1)
    ]
    assert _selected(rows, json=(2,)) == expected
    assert ("VALUES" in text_rows(rows, 3)[0]) is (len(rows) == 1)
