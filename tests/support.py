"""Helpers every test area shares."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def present(value: T | None) -> T:
    """`value`, which the test expects to be there (a read of what it just wrote)."""
    assert value is not None
    return value
