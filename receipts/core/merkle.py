"""The store-wide log's Merkle tree, as RFC 9162 (Certificate Transparency 2.0, 2.1) hashes
it: tree hashes, inclusion and consistency proofs, and their verification.

A leaf is one receipt's hash (`receipt_leaf`), in the order the store commits receipts.
Its leaf hash is SHA-256(0x00 || leaf), an interior node SHA-256(0x01 || left || right),
and a tree of n leaves splits at the largest power of two below n. The 0x00/0x01 prefixes
keep a leaf from posing as a node (the second-preimage attack RFC 9162 closes).

Proofs are not built from the leaves. A proof names the complete subtrees it needs
(`Subtree`: 2**level leaves starting at an aligned index), asks its `SubtreeSource` for
all of them in one call, and folds the few that cover a partial range. So a store can
answer from interior nodes it keeps (one query per proof, O(log n) hashes, whatever the
tree's size), and nothing rebuilds the tree per request. `MemoryTree` is the in-memory
source: it keeps every complete subtree's hash as it appends.

Standard library only: the offline verifier (receipts.verify_offline) runs on it alone.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

HASH_SIZE = 32
# The root of the tree of no leaves: the hash of the empty string (RFC 9162 2.1.1).
EMPTY_ROOT = hashlib.sha256(b"").digest()

_HEX64 = re.compile("[0-9a-f]{64}")


class ProofError(ValueError):
    """A proof asked for outside the tree (an index past its size, sizes in the wrong
    order), or a source that cannot serve a subtree it was asked for."""


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def receipt_leaf(receipt_hash: str) -> bytes:
    """The leaf of a receipt: its hash (64 lowercase hex, as the store keeps it) as its 32
    raw bytes. That hash already seals the receipt's stream and its prev, so a receipt
    moved to another stream or position no longer matches its leaf, and its position in
    the store's commit order is the leaf's index: a leaf needs nothing more."""
    if _HEX64.fullmatch(receipt_hash) is None:
        raise ValueError(f"a receipt hash is 64 lowercase hex characters, not {receipt_hash!r}")
    return bytes.fromhex(receipt_hash)


@dataclass(frozen=True, slots=True)
class Subtree:
    """The complete subtree of 2**level leaves starting at leaf index * 2**level."""

    level: int
    index: int


class SubtreeSource(Protocol):
    """Whatever holds the tree: gives the hashes of complete subtrees, in the order asked
    (a level-0 subtree's hash is its leaf hash). Raises ProofError for one it lacks."""

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> Sequence[bytes]: ...


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2): where RFC 9162 splits n leaves."""
    return 1 << ((n - 1).bit_length() - 1)


def _range(start: int, end: int) -> tuple[Subtree, ...]:
    """The complete subtrees covering leaves [start, end), largest first. Their hashes
    folded from the right give the range's tree hash, because a range of n leaves splits
    into a complete left part of the largest power of two below n and the rest. The
    ranges a proof needs start aligned to their largest part; anything else is a bug."""
    parts = []
    while start < end:
        size = 1 << ((end - start).bit_length() - 1)
        if start % size:
            raise AssertionError(f"range [{start}, {end}) is not aligned")
        level = size.bit_length() - 1
        parts.append(Subtree(level, start >> level))
        start += size
    return tuple(parts)


def _fold(hashes: Sequence[bytes]) -> bytes:
    folded = hashes[-1]
    for left in reversed(hashes[:-1]):
        folded = node_hash(left, folded)
    return folded


def _resolve(groups: Sequence[tuple[Subtree, ...]], source: SubtreeSource) -> list[bytes]:
    """One hash per group, from a single call to `source` (a store's single query)."""
    wanted = [subtree for group in groups for subtree in group]
    hashes = list(source.subtree_hashes(wanted)) if wanted else []
    if len(hashes) != len(wanted) or any(len(h) != HASH_SIZE for h in hashes):
        raise ProofError("the subtree source answered with the wrong number or size of hashes")
    out, at = [], 0
    for group in groups:
        out.append(_fold(hashes[at : at + len(group)]))
        at += len(group)
    return out


def root_subtrees(size: int) -> tuple[Subtree, ...]:
    """The subtrees whose hashes, folded, make the root of the first `size` leaves."""
    if size < 0:
        raise ProofError(f"a tree size is not negative: {size}")
    return _range(0, size)


def inclusion_subtrees(index: int, size: int) -> list[tuple[Subtree, ...]]:
    """RFC 9162 2.1.3.1's PATH(index, D[size]), each element as the subtrees it folds,
    from the leaf up. Only a right sibling on the tree's ragged right edge covers a
    partial range (more than one subtree), and a path meets at most one of those."""
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is not in a tree of {size} leaves")
    path = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            path.append(_range(start + k, end))
            end = start + k
        else:
            path.append(_range(start, start + k))
            start += k
    path.reverse()
    return path


def consistency_subtrees(old: int, new: int) -> list[tuple[Subtree, ...]]:
    """RFC 9162 2.1.4.1's PROOF(old, D[new]) (SUBPROOF with b true), each element as the
    subtrees it folds. Empty when there is nothing to prove: old 0 or old == new."""
    if not 0 <= old <= new:
        raise ProofError(f"no consistency proof from size {old} to size {new}")
    if old in (0, new):
        return []
    proof = []
    start, end, m, whole = 0, new, old, True
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            proof.append(_range(start + k, end))
            end = start + k
        else:
            proof.append(_range(start, start + k))
            start, m, whole = start + k, m - k, False
    if not whole:  # the old tree is not itself a subtree here: its last part is named
        proof.append(_range(start, end))
    proof.reverse()
    return proof


def root(size: int, source: SubtreeSource) -> bytes:
    """The tree hash of the first `size` leaves."""
    if size == 0:
        return EMPTY_ROOT
    return _resolve([root_subtrees(size)], source)[0]


def inclusion_proof(index: int, size: int, source: SubtreeSource) -> list[bytes]:
    return _resolve(inclusion_subtrees(index, size), source)


def consistency_proof(old: int, new: int, source: SubtreeSource) -> list[bytes]:
    return _resolve(consistency_subtrees(old, new), source)


def _sizes_fault(path: Sequence[bytes], *roots: bytes) -> str | None:
    if any(len(h) != HASH_SIZE for h in (*path, *roots)):
        return f"a hash in the proof or a root is not {HASH_SIZE} bytes"
    return None


def inclusion_fault(
    index: int, size: int, leaf: bytes, path: Sequence[bytes], expected_root: bytes
) -> str | None:
    """Why `path` does not prove leaf hash `leaf` at `index` in the tree of `size` leaves
    whose root is `expected_root`, or None when it does (RFC 9162 2.1.3.2)."""
    if not 0 <= index < size:
        return f"leaf index {index} is not in a tree of {size} leaves"
    found = _sizes_fault(path, leaf, expected_root)
    if found:
        return found
    fn, sn, computed = index, size - 1, leaf
    for sibling in path:
        if sn == 0:
            return "the proof is longer than a tree of this size needs"
        if fn & 1 or fn == sn:
            computed = node_hash(sibling, computed)
            while not fn & 1 and fn != 0:  # a last node without a sibling moves up as is
                fn, sn = fn >> 1, sn >> 1
        else:
            computed = node_hash(computed, sibling)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        return "the proof is shorter than a tree of this size needs"
    if computed != expected_root:
        return "the proof does not lead to the root hash"
    return None


def consistency_fault(
    old: int, new: int, old_root: bytes, new_root: bytes, path: Sequence[bytes]
) -> str | None:
    """Why `path` does not prove that the tree of `new` leaves with root `new_root`
    extends the tree of `old` leaves with root `old_root`, or None (RFC 9162 2.1.4.2).
    The cases that RFC leaves out: equal sizes need equal roots and an empty proof, and
    the empty tree (root `EMPTY_ROOT`) is extended by every tree, with an empty proof."""
    if not 0 <= old <= new:
        return f"a tree of {new} leaves cannot extend one of {old}"
    found = _sizes_fault(path, old_root, new_root)
    if found:
        return found
    if old == 0 or old == new:
        if path:
            return "the proof should be empty for these sizes"
        if old == 0 and old_root != EMPTY_ROOT:
            return "the old root is not the empty tree's"
        if old == new and old_root != new_root:
            return "two trees of the same size with different roots"
        return None
    if not path:
        return "the proof is empty"
    hashes = list(path)
    if old & (old - 1) == 0:  # the old tree is a complete subtree: its root starts the proof
        hashes.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    first = second = hashes[0]
    for sibling in hashes[1:]:
        if sn == 0:
            return "the proof is longer than these sizes need"
        if fn & 1 or fn == sn:
            first = node_hash(sibling, first)
            second = node_hash(sibling, second)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            second = node_hash(second, sibling)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        return "the proof is shorter than these sizes need"
    if first != old_root:
        return "the proof does not lead to the old root"
    if second != new_root:
        return "the proof does not lead to the new root"
    return None


class MemoryTree:
    """An appendable tree in memory that keeps the hash of every complete subtree: level L
    is one bytearray of the 32-byte hashes of its 2**L-leaf subtrees, left to right (no
    object per hash: 2 hashes, 64 bytes, per leaf). Proofs and roots for any size up to
    the current one are O(log n) lookups."""

    def __init__(self) -> None:
        self._levels: list[bytearray] = [bytearray()]

    @property
    def size(self) -> int:
        return len(self._levels[0]) // HASH_SIZE

    def append(self, leaf: bytes) -> int:
        """Append a leaf hash (`leaf_hash(...)`, not the leaf itself); returns its index."""
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, not {len(leaf)}")
        index = self.size
        self._levels[0] += leaf
        level, count = 0, index + 1
        while count % 2 == 0:  # the node just completed is a right child: its parent is due
            row = self._levels[level]
            # the last two hashes of the row, left then right, are contiguous already
            parent = hashlib.sha256(b"\x01" + row[-2 * HASH_SIZE :]).digest()
            level, count = level + 1, count // 2
            if level == len(self._levels):
                self._levels.append(bytearray())
            self._levels[level] += parent
        return index

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> list[bytes]:
        out = []
        for subtree in subtrees:
            level, index = subtree.level, subtree.index
            row = self._levels[level] if 0 <= level < len(self._levels) else b""
            at = index * HASH_SIZE
            if index < 0 or at + HASH_SIZE > len(row):
                raise ProofError(f"subtree {index} of level {level} is not complete yet")
            out.append(bytes(row[at : at + HASH_SIZE]))
        return out

    def root(self, size: int | None = None) -> bytes:
        return root(self._within(size), self)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        return inclusion_proof(index, self._within(size), self)

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        return consistency_proof(old, self._within(new), self)

    def stored_bytes(self) -> int:
        """The bytes of hashes held (without the lists' own small overhead)."""
        return sum(len(row) for row in self._levels)

    def _within(self, size: int | None) -> int:
        if size is None:
            return self.size
        if not 0 <= size <= self.size:
            raise ProofError(f"the tree has {self.size} leaves, not {size}")
        return size


class Frontier:
    """The root of leaves given one at a time, in O(log n) memory: the hashes of the
    complete subtrees the leaves so far split into, largest first (RFC 9162's split)."""

    def __init__(self) -> None:
        self._stack: list[tuple[int, bytes]] = []  # (level, hash), levels decreasing
        self.size = 0

    def append(self, leaf: bytes) -> None:
        """Add a leaf hash (`leaf_hash(...)`)."""
        level, folded = 0, leaf
        while self._stack and self._stack[-1][0] == level:
            folded = node_hash(self._stack.pop()[1], folded)
            level += 1
        self._stack.append((level, folded))
        self.size += 1

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        return _fold([h for _, h in self._stack])
