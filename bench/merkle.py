"""The store-wide log's tree in memory (receipts.core.merkle.MemoryTree): how long building
it takes, how long a proof and its verification take, and the bytes it keeps per leaf.

    .venv/bin/python bench/merkle.py                  # 1,000,000 leaves (~10 s)
    .venv/bin/python bench/merkle.py --leaves 100000 --proofs 5000
    .venv/bin/python bench/merkle.py --smoke          # 2,000 leaves, 50 proofs

Pure CPU, one process, no database; prints one line per figure. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import time
from collections.abc import Sequence

import smoke

from receipts.core import merkle
from receipts.core.merkle import (
    MemoryTree,
    Subtree,
    consistency_fault,
    inclusion_fault,
    leaf_hash,
    receipt_leaf,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaves", type=int, default=1_000_000)
    parser.add_argument("--proofs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--scale", type=int, default=10_000_000, help="leaves, stubbed")
    args = smoke.parse(parser, {"leaves": 2000, "proofs": 50})
    n = args.leaves
    rng = random.Random(args.seed)

    # receipt hashes as the store keeps them (hex), made before the clock starts
    receipt_hashes = [hashlib.sha256(i.to_bytes(8, "big")).hexdigest() for i in range(n)]
    tree = MemoryTree()
    started = time.perf_counter()
    for h in receipt_hashes:
        tree.append(leaf_hash(receipt_leaf(h)))
    build_s = time.perf_counter() - started
    print(f"leaves                 {n:,}")
    print(f"build                  {build_s:.2f} s ({build_s / n * 1e6:.2f} us per append)")
    print(f"hash bytes per leaf    {tree.stored_bytes() / n:.1f}")

    root = tree.root()
    indexes = [rng.randrange(n) for _ in range(args.proofs)]
    started = time.perf_counter()
    proofs = [tree.inclusion_proof(i) for i in indexes]
    inclusion_s = time.perf_counter() - started
    started = time.perf_counter()
    for i, path in zip(indexes, proofs, strict=True):
        leaf = leaf_hash(receipt_leaf(receipt_hashes[i]))
        if inclusion_fault(i, n, leaf, path, root) is not None:
            raise SystemExit(f"inclusion proof of leaf {i} failed")
    check_s = time.perf_counter() - started
    print(
        f"inclusion proof        {inclusion_s / len(indexes) * 1e6:.1f} us (mean of {len(indexes):,})"
    )
    print(f"inclusion verify       {check_s / len(indexes) * 1e6:.1f} us")

    olds = [rng.randrange(1, n) for _ in range(args.proofs)]
    started = time.perf_counter()
    consistency = [tree.consistency_proof(old) for old in olds]
    consistency_s = time.perf_counter() - started
    started = time.perf_counter()
    old_roots = [tree.root(old) for old in olds]
    roots_s = time.perf_counter() - started
    started = time.perf_counter()
    for old, old_root, path in zip(olds, old_roots, consistency, strict=True):
        if consistency_fault(old, n, old_root, root, path) is not None:
            raise SystemExit(f"consistency proof from {old} failed")
    verify_s = time.perf_counter() - started
    print(
        f"consistency proof      {consistency_s / len(olds) * 1e6:.1f} us (mean of {len(olds):,})"
    )
    print(f"root of an older size  {roots_s / len(olds) * 1e6:.1f} us")
    print(f"consistency verify     {verify_s / len(olds) * 1e6:.1f} us")
    proofs_at_scale(args.scale, args.proofs, rng)


class _StubSource:
    """Any subtree's hash in constant time: the proof's own work at a size too large to
    hold here, without the cost of the storage a store would read (one query)."""

    def __init__(self) -> None:
        self.asked = 0  # subtrees in the last call

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> list[bytes]:
        self.asked = len(subtrees)
        return [bytes(32)] * len(subtrees)


def proofs_at_scale(size: int, count: int, rng: random.Random) -> None:
    source = _StubSource()
    indexes = [rng.randrange(size) for _ in range(count)]
    started = time.perf_counter()
    asked = 0
    for i in indexes:
        merkle.inclusion_proof(i, size, source)
        asked = max(asked, source.asked)
        merkle.consistency_proof(i + 1, size, source)
    spent = time.perf_counter() - started
    print(
        f"proof, {size:,} leaves {spent / count / 2 * 1e6:.1f} us (stored subtrees stubbed; "
        f"at most {asked} subtrees per inclusion proof)"
    )


if __name__ == "__main__":
    main()
