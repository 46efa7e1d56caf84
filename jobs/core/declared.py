"""Named declarations given as one JSON array (schedules, limits): read from settings text
or an already parsed list, each item checked by its own reader, names unique. Pure."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def parse_array(
    value: Any,
    *,
    noun: str,
    error: type[ValueError],
    item: Callable[[Any, int], T],
    name_of: Callable[[T], str],
) -> tuple[T, ...]:
    """`value`: JSON text (empty declares none) or a sequence; `item(raw, index)` reads
    one; `error` is raised naming what is wrong, as "<noun> <name> is declared twice"."""
    text = isinstance(value, str)
    if text:
        if not value.strip():
            return ()
        try:
            value = json.loads(value)
        except json.JSONDecodeError as problem:
            raise error(f"is not valid JSON: {problem}") from None
    if not isinstance(value, Sequence) or isinstance(value, str):
        wanted = f"a JSON array of {noun}s" if text else f"a list of {noun}s (or their JSON text)"
        raise error(f"must be {wanted}, got {type(value).__name__}")
    items = tuple(item(raw, index) for index, raw in enumerate(value))
    names = [name_of(one) for one in items]
    for name in names:
        if names.count(name) > 1:
            raise error(f"{noun} {name!r} is declared twice")
    return items
