"""Canonical JSON (S-2): the exact bytes every client hashes.

Canonical form is what ``json.dumps(value, sort_keys=True, separators=(",", ":"),
ensure_ascii=False, allow_nan=False)`` produces, encoded as UTF-8. Values are checked
first so a bad one is reported with its path (``$.body.items[2]``) instead of the
generic message json gives, and so values json would silently coerce (tuples, int
keys, float subclasses of other meaning) never reach a hash.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

JSONValue = Any  # recursive JSON aliases are not worth mypy's trouble here


class CanonicalJSONError(ValueError):
    """A value that has no canonical JSON form; the message names its path."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{reason} at {path}")
        self.path = path
        self.reason = reason


# Nesting the quick pass walks before it hands over to the careful one (which finds cycles).
_QUICK_DEPTH = 64
# What the quick pass found: look carefully, plain JSON without a float, plain with one.
_CAREFUL, _NO_FLOATS, _FLOATS = 0, 1, 2


def check_json(value: JSONValue, *, path: str = "$", max_depth: int | None = None) -> None:
    """Raise CanonicalJSONError unless `value` is plain JSON (dict/list/str/int/float/bool/None)."""
    limit = _QUICK_DEPTH if max_depth is None else min(max_depth, _QUICK_DEPTH)
    if _plain(value, 0, limit) == _CAREFUL:  # anything unusual: the careful pass names it
        _check(value, path, set(), 0, max_depth)


def _plain(value: Any, depth: int, limit: int) -> int:
    """The common case at a fraction of `_check`'s cost (every receipt is checked): exact
    JSON types only, no paths built, no cycle bookkeeping (the depth bounds the walk).
    _CAREFUL means "look carefully", not "invalid": subclasses and deep values land there."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return _NO_FLOATS
    if kind is float:
        return _FLOATS if math.isfinite(value) else _CAREFUL
    if kind is dict:
        for key in value:  # a loop, not any(): no generator per object
            if type(key) is not str:
                return _CAREFUL
        return _members(value.values(), depth, limit) if value else _NO_FLOATS
    if kind is list:
        return _members(value, depth, limit) if value else _NO_FLOATS
    return _CAREFUL


def _members(items: Any, depth: int, limit: int) -> int:
    if depth >= limit:  # its members would be one level too deep
        return _CAREFUL
    found = _NO_FLOATS
    for item in items:
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        code = _plain(item, depth + 1, limit)
        if code == _CAREFUL:
            return _CAREFUL
        found = max(found, code)
    return found


def _check(value: Any, path: str, seen: set[int], depth: int, max_depth: int | None) -> None:
    if max_depth is not None and depth > max_depth:
        raise CanonicalJSONError(path, f"nesting deeper than {max_depth} levels")
    if value is None or isinstance(value, (str, bool)):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise CanonicalJSONError(path, f"non-finite number {value!r} is not JSON")
        return
    if isinstance(value, (dict, list)):
        marker = id(value)
        if marker in seen:
            raise CanonicalJSONError(path, "cycle detected")
        seen.add(marker)
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise CanonicalJSONError(path, f"object key {key!r} is not a string")
                _check(item, f"{path}.{key}", seen, depth + 1, max_depth)
        else:
            for index, item in enumerate(value):
                _check(item, f"{path}[{index}]", seen, depth + 1, max_depth)
        seen.discard(marker)
        return
    raise CanonicalJSONError(path, f"value of type {type(value).__name__} is not JSON")


# A faster writer of the same text for float-free values, installed from outside the
# core (`receipts.wire_json` installs orjson's): the core itself uses json alone.
_sorted_dumps: Callable[[JSONValue], str | None] | None = None


def use_sorted_dumps(dumps: Callable[[JSONValue], str | None] | None) -> None:
    """Install `dumps` for float-free values: sorted keys, compact, unescaped, byte for
    byte json's text (tested over generated values), or None for a value it refuses."""
    global _sorted_dumps
    _sorted_dumps = dumps


def canonical_json(value: JSONValue) -> str:
    """The canonical text of `value` (checked first, see module docstring). Without a
    float, the installed fast writer (`use_sorted_dumps`) writes it, several times
    faster than json. Floats (whose spelling differs: `1e+16` against `1e16`) and what
    the fast writer refuses (integers past 64 bits, lone surrogates) take json."""
    found = _plain(value, 0, _QUICK_DEPTH)
    if found == _CAREFUL:
        _check(value, "$", set(), 0, None)
    elif found == _NO_FLOATS and _sorted_dumps is not None:
        text = _sorted_dumps(value)
        if text is not None:
            return text
    return json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        check_circular=False,
    )


def sha256_hex(value: JSONValue) -> str:
    """sha256 of the UTF-8 canonical JSON of `value`, as 64 lowercase hex chars."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def same_json(sealed: JSONValue, stored: JSONValue) -> bool:
    """Whether `stored`, a value as a database gave it back, is the JSON value `sealed`.

    PostgreSQL's jsonb keeps numbers as decimals and respells them (`1e16` comes back as
    `10000000000000000`, `-0.0` as `0.0`), so a sealed float agrees with any number that
    reads back as the same double (negative zero included: jsonb cannot keep the sign).
    Everything else must be equal and of the same JSON type: an int stays an int, a bool
    a bool, and objects have the same keys.
    """
    if sealed is None:
        return stored is None
    if isinstance(sealed, (bool, str)):
        return isinstance(stored, type(sealed)) and stored == sealed
    if isinstance(sealed, float):
        if isinstance(stored, bool) or not isinstance(stored, (int, float)):
            return False
        try:
            return float(stored) == sealed
        except OverflowError:  # an int past the float range is no float we sealed
            return False
    if isinstance(sealed, int):
        return isinstance(stored, int) and not isinstance(stored, bool) and stored == sealed
    if isinstance(sealed, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(sealed)
            and all(same_json(a, b) for a, b in zip(sealed, stored, strict=True))
        )
    if isinstance(sealed, dict):
        return (
            isinstance(stored, dict)
            and stored.keys() == sealed.keys()
            and all(same_json(value, stored[key]) for key, value in sealed.items())
        )
    return False
