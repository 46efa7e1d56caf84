"""A checkpoint of the store-wide log (issue 36): the tree's size and root hash at a time,
chained to the checkpoint before it, and signed with Ed25519 or plainly unsigned.

This module owns the checkpoint's fields, its JSON form and the exact text a signature
covers (`signed_text`). It signs nothing: receipts.signing holds the key and the
`cryptography` package, which stays out of the pure cores.

The signed text is canonical JSON (receipts.core.canonical's definition: sorted keys, no
spaces, UTF-8) written with the standard library's json alone, so that the offline
verifier runs on the standard library; for the plain strings and integers of a
checkpoint the bytes are the same (tested). It starts with a format name, so a signature
over a checkpoint can never be taken for a signature over anything else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any

FORMAT = "receipt.checkpoint.v1"
# The root of the empty tree (receipts.core.merkle.EMPTY_ROOT, as hex).
EMPTY_ROOT_HEX = hashlib.sha256(b"").hexdigest()
SIGNATURE_SIZE = 64  # an Ed25519 signature's bytes

_HEX64 = re.compile("[0-9a-f]{64}")
_KEY_ID = re.compile("[0-9a-f]{16}")
_FIELDS = (
    "format",
    "treeSize",
    "rootHash",
    "timestampMs",
    "previous",
    "keyId",
    "signature",
    "signed",
)


class CheckpointError(ValueError):
    """Something that is not a well-formed checkpoint; the message names the field."""


def canonical_text(value: dict[str, Any]) -> str:
    """Canonical JSON of a flat object of strings, integers and nulls."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def key_id_of(raw_public_key: bytes) -> str:
    """A key's id: the first 8 bytes of SHA-256 over its 32 raw Ed25519 bytes, as hex.
    Short enough to read, long enough that two keys of one operator never share it."""
    return hashlib.sha256(raw_public_key).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The first `tree_size` leaves of the log have root `root_hash` (hex), as of
    `timestamp_ms`. `previous` is the hash (`checkpoint_hash`) of the checkpoint before it,
    None for the first. `key_id` names the signing key and `signature` (base64) is over
    `signed_text`; both are None on an unsigned checkpoint."""

    tree_size: int
    root_hash: str
    timestamp_ms: int
    previous: str | None = None
    key_id: str | None = None
    signature: str | None = None

    def __post_init__(self) -> None:
        found = _fault(self)
        if found:
            raise CheckpointError(found)

    @property
    def signed(self) -> bool:
        return self.signature is not None

    def to_wire(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "treeSize": self.tree_size,
            "rootHash": self.root_hash,
            "timestampMs": self.timestamp_ms,
            "previous": self.previous,
            "keyId": self.key_id,
            "signature": self.signature,
            "signed": self.signed,
        }


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def _fault(cp: Checkpoint) -> str | None:
    if not _is_count(cp.tree_size):
        return f"treeSize is a non-negative integer, not {cp.tree_size!r}"
    if not isinstance(cp.root_hash, str) or _HEX64.fullmatch(cp.root_hash) is None:
        return f"rootHash is 64 lowercase hex characters, not {cp.root_hash!r}"
    if cp.tree_size == 0 and cp.root_hash != EMPTY_ROOT_HEX:
        return "rootHash of an empty tree is the hash of nothing (e3b0c442...)"
    if not _is_count(cp.timestamp_ms):
        return f"timestampMs is a non-negative integer, not {cp.timestamp_ms!r}"
    if cp.previous is not None and (
        not isinstance(cp.previous, str) or _HEX64.fullmatch(cp.previous) is None
    ):
        return f"previous is null or 64 lowercase hex characters, not {cp.previous!r}"
    if cp.key_id is not None and (
        not isinstance(cp.key_id, str) or _KEY_ID.fullmatch(cp.key_id) is None
    ):
        return f"keyId is null or 16 lowercase hex characters, not {cp.key_id!r}"
    if cp.signature is None:
        return None
    if cp.key_id is None:
        return "a signature without the keyId of its key"
    if _signature_bytes(cp.signature) is None:
        return f"signature is null or the base64 of {SIGNATURE_SIZE} bytes"
    return None


def _signature_bytes(text: object) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    # one spelling only: what b64encode gives back (no stray padding bits)
    if len(raw) != SIGNATURE_SIZE or base64.b64encode(raw).decode() != text:
        return None
    return raw


def signature_bytes(cp: Checkpoint) -> bytes | None:
    """The raw signature of a signed checkpoint, None on an unsigned one."""
    return None if cp.signature is None else _signature_bytes(cp.signature)


def signed_text(cp: Checkpoint) -> str:
    """What a signature covers: every field but the signature, keyId included (so a
    signature cannot be moved to another key's name)."""
    return canonical_text(
        {
            "format": FORMAT,
            "treeSize": cp.tree_size,
            "rootHash": cp.root_hash,
            "timestampMs": cp.timestamp_ms,
            "previous": cp.previous,
            "keyId": cp.key_id,
        }
    )


def checkpoint_hash(cp: Checkpoint) -> str:
    """SHA-256 (hex) of the signed text: what the next checkpoint's `previous` and a
    proof's `checkpoint` name. The same whether or not it carries a signature."""
    return hashlib.sha256(signed_text(cp).encode("utf-8")).hexdigest()


def to_sign(cp: Checkpoint, key_id: str) -> Checkpoint:
    """`cp` named for key `key_id`, without a signature yet: sign its `signed_text`."""
    return replace(cp, key_id=key_id, signature=None)


def unsigned(cp: Checkpoint) -> Checkpoint:
    return replace(cp, key_id=None, signature=None)


def from_wire(value: object) -> Checkpoint:
    """A checkpoint from its JSON object; CheckpointError names what is wrong."""
    if not isinstance(value, dict):
        raise CheckpointError("a checkpoint is a JSON object")
    if value.get("format") != FORMAT:  # first: a proof given for a checkpoint says so
        raise CheckpointError(f"format is {FORMAT!r}, not {value.get('format')!r}")
    unknown = sorted(set(value) - set(_FIELDS))
    if unknown:
        raise CheckpointError(f"unknown field {unknown[0]!r}")
    missing = [name for name in _FIELDS if name not in value]
    if missing:
        raise CheckpointError(f"missing field {missing[0]!r}")
    cp = Checkpoint(
        tree_size=value["treeSize"],
        root_hash=value["rootHash"],
        timestamp_ms=value["timestampMs"],
        previous=value["previous"],
        key_id=value["keyId"],
        signature=value["signature"],
    )
    # Said outright so that nobody reads an unsigned checkpoint as a signed one.
    if value["signed"] is not cp.signed:
        raise CheckpointError(f"signed is {cp.signed} for this signature, not {value['signed']!r}")
    if cp.key_id is not None and not cp.signed:  # only ever a step of signing, never stored
        raise CheckpointError("keyId names a key but there is no signature")
    return cp


def link_fault(previous: Checkpoint, cp: Checkpoint) -> str | None:
    """Why `cp` does not directly follow `previous`, or None. The trees' consistency is
    the consistency proof's business, not this."""
    if cp.previous != checkpoint_hash(previous):
        return "previous does not name the checkpoint before it"
    if cp.tree_size < previous.tree_size:
        return f"the tree shrank from {previous.tree_size} to {cp.tree_size} leaves"
    if cp.timestamp_ms < previous.timestamp_ms:
        return "its time is before the previous checkpoint's"
    return None
