"""A column of texts sent to PostgreSQL as one binary `text[]` parameter (`%b::text[]`,
unnested by the statement): set-based writes send each column so (`params.text_arrays`).

psycopg's own list dumper inspects every list for its element type and dims and dumps
element by element through a dumper each: a fixed cost per parameter that a one-job
enqueue paid some twenty times, and most of a large batch's dumping. A column here is
known to hold only `str` or None, so its wire form is written directly."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from psycopg import adapters
from psycopg.adapt import Dumper
from psycopg.pq import Format

TEXT_OID = 25
TEXT_ARRAY_OID = 1009
_HEADER = struct.Struct("!iiIii")  # dimensions, has nulls, element type, length, lower bound
_EMPTY = struct.pack("!iiI", 0, 0, TEXT_OID)  # no dimensions
_NULL = b"\xff\xff\xff\xff"  # an element's length -1


class TextArray:
    """Texts (or None) to be sent as one binary `text[]` parameter."""

    __slots__ = ("values",)

    def __init__(self, values: Sequence[str | None]) -> None:
        self.values = values


def encode(values: Sequence[str | None]) -> bytes:
    """PostgreSQL's binary form of a one-dimensional `text[]` holding `values`."""
    if not values:
        return _EMPTY
    parts: list[bytes] = [b""]
    nulls = 0
    for value in values:
        if value is None:
            nulls = 1
            parts.append(_NULL)
        else:
            data = value.encode()
            parts.append(len(data).to_bytes(4, "big"))
            parts.append(data)
    parts[0] = _HEADER.pack(1, nulls, TEXT_OID, len(values), 1)
    return b"".join(parts)


class _TextArrayBinaryDumper(Dumper):
    format = Format.BINARY
    oid = TEXT_ARRAY_OID

    def dump(self, obj: TextArray) -> bytes:
        return encode(obj.values)


# Global: connections made after this import (the app's, as it loads) dump TextArray so.
adapters.register_dumper(TextArray, _TextArrayBinaryDumper)
