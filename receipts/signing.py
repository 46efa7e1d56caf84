"""Ed25519 signatures over checkpoints of the store-wide log (issue 36).

The one module that imports `cryptography`: the checkpoint itself, and the exact text a
signature covers, are pure (receipts.core.checkpoint). Keys come in as PEM bytes, read
by the caller from a file or a setting outside the database: a key the database holds
would let whoever rewrites the database sign the rewrite too.
"""

from __future__ import annotations

import base64
from dataclasses import replace

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from receipts.core.checkpoint import (
    Checkpoint,
    key_id_of,
    signature_bytes,
    signed_text,
    to_sign,
)


class SigningKeyError(ValueError):
    """Key material that is not an Ed25519 key of the kind asked for."""


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:  # not PEM, encrypted, or not a key at all
        raise SigningKeyError(f"not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"an Ed25519 key is needed, not {type(key).__name__}")
    return key


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(f"not a PEM public key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"an Ed25519 key is needed, not {type(key).__name__}")
    return key


def public_key_pem(key: Ed25519PrivateKey) -> bytes:
    """The public half, PEM (SubjectPublicKeyInfo): what clients are given."""
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_id(key: Ed25519PublicKey) -> str:
    return key_id_of(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def sign(cp: Checkpoint, key: Ed25519PrivateKey) -> Checkpoint:
    """`cp` named for `key` and signed by it."""
    named = to_sign(cp, key_id(key.public_key()))
    signature = key.sign(signed_text(named).encode("utf-8"))
    return replace(named, signature=base64.b64encode(signature).decode("ascii"))


def signature_fault(cp: Checkpoint, key: Ed25519PublicKey) -> str | None:
    """Why `cp` is not signed by `key`, or None when it is."""
    if not cp.signed:
        return "the checkpoint is unsigned"
    expected = key_id(key)
    if cp.key_id != expected:
        return f"signed by key {cp.key_id}, not by the given key {expected}"
    raw = signature_bytes(cp)
    if raw is None:  # a Checkpoint never holds one that is not 64 bytes of base64
        return "the signature is not an Ed25519 signature"
    try:
        key.verify(raw, signed_text(cp).encode("utf-8"))
    except InvalidSignature:
        return "the signature does not match the checkpoint"
    return None
