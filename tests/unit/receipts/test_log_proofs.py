"""Proofs of the store-wide log as JSON (issue 36): built from a tree of real receipts'
hashes, tied to their checkpoints, read back, and refused when anything is off."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from receipts.core import log_proofs
from receipts.core.chain import Receipt, seal
from receipts.core.checkpoint import Checkpoint, checkpoint_hash
from receipts.core.log_proofs import (
    ConsistencyProof,
    InclusionProof,
    ProofFormatError,
    consistency_fault,
    consistency_from_wire,
    inclusion_fault,
    inclusion_from_wire,
)
from receipts.core.merkle import MemoryTree, leaf_hash, receipt_leaf

TS = 1_765_000_000_000


def receipts(n: int) -> list[Receipt]:
    """`n` receipts over three streams, in the order a store would commit them."""
    heads: dict[str, str | None] = {}
    out = []
    for i in range(n):
        stream = f"jobs/j{i % 3}"
        r = seal(
            stream=stream,
            prev=heads.get(stream),
            body={"type": "job.progress", "n": i},
            ts=TS + i,
            random_hex16=f"{i:016x}",
        )
        heads[stream] = r.hash
        out.append(r)
    return out


def logged(rs: list[Receipt]) -> MemoryTree:
    tree = MemoryTree()
    for r in rs:
        tree.append(leaf_hash(receipt_leaf(r.hash)))
    return tree


def checkpoint_of(tree: MemoryTree, size: int, previous: Checkpoint | None = None) -> Checkpoint:
    return Checkpoint(
        size,
        tree.root(size).hex(),
        TS + size,
        checkpoint_hash(previous) if previous else None,
    )


RS = receipts(21)
TREE = logged(RS)
OLD = checkpoint_of(TREE, 13)
NEW = checkpoint_of(TREE, 21, OLD)


def test_every_receipt_is_proved_in_the_checkpoint_and_survives_json() -> None:
    for index, r in enumerate(RS[:13]):
        proof = log_proofs.inclusion_proof(r.hash, index, OLD, TREE)
        assert inclusion_fault(proof, OLD) is None
        again = inclusion_from_wire(proof.to_wire())
        assert again == proof and inclusion_fault(again, OLD) is None


def test_an_inclusion_proof_refuses_another_receipt_position_or_checkpoint() -> None:
    proof = log_proofs.inclusion_proof(RS[5].hash, 5, OLD, TREE)
    assert inclusion_fault(dataclasses.replace(proof, leaf=RS[6].hash), OLD) is not None
    assert inclusion_fault(dataclasses.replace(proof, index=6), OLD) is not None
    assert inclusion_fault(proof, NEW) == "the proof is for another checkpoint"
    same_size = dataclasses.replace(OLD, timestamp_ms=OLD.timestamp_ms + 1)
    assert inclusion_fault(proof, same_size) == "the proof is for another checkpoint"
    forged = dataclasses.replace(OLD, root_hash=NEW.root_hash)
    assert (
        inclusion_fault(dataclasses.replace(proof, checkpoint=checkpoint_hash(forged)), forged)
        is not None
    )


def test_consistency_between_checkpoints() -> None:
    proof = log_proofs.consistency_proof(OLD, NEW, TREE)
    assert consistency_fault(proof, OLD, NEW) is None
    assert consistency_from_wire(proof.to_wire()) == proof
    assert consistency_fault(proof, NEW, OLD) is not None
    rewritten = dataclasses.replace(NEW, root_hash=logged(receipts(22)[1:]).root(21).hex())
    assert (
        consistency_fault(
            dataclasses.replace(proof, new=checkpoint_hash(rewritten)), OLD, rewritten
        )
        == "the proof does not lead to the new root"
    )


def wire_inclusion() -> dict[str, Any]:
    return log_proofs.inclusion_proof(RS[5].hash, 5, OLD, TREE).to_wire()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "receipt.consistency.v1"}, "format"),
        ({"leaf": "abc"}, "leaf"),
        ({"index": -1}, "index"),
        ({"index": "5"}, "index"),
        ({"treeSize": False}, "treeSize"),
        ({"path": "abc"}, "path"),
        ({"path": ["00"]}, r"path\[0\]"),
        ({"checkpoint": None}, "checkpoint"),
        ({"more": 1}, "unknown field 'more'"),
    ],
)
def test_malformed_inclusion_proofs_are_refused_by_name(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ProofFormatError, match=message):
        inclusion_from_wire({**wire_inclusion(), **change})


def test_malformed_consistency_proofs_are_refused() -> None:
    wire = log_proofs.consistency_proof(OLD, NEW, TREE).to_wire()
    del wire["old"]
    with pytest.raises(ProofFormatError, match="missing field 'old'"):
        consistency_from_wire(wire)
    with pytest.raises(ProofFormatError):
        consistency_from_wire(None)


def test_the_proof_types_name_their_fields_on_the_wire() -> None:
    assert set(InclusionProof("0" * 64, 0, 1, (), "0" * 64).to_wire()) == {
        "format",
        "leaf",
        "index",
        "treeSize",
        "path",
        "checkpoint",
    }
    assert set(ConsistencyProof(1, 2, (), "0" * 64, "1" * 64).to_wire()) == {
        "format",
        "oldSize",
        "newSize",
        "path",
        "old",
        "new",
    }
