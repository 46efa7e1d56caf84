"""Fixtures of the store tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def receipt_listener() -> Iterator[Any]:
    """A separate PostgreSQL session LISTENing on the store's `receipt` channel."""
    import psycopg
    from django.conf import settings as django_settings

    db = django_settings.DATABASES["default"]
    listener = psycopg.connect(
        host=db["HOST"],
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname=db["NAME"],
        autocommit=True,
    )
    try:
        listener.execute("LISTEN receipt")
        yield listener
    finally:
        listener.close()
