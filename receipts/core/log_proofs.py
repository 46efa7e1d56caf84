"""Inclusion and consistency proofs of the store-wide log as JSON (issue 36): what the
store hands out and what a client keeps and checks, tied to the checkpoints they prove
against. docs/integrity.md documents the formats.

An inclusion proof names its leaf by the receipt's hash and its checkpoint by the
checkpoint's hash (receipts.core.checkpoint.checkpoint_hash), so a proof checked against
the wrong checkpoint says so rather than failing on a root. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from receipts.core import merkle
from receipts.core.checkpoint import Checkpoint, checkpoint_hash

INCLUSION_FORMAT = "receipt.inclusion.v1"
CONSISTENCY_FORMAT = "receipt.consistency.v1"

_HEX64 = re.compile("[0-9a-f]{64}")


class ProofFormatError(ValueError):
    """JSON that is not a well-formed proof; the message names the field."""


@dataclass(frozen=True, slots=True)
class InclusionProof:
    """Receipt hash `leaf` is leaf `index` of the tree of checkpoint `checkpoint` (its
    hash), whose size is `tree_size`; `path` is RFC 9162's audit path, as hex."""

    leaf: str
    index: int
    tree_size: int
    path: tuple[str, ...]
    checkpoint: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "format": INCLUSION_FORMAT,
            "leaf": self.leaf,
            "index": self.index,
            "treeSize": self.tree_size,
            "path": list(self.path),
            "checkpoint": self.checkpoint,
        }


@dataclass(frozen=True, slots=True)
class ConsistencyProof:
    """The tree of checkpoint `new` (`new_size` leaves) extends that of checkpoint `old`
    (`old_size` leaves); `path` is RFC 9162's consistency proof, as hex."""

    old_size: int
    new_size: int
    path: tuple[str, ...]
    old: str
    new: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "format": CONSISTENCY_FORMAT,
            "oldSize": self.old_size,
            "newSize": self.new_size,
            "path": list(self.path),
            "old": self.old,
            "new": self.new,
        }


def inclusion_proof(
    receipt_hash: str, index: int, checkpoint: Checkpoint, source: merkle.SubtreeSource
) -> InclusionProof:
    """The proof that the receipt of hash `receipt_hash`, leaf `index`, is in the tree of
    `checkpoint`, from the subtrees `source` keeps."""
    path = merkle.inclusion_proof(index, checkpoint.tree_size, source)
    return InclusionProof(
        receipt_hash,
        index,
        checkpoint.tree_size,
        tuple(h.hex() for h in path),
        checkpoint_hash(checkpoint),
    )


def consistency_proof(
    old: Checkpoint, new: Checkpoint, source: merkle.SubtreeSource
) -> ConsistencyProof:
    path = merkle.consistency_proof(old.tree_size, new.tree_size, source)
    return ConsistencyProof(
        old.tree_size,
        new.tree_size,
        tuple(h.hex() for h in path),
        checkpoint_hash(old),
        checkpoint_hash(new),
    )


def inclusion_fault(proof: InclusionProof, checkpoint: Checkpoint) -> str | None:
    """Why `proof` does not prove its receipt is in `checkpoint`'s tree, or None."""
    if proof.checkpoint != checkpoint_hash(checkpoint):
        return "the proof is for another checkpoint"
    if proof.tree_size != checkpoint.tree_size:
        return f"the proof is for a tree of {proof.tree_size}, the checkpoint's has {checkpoint.tree_size}"
    return merkle.inclusion_fault(
        proof.index,
        proof.tree_size,
        merkle.leaf_hash(merkle.receipt_leaf(proof.leaf)),
        [bytes.fromhex(h) for h in proof.path],
        bytes.fromhex(checkpoint.root_hash),
    )


def consistency_fault(proof: ConsistencyProof, old: Checkpoint, new: Checkpoint) -> str | None:
    """Why `proof` does not prove `new`'s tree extends `old`'s, or None."""
    if proof.old != checkpoint_hash(old):
        return "the proof's old checkpoint is another one"
    if proof.new != checkpoint_hash(new):
        return "the proof's new checkpoint is another one"
    if (proof.old_size, proof.new_size) != (old.tree_size, new.tree_size):
        return "the proof's sizes are not the checkpoints'"
    return merkle.consistency_fault(
        old.tree_size,
        new.tree_size,
        bytes.fromhex(old.root_hash),
        bytes.fromhex(new.root_hash),
        [bytes.fromhex(h) for h in proof.path],
    )


def _object(value: object, fmt: str, fields: Sequence[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProofFormatError("a proof is a JSON object")
    if value.get("format") != fmt:
        raise ProofFormatError(f"format is {fmt!r}, not {value.get('format')!r}")
    unknown = sorted(set(value) - {"format", *fields})
    if unknown:
        raise ProofFormatError(f"unknown field {unknown[0]!r}")
    missing = [name for name in fields if name not in value]
    if missing:
        raise ProofFormatError(f"missing field {missing[0]!r}")
    return value


def _count(value: dict[str, Any], name: str) -> int:
    found = value[name]
    if type(found) is not int or found < 0:
        raise ProofFormatError(f"{name} is a non-negative integer, not {found!r}")
    return found


def _hex(value: object, name: str) -> str:
    if not isinstance(value, str) or _HEX64.fullmatch(value) is None:
        raise ProofFormatError(f"{name} is 64 lowercase hex characters, not {value!r}")
    return value


def _path(value: dict[str, Any]) -> tuple[str, ...]:
    path = value["path"]
    if not isinstance(path, list):
        raise ProofFormatError("path is a list of hashes")
    return tuple(_hex(h, f"path[{i}]") for i, h in enumerate(path))


def inclusion_from_wire(value: object) -> InclusionProof:
    found = _object(value, INCLUSION_FORMAT, ("leaf", "index", "treeSize", "path", "checkpoint"))
    return InclusionProof(
        _hex(found["leaf"], "leaf"),
        _count(found, "index"),
        _count(found, "treeSize"),
        _path(found),
        _hex(found["checkpoint"], "checkpoint"),
    )


def consistency_from_wire(value: object) -> ConsistencyProof:
    found = _object(value, CONSISTENCY_FORMAT, ("oldSize", "newSize", "path", "old", "new"))
    return ConsistencyProof(
        _count(found, "oldSize"),
        _count(found, "newSize"),
        _path(found),
        _hex(found["old"], "old"),
        _hex(found["new"], "new"),
    )
