"""orjson, the fast JSON codec, outside the pure core. JSON text sent to the database
as a statement's parameter (receipt bodies, rows of a
set-based insert). Any valid JSON text of the value will do there, so the fast encoder
writes it; what it refuses (integers past 64 bits, lone surrogates, non-string keys)
goes through `json` as before. Never used for a hash: that text is
`canonical.canonical_json`'s. Callers pass values already checked as JSON (finite
numbers): orjson would write NaN as null where json writes a token the database
refuses."""

from __future__ import annotations

import json
from typing import Any

import orjson

from receipts.core import canonical


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def loads(text: str | bytes) -> Any:
    """A JSON text the database or a sibling process wrote, decoded (ValueError when it
    is not JSON; orjson also refuses integers past 64 bits, which a job never holds)."""
    return orjson.loads(text)


def size(value: Any) -> int:
    """The length in UTF-8 bytes of `dumps(value)`; UnicodeEncodeError for a lone
    surrogate, which has no UTF-8 bytes."""
    try:
        return len(orjson.dumps(value))
    except (orjson.JSONEncodeError, TypeError):
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _sorted(value: Any) -> str | None:
    """Canonical JSON's fast path (`canonical.use_sorted_dumps`): orjson's sorted text,
    byte for byte json's for float-free values; None where orjson refuses the value."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONEncodeError, TypeError):
        return None


# Every process that writes receipts imports this module (the writer does): canonical
# texts are written fast from then on.
canonical.use_sorted_dumps(_sorted)
