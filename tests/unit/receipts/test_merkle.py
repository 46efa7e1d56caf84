"""The store-wide log's tree (issue 36): RFC 9162's tree hash, inclusion and consistency
proofs against the Certificate Transparency test vectors, against a reference written
straight from the RFC's recursive definitions, and under tampering."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from receipts.core import merkle
from receipts.core.merkle import (
    EMPTY_ROOT,
    MemoryTree,
    ProofError,
    Subtree,
    consistency_fault,
    inclusion_fault,
    leaf_hash,
    node_hash,
)

# The eight leaves of Certificate Transparency's reference test vectors (RFC 6962's
# reference implementations; RFC 9162 keeps the same hashing).
CT_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    b"\x50\x51\x52\x53\x54\x55\x56\x57",
    b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
]
# The root of the first n of them, n = 1..8.
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# (leaf index, tree size, path)
CT_INCLUSION = [
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (0, 1, []),
]
# (old size, new size, path)
CT_CONSISTENCY = [
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]


def ct_tree() -> MemoryTree:
    tree = MemoryTree()
    for leaf in CT_LEAVES:
        tree.append(leaf_hash(leaf))
    return tree


def unhex(path: Sequence[str]) -> list[bytes]:
    return [bytes.fromhex(h) for h in path]


# A reference written straight from RFC 9162's recursive definitions, over all leaves.


def split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_root(hashes: Sequence[bytes]) -> bytes:
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = split(len(hashes))
    return node_hash(ref_root(hashes[:k]), ref_root(hashes[k:]))


def ref_path(m: int, hashes: Sequence[bytes]) -> list[bytes]:
    if len(hashes) == 1:
        return []
    k = split(len(hashes))
    if m < k:
        return [*ref_path(m, hashes[:k]), ref_root(hashes[k:])]
    return [*ref_path(m - k, hashes[k:]), ref_root(hashes[:k])]


def ref_subproof(m: int, hashes: Sequence[bytes], whole: bool) -> list[bytes]:
    n = len(hashes)
    if m == n:
        return [] if whole else [ref_root(hashes)]
    k = split(n)
    if m <= k:
        return [*ref_subproof(m, hashes[:k], whole), ref_root(hashes[k:])]
    return [*ref_subproof(m - k, hashes[k:], False), ref_root(hashes[:k])]


def numbered_tree(n: int) -> tuple[MemoryTree, list[bytes]]:
    hashes = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    tree = MemoryTree()
    for h in hashes:
        tree.append(h)
    return tree, hashes


def flipped(value: bytes, bit: int) -> bytes:
    out = bytearray(value)
    out[bit // 8 % len(out)] ^= 1 << (bit % 8)
    return bytes(out)


# --- The test vectors ---


def test_empty_tree_root_is_the_hash_of_nothing() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert MemoryTree().root() == EMPTY_ROOT


def test_leaf_and_node_hashes_carry_their_prefix() -> None:
    assert leaf_hash(b"").hex() == CT_ROOTS[0]
    assert (
        node_hash(b"a" * 32, b"b" * 32) == hashlib.sha256(b"\x01" + b"a" * 32 + b"b" * 32).digest()
    )


@pytest.mark.parametrize("size", range(1, 9))
def test_roots_of_the_ct_vectors(size: int) -> None:
    assert ct_tree().root(size).hex() == CT_ROOTS[size - 1]


@pytest.mark.parametrize(("index", "size", "path"), CT_INCLUSION)
def test_inclusion_proofs_of_the_ct_vectors(index: int, size: int, path: list[str]) -> None:
    tree = ct_tree()
    assert [h.hex() for h in tree.inclusion_proof(index, size)] == path
    leaf = leaf_hash(CT_LEAVES[index])
    root = bytes.fromhex(CT_ROOTS[size - 1])
    assert inclusion_fault(index, size, leaf, unhex(path), root) is None


@pytest.mark.parametrize(("old", "new", "path"), CT_CONSISTENCY)
def test_consistency_proofs_of_the_ct_vectors(old: int, new: int, path: list[str]) -> None:
    tree = ct_tree()
    assert [h.hex() for h in tree.consistency_proof(old, new)] == path
    old_root, new_root = bytes.fromhex(CT_ROOTS[old - 1]), bytes.fromhex(CT_ROOTS[new - 1])
    assert consistency_fault(old, new, old_root, new_root, unhex(path)) is None


@pytest.mark.parametrize(("index", "size", "path"), CT_INCLUSION[:4])
def test_ct_inclusion_vectors_refuse_every_corruption(
    index: int, size: int, path: list[str]
) -> None:
    leaf, root, hashes = leaf_hash(CT_LEAVES[index]), bytes.fromhex(CT_ROOTS[size - 1]), unhex(path)
    other = bytes.fromhex(CT_ROOTS[-1] if size != 8 else CT_ROOTS[0])
    wrong = [
        (index - 1, size, leaf, hashes, root),
        (index + 1, size, leaf, hashes, root),
        (index ^ 2, size, leaf, hashes, root),
        (index, size * 2, leaf, hashes, root),
        (index, size // 2, leaf, hashes, root),
        (index, size, leaf_hash(b"WrongLeaf"), hashes, root),
        (index, size, leaf, hashes, EMPTY_ROOT),
        (index, size, leaf, hashes, other),
        (index, size, leaf, [*hashes, root], root),
        (index, size, leaf, [root, *hashes], root),
        (index, size, leaf, hashes[:-1], root),
        (index, size, leaf, [*hashes, b""], root),
    ]
    wrong += [
        (index, size, leaf, [*hashes[:i], flipped(h, 3), *hashes[i + 1 :]], root)
        for i, h in enumerate(hashes)
    ]
    for case in wrong:
        assert inclusion_fault(*case) is not None, case


def test_consistency_edge_cases() -> None:
    a, b = leaf_hash(b"a"), leaf_hash(b"b")
    assert consistency_fault(0, 0, EMPTY_ROOT, EMPTY_ROOT, []) is None
    assert consistency_fault(0, 5, EMPTY_ROOT, a, []) is None
    assert consistency_fault(0, 5, a, b, []) == "the old root is not the empty tree's"
    assert consistency_fault(1, 1, a, a, []) is None
    assert consistency_fault(1, 1, a, b, []) is not None
    assert consistency_fault(1, 1, a, a, [EMPTY_ROOT]) is not None
    assert consistency_fault(2, 1, a, b, []) is not None
    assert consistency_fault(1, 2, a, b, []) == "the proof is empty"


def test_proofs_outside_the_tree_are_refused() -> None:
    tree = ct_tree()
    with pytest.raises(ProofError):
        tree.inclusion_proof(8, 8)
    with pytest.raises(ProofError):
        tree.inclusion_proof(0, 9)
    with pytest.raises(ProofError):
        tree.consistency_proof(5, 4)
    with pytest.raises(ProofError):
        tree.root(9)
    assert inclusion_fault(0, 0, leaf_hash(b""), [], EMPTY_ROOT) is not None


def test_a_receipts_leaf_is_its_hash_as_raw_bytes() -> None:
    digest = hashlib.sha256(b"receipt").hexdigest()
    assert merkle.receipt_leaf(digest) == bytes.fromhex(digest)
    for bad in ("", digest.upper(), digest[:-1], digest + "0", "z" * 64):
        with pytest.raises(ValueError):
            merkle.receipt_leaf(bad)


def test_a_leaf_hash_must_be_32_bytes() -> None:
    with pytest.raises(ValueError):
        MemoryTree().append(b"short")


# --- Proofs need O(log n) stored subtrees, asked for in one call ---


class CountingSource:
    """A source that serves any complete subtree from the leaf index alone (a stand-in
    hash), counting calls and subtrees: a tree of any size without building it."""

    def __init__(self) -> None:
        self.calls = 0
        self.subtrees = 0

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> list[bytes]:
        self.calls += 1
        self.subtrees += len(subtrees)
        return [hashlib.sha256(f"{s.level}/{s.index}".encode()).digest() for s in subtrees]


@pytest.mark.parametrize("index", [0, 1, 4_999_999, 8_388_607, 8_388_608, 9_999_998, 9_999_999])
def test_a_proof_at_ten_million_leaves_is_one_call_for_a_few_dozen_hashes(index: int) -> None:
    size = 10_000_000
    source = CountingSource()
    assert len(merkle.inclusion_proof(index, size, source)) <= 24
    assert source.calls == 1
    assert source.subtrees <= 2 * 24
    source = CountingSource()
    merkle.consistency_proof(index + 1, size, source)
    assert source.calls <= 1 and source.subtrees <= 2 * 24


# --- Properties over random trees ---

sizes = st.integers(min_value=1, max_value=300)


@settings(max_examples=60, deadline=None)
@given(total=sizes, data=st.data())
def test_roots_and_proofs_agree_with_the_rfc_definitions(total: int, data: st.DataObject) -> None:
    tree, hashes = numbered_tree(total)
    size = data.draw(st.integers(1, total))
    index = data.draw(st.integers(0, size - 1))
    old = data.draw(st.integers(1, size))
    assert tree.root(size) == ref_root(hashes[:size])
    assert tree.inclusion_proof(index, size) == ref_path(index, hashes[:size])
    assert tree.consistency_proof(old, size) == ref_subproof(old, hashes[:size], True)


@settings(max_examples=80, deadline=None)
@given(total=sizes, data=st.data())
def test_every_inclusion_proof_verifies_and_any_change_fails(
    total: int, data: st.DataObject
) -> None:
    tree, hashes = numbered_tree(total)
    size = data.draw(st.integers(1, total))
    index = data.draw(st.integers(0, size - 1))
    path, root = tree.inclusion_proof(index, size), tree.root(size)
    assert inclusion_fault(index, size, hashes[index], path, root) is None

    if path:
        at = data.draw(st.integers(0, len(path) - 1))
        bit = data.draw(st.integers(0, 255))
        bent = [*path[:at], flipped(path[at], bit), *path[at + 1 :]]
        assert inclusion_fault(index, size, hashes[index], bent, root) is not None
    bit = data.draw(st.integers(0, 255))
    assert inclusion_fault(index, size, flipped(hashes[index], bit), path, root) is not None
    assert inclusion_fault(index, size, hashes[index], path, flipped(root, bit)) is not None
    if size > 1:
        other = data.draw(st.integers(0, size - 1).filter(lambda i: i != index))
        assert inclusion_fault(other, size, hashes[index], path, root) is not None
    if total > index + 1:  # another size that holds the leaf, with that size's root
        wrong = data.draw(st.integers(index + 1, total).filter(lambda n: n != size))
        assert inclusion_fault(index, wrong, hashes[index], path, tree.root(wrong)) is not None


@settings(max_examples=80, deadline=None)
@given(total=st.integers(min_value=2, max_value=300), data=st.data())
def test_every_consistency_proof_verifies_and_any_change_fails(
    total: int, data: st.DataObject
) -> None:
    tree, _ = numbered_tree(total)
    new = data.draw(st.integers(2, total))
    old = data.draw(st.integers(1, new - 1))
    path = tree.consistency_proof(old, new)
    old_root, new_root = tree.root(old), tree.root(new)
    assert consistency_fault(old, new, old_root, new_root, path) is None

    at = data.draw(st.integers(0, len(path) - 1))
    bit = data.draw(st.integers(0, 255))
    bent = [*path[:at], flipped(path[at], bit), *path[at + 1 :]]
    assert consistency_fault(old, new, old_root, new_root, bent) is not None
    assert consistency_fault(old, new, flipped(old_root, bit), new_root, path) is not None
    assert consistency_fault(old, new, old_root, flipped(new_root, bit), path) is not None
    assert consistency_fault(old, new, old_root, new_root, path[:-1]) is not None
    assert consistency_fault(old, new, old_root, new_root, [*path, new_root]) is not None
    if new > 2:
        other = data.draw(st.integers(1, new - 1).filter(lambda n: n != old))
        assert consistency_fault(other, new, tree.root(other), new_root, path) is not None
    if total > old + 1:
        other = data.draw(st.integers(old + 1, total).filter(lambda n: n != new))
        assert consistency_fault(old, other, old_root, tree.root(other), path) is not None


@settings(max_examples=30, deadline=None)
@given(total=sizes, data=st.data())
def test_a_tree_grown_later_still_proves_its_past(total: int, data: st.DataObject) -> None:
    """Roots and proofs for an old size do not change as leaves are appended: what a
    client was given a year ago still checks against the grown tree."""
    tree, _ = numbered_tree(total)
    size = data.draw(st.integers(1, total))
    index = data.draw(st.integers(0, size - 1))
    before = (tree.root(size), tree.inclusion_proof(index, size))
    for i in range(data.draw(st.integers(1, 50))):
        tree.append(leaf_hash(b"later %d" % i))
    assert (tree.root(size), tree.inclusion_proof(index, size)) == before
    assert (
        consistency_fault(size, tree.size, before[0], tree.root(), tree.consistency_proof(size))
        is None
    )
