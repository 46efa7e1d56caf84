"""Checkpoints of the store-wide log (issue 36): its size and root at a time, chained to
the checkpoint before, signed with the key the settings name, appended as a receipt to
`checkpoints/log`, and indexed by number, tree size and hash (LogCheckpoint).

The key comes from `RECEIPT_CHECKPOINT_KEY_FILE` (a PEM file) or `RECEIPT_CHECKPOINT_KEY`
(the PEM itself), never from the database: a key the database held would let whoever
rewrites the database sign the rewrite. Without a key, checkpoints are unsigned and say
so; with a key that cannot be used, none are made (`CheckpointKeyError`), so that a
broken key is never mistaken for no key.

A checkpoint's number is its position on `checkpoints/log` (1, 2, ...). Each is made
under that stream's lock, so checkpoints from several processes never fork the chain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.db import transaction

from receipts import append, log, signing
from receipts.core.checkpoint import Checkpoint, CheckpointError, checkpoint_hash, from_wire
from receipts.errors import CheckpointKeyError, CheckpointNotFound, InvalidReference
from receipts.models import LogCheckpoint

STREAM = "checkpoints/log"
MADE = "log.checkpoint"  # body.type of a checkpoint's receipt

_HEX64 = re.compile("[0-9a-f]{64}")
_NUMBER = re.compile("[0-9]{1,15}")
_keys: dict[bytes, Ed25519PrivateKey] = {}


@dataclass(frozen=True)
class Stored:
    """A checkpoint of the store: its number on the checkpoints stream, the checkpoint,
    and the hash of the receipt that holds it."""

    number: int
    checkpoint: Checkpoint
    receipt_hash: str

    @property
    def hash(self) -> str:
        return checkpoint_hash(self.checkpoint)

    def to_wire(self) -> dict[str, Any]:
        return self.checkpoint.to_wire()


# ---- the key ----------------------------------------------------------------------------


def _key_pem() -> bytes | None:
    config = settings.RECEIPT
    if config.checkpoint_key_file:
        try:
            return Path(config.checkpoint_key_file).read_bytes()
        except OSError as exc:
            raise CheckpointKeyError(
                f"RECEIPT_CHECKPOINT_KEY_FILE {config.checkpoint_key_file}: cannot read: "
                f"{exc.strerror or exc}"
            ) from None
    if config.checkpoint_key:
        return str(config.checkpoint_key).encode()
    return None


def signing_key() -> Ed25519PrivateKey | None:
    """The configured private key, None when none is configured."""
    pem = _key_pem()
    if pem is None:
        return None
    if pem not in _keys:
        try:
            _keys[pem] = signing.load_private_key(pem)
        except signing.SigningKeyError as exc:
            raise CheckpointKeyError(f"the checkpoint signing key: {exc}") from None
    return _keys[pem]


def public_key_pem() -> bytes | None:
    """The public half of the configured key (PEM): what clients are given."""
    key = signing_key()
    return None if key is None else signing.public_key_pem(key)


# ---- reads ------------------------------------------------------------------------------


def by_number(number: int) -> Stored:
    found = append.read(STREAM, after=number - 1, limit=1)
    if not found or found[0].stream_seq != number:
        raise CheckpointNotFound(f"checkpoint {number} not found")
    receipt = found[0]
    try:
        cp = from_wire(receipt.body.get("checkpoint"))
    except CheckpointError as exc:
        raise CheckpointNotFound(f"checkpoint {number} is not a checkpoint: {exc}") from None
    return Stored(number, cp, receipt.hash)


def latest() -> Stored | None:
    number = LogCheckpoint.objects.order_by("-number").values_list("number", flat=True).first()
    return None if number is None else by_number(number)


def by_size(tree_size: int) -> Stored:
    number = (
        LogCheckpoint.objects.filter(tree_size=tree_size).values_list("number", flat=True).first()
    )
    if number is None:
        raise CheckpointNotFound(f"no checkpoint of {tree_size} leaves")
    return by_number(number)


def by_hash(hash_hex: str) -> Stored:
    number = LogCheckpoint.objects.filter(hash=hash_hex).values_list("number", flat=True).first()
    if number is None:
        raise CheckpointNotFound(f"no checkpoint {hash_hex[:16]}")
    return by_number(number)


def first_covering(index: int) -> Stored | None:
    """The first checkpoint whose tree holds leaf `index`: the one it is "in"."""
    number = (
        LogCheckpoint.objects.filter(tree_size__gt=index)
        .order_by("tree_size")
        .values_list("number", flat=True)
        .first()
    )
    return None if number is None else by_number(number)


def resolve(ref: str | int | None, *, field: str = "checkpoint") -> Stored:
    """A checkpoint by `latest` (or None), its number, or its hash (64 hex)."""
    if ref is None or ref == "latest":
        found = latest()
        if found is None:
            raise CheckpointNotFound("the store has made no checkpoint yet")
        return found
    text = str(ref).strip()
    if _NUMBER.fullmatch(text):
        number = int(text)
        if number < 1:
            raise InvalidReference(f"{field}: checkpoint numbers start at 1, not {text}")
        return by_number(number)
    if _HEX64.fullmatch(text):
        return by_hash(text)
    raise InvalidReference(
        f"{field}: {text[:80]!r} is neither 'latest', a checkpoint number nor a checkpoint hash"
    )


# ---- making one ---------------------------------------------------------------------------


def _due(last: Stored | None, size: int, *, now_ms: int, interval_ms: int, force: bool) -> bool:
    if last is None:
        return size > 0
    grown = size - last.checkpoint.tree_size
    if grown <= 0:
        return False
    if grown == 1 and log.leaf_at(last.checkpoint.tree_size) == bytes.fromhex(last.receipt_hash):
        return False  # the only new leaf is the last checkpoint's own receipt
    return force or now_ms - last.checkpoint.timestamp_ms >= interval_ms


def make(*, now_ms: int, interval_ms: int = 0, force: bool = False) -> Stored | None:
    """A checkpoint of the log as it is, if one is due: the log has leaves past the last
    checkpoint (other than that checkpoint's own receipt) and `interval_ms` have passed
    since it (`force`: whatever the time). None when none was due."""
    key = signing_key()  # before the lock: a broken key makes nothing
    size = log.head().size
    if not _due(latest(), size, now_ms=now_ms, interval_ms=interval_ms, force=force):
        return None  # most passes: decided without taking the stream's lock
    with transaction.atomic(), append.open_stream(STREAM, savepoint=False) as handle:
        last = by_number(handle.count) if handle.count else None
        size = log.head().size
        if not _due(last, size, now_ms=now_ms, interval_ms=interval_ms, force=force):
            return None
        when = max(now_ms, last.checkpoint.timestamp_ms) if last else now_ms
        cp = Checkpoint(
            tree_size=size,
            root_hash=log.root(size).hex(),
            timestamp_ms=when,
            previous=last.hash if last else None,
        )
        if key is not None:
            cp = signing.sign(cp, key)
        receipt = handle.append({"type": MADE, "checkpoint": cp.to_wire()}, now_ms=when)[0]
        number = receipt.stream_seq or handle.count
        LogCheckpoint.objects.create(
            number=number,
            tree_size=size,
            hash=checkpoint_hash(cp),
            timestamp_ms=when,
            key_id=cp.key_id,
        )
        return Stored(number, cp, receipt.hash)


@dataclass(frozen=True)
class Pass:
    """One pass of the log's loop: what the extension did, and the checkpoint made."""

    extension: log.Extension
    made: Stored | None


def log_pass(*, now_ms: int, interval_ms: int) -> Pass:
    """Extend the log, then make a checkpoint if one is due (the loop's pass)."""
    extension = log.extend(now_ms=now_ms)
    return Pass(extension, make(now_ms=now_ms, interval_ms=interval_ms))
