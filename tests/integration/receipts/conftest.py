"""Fixtures of the store tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import listening


@pytest.fixture
def receipt_listener() -> Iterator[Any]:
    """A separate PostgreSQL session LISTENing on the store's `receipt` channel."""
    with listening("receipt") as listener:
        yield listener
