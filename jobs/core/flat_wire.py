"""The camelCase wire form of a flat dataclass (a queue's or a schedule's fold, a kind's
contract, a group's settings, a delivery promise): each field's value as it is, under its
name in camelCase. Reading fills a missing key with None, so a row written before a field
existed still loads. Pure."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar, Protocol, TypeVar


class DataclassInstance(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]


T = TypeVar("T", bound=DataclassInstance)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def to_wire(state: DataclassInstance) -> dict[str, Any]:
    return {camel(name): value for name, value in asdict(state).items()}


def from_wire(cls: type[T], wire: dict[str, Any]) -> T:
    return cls(**{f.name: wire.get(camel(f.name)) for f in fields(cls)})
