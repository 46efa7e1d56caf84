"""One generic translation between the core's frozen dataclasses and camelCase JSON.

The objective state is nested (tasks, runs, requests ...); writing a to/from pair per
class would be a page of boilerplate each. Every field is plain JSON, a tuple of
dataclasses, an optional dataclass or a JSON object, so one codec covers them all.
`from_wire(cls, to_wire(x)) == x` for every state the reducer produces.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Hashable, Mapping
from functools import cache
from typing import Any, TypeVar, cast

from jobs.core.flat_wire import camel

T = TypeVar("T")


def to_wire(value: Any) -> Any:
    """A dataclass (recursively) as camelCase JSON; other values deep-copied."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {camel(f.name): to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_wire(item) for item in value]
    if isinstance(value, dict):
        return {key: to_wire(item) for key, item in value.items()}
    return value


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_wire(cls: type[T], data: Mapping[str, Any]) -> T:
    """Rebuild `cls` from `to_wire` output; a missing field with a default takes it."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls.__name__} wire form must be an object, got {type(data).__name__}")
    hints = _hints(cast(Hashable, cls))
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = camel(f.name)
        if key not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{cls.__name__} wire form lacks {key!r}")
            continue
        kwargs[f.name] = _decode(hints[f.name], data[key])
    return cls(**kwargs)


def _decode(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return _decode(options[0], value)
    if origin is tuple:
        item = typing.get_args(tp)[0]
        return tuple(_decode(item, v) for v in value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_wire(tp, value)
    return copy.deepcopy(value)
