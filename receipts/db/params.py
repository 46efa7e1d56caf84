"""Statement parameters for set-based writes on PostgreSQL: rows sent as one binary
`text[]` per column (`text_array`) and unnested by the statement, or, for a single row, a
VALUES row of plain text parameters. JSON columns travel as JSON text (`wire_json`)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from receipts import wire_json
from receipts.db.text_array import TextArray


def dump(value: Any) -> str | None:
    """`value` as JSON text for a parameter; None stays NULL."""
    return None if value is None else wire_json.dumps(value)


def text(value: Any) -> str | None:
    """`value` as the text a `::text` parameter carries (integers in decimal)."""
    return value if value is None or type(value) is str else str(value)


def text_arrays(
    rows: Sequence[Sequence[Any]], width: int, *, json: Sequence[int] = ()
) -> list[TextArray]:
    """PostgreSQL: the `width` columns of `rows`, each as one binary `%b::text[]`
    parameter to `unnest` in the statement, cast there where the column is not text:
    integers in decimal, the columns at positions `json` as JSON text, None as NULL.
    Nothing is escaped on the way and the server parses only the JSON columns."""
    columns: list[TextArray] = []
    for index in range(width):
        values = [dump(r[index]) for r in rows] if index in json else [text(r[index]) for r in rows]
        columns.append(TextArray(values))
    return columns


def text_rows(
    rows: Sequence[Sequence[Any]], width: int, *, json: Sequence[int] = (), ordinal: bool = False
) -> tuple[str, list[Any]]:
    """PostgreSQL: `rows` of `width` text columns (cast in the statement as with
    `text_arrays`) as a row source to select FROM, and its parameters. Many rows: `unnest`
    of a binary text array per column. One row (a one-job enqueue): a VALUES row of plain
    text parameters, which the server neither builds nor unnests as arrays, about a fifth
    of that statement's time. `ordinal`: a last column numbering the rows from 1."""
    if len(rows) != 1:
        return _source_sql(width, False, ordinal), list(text_arrays(rows, width, json=json))
    row = rows[0]
    return _source_sql(width, True, ordinal), [
        dump(row[index]) if index in json else text(row[index]) for index in range(width)
    ]


@cache
def _source_sql(width: int, one: bool, ordinal: bool) -> str:
    if one:
        cells = ["%s::text"] * width + (["1::bigint"] if ordinal else [])
        return f"(VALUES ({', '.join(cells)}))"
    arrays = f"unnest({', '.join(['%b::text[]'] * width)})"
    return arrays + (" WITH ORDINALITY" if ordinal else "")
