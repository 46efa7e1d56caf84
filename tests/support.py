"""Helpers every test area shares."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


@contextmanager
def listening(channel: str) -> Iterator[Any]:
    """A separate PostgreSQL session (autocommit) LISTENing on `channel` of the test
    database, closed when the block ends."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    listener = psycopg.connect(
        host=db["HOST"],
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname=db["NAME"],
        autocommit=True,
    )
    try:
        listener.execute(f"LISTEN {channel}")
        yield listener
    finally:
        listener.close()


def generate_private_key_pem() -> bytes:
    """A new signing key, PEM (PKCS#8, unencrypted): `openssl genpkey -algorithm ed25519`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def present(value: T | None) -> T:
    """`value`, which the test expects to be there (a read of what it just wrote)."""
    assert value is not None
    return value
