"""The log's tiles (issue 36 item 2): a tree grown in any batches holds exactly the
subtree hashes of the in-memory reference, proofs read from tiles are RFC 9162's, and a
leaf finds its index from its position."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from receipts.core import log_tiles, merkle
from receipts.core.log_tiles import TILE_HEIGHT, TILE_WIDTH, Tile, TileKey
from receipts.core.merkle import Frontier, MemoryTree, ProofError, Subtree, leaf_hash


def leaf(i: int) -> bytes:
    return hashlib.sha256(i.to_bytes(8, "big")).digest()


class Tiles:
    """Tiles in a dict, grown the way the store grows them: only the rightmost tiles are
    given to `grow`, and what it returns replaces them."""

    def __init__(self) -> None:
        self.size = 0
        self.tiles: dict[TileKey, Tile] = {}

    def append(self, batch: Sequence[tuple[int, bytes]]) -> None:
        given = {k: self.tiles[k] for k in log_tiles.rightmost(self.size)}
        self.tiles.update(log_tiles.grow(self.size, given, batch))
        self.size += len(batch)

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> list[bytes]:
        wanted = log_tiles.tiles_for(subtrees)
        found = {k: self.tiles[k].hashes for k in wanted if k in self.tiles}
        return log_tiles.subtree_hashes(subtrees, found)


def grown(sizes: Sequence[int]) -> tuple[Tiles, MemoryTree]:
    tiles, memory, seq = Tiles(), MemoryTree(), 0
    for n in sizes:
        batch = []
        for _ in range(n):
            seq += 1 + seq % 3  # positions with gaps, as rolled-back seqs leave
            batch.append((seq, leaf(memory.size)))
            memory.append(leaf_hash(leaf(memory.size)))
        tiles.append(batch)
    return tiles, memory


def test_a_full_tile_of_leaves_makes_one_entry_of_the_next_level() -> None:
    tiles, memory = grown([TILE_WIDTH + 3])
    assert set(tiles.tiles) == {(0, 0), (0, 1), (1, 0)}
    assert len(tiles.tiles[(0, 0)].hashes) == TILE_WIDTH * 32
    assert bytes(tiles.tiles[(1, 0)].hashes) == memory.subtree_hashes([Subtree(TILE_HEIGHT, 0)])[0]
    assert log_tiles.rightmost(tiles.size) == [(0, 1), (1, 0)]


def test_level_zero_tiles_keep_the_leaves_themselves_and_their_positions() -> None:
    tiles, _ = grown([5])
    assert log_tiles.entries(tiles.tiles[(0, 0)].hashes) == [leaf(i) for i in range(5)]
    assert tiles.tiles[(0, 0)].seqs == [1, 3, 4, 6, 7]
    assert (1, 0) not in tiles.tiles  # no full tile yet


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 700), min_size=1, max_size=6), st.data())
def test_tiles_grown_in_any_batches_give_the_reference_tree(
    sizes: list[int], data: st.DataObject
) -> None:
    tiles, memory = grown(sizes)
    n = memory.size
    if n == 0:
        return
    assert merkle.root(n, tiles) == memory.root()
    old = data.draw(st.integers(1, n))
    index = data.draw(st.integers(0, n - 1))
    assert merkle.root(old, tiles) == memory.root(old)
    assert merkle.inclusion_proof(index, n, tiles) == memory.inclusion_proof(index)
    assert merkle.consistency_proof(old, n, tiles) == memory.consistency_proof(old)


def test_a_subtree_beyond_the_tree_is_refused() -> None:
    tiles, _ = grown([300])
    with pytest.raises(ProofError):
        tiles.subtree_hashes([Subtree(TILE_HEIGHT + 3, 1)])  # leaves 256..511: only 44
    with pytest.raises(ProofError):
        tiles.subtree_hashes([Subtree(0, 300)])


def test_growing_from_the_wrong_tiles_is_refused() -> None:
    tiles, _ = grown([10])
    with pytest.raises(ValueError, match="does not end where the tree does"):
        log_tiles.grow(11, {(0, 0): tiles.tiles[(0, 0)]}, [(100, leaf(11))])
    with pytest.raises(ValueError, match="positions must increase"):
        log_tiles.grow(10, {(0, 0): tiles.tiles[(0, 0)]}, [(3, leaf(10))])


@pytest.mark.parametrize(
    "seqs",
    [[], [0], [1], [1, 2, 3], [5, 200, 201, 70_000, 2**40], list(range(1, 257))],
)
def test_positions_round_trip_through_their_varints(seqs: list[int]) -> None:
    encoded = log_tiles.encode_seqs(seqs)
    assert log_tiles.decode_seqs(encoded) == seqs
    if seqs == list(range(1, 257)):
        assert len(encoded) == 256  # consecutive positions: a byte each


def test_positions_must_increase_and_end_whole() -> None:
    with pytest.raises(ValueError):
        log_tiles.encode_seqs([3, 3])
    with pytest.raises(ValueError):
        log_tiles.decode_seqs(b"\x81")


@pytest.mark.parametrize(
    ("seq", "offset"), [(1, 0), (4, 2), (9, 5), (2, None), (10, None), (0, None)]
)
def test_a_position_finds_its_leaf_index(seq: int, offset: int | None) -> None:
    expected = None if offset is None else 2 * TILE_WIDTH + offset
    assert log_tiles.leaf_position(2, [1, 3, 4, 5, 7, 9], seq) == expected


@pytest.mark.parametrize(
    ("indexes", "text"),
    [([], ""), ([7], "7"), ([3, 4, 5, 9], "3-5,9"), ([9, 3, 5, 4, 4], "3-5,9"), ([0, 2], "0,2")],
)
def test_leaf_ranges_as_a_tombstone_names_them(indexes: list[int], text: str) -> None:
    spans = log_tiles.ranges(indexes)
    assert log_tiles.ranges_text(spans) == text
    assert log_tiles.parse_ranges(text) == spans


def test_a_bad_range_is_refused() -> None:
    with pytest.raises(ValueError):
        log_tiles.parse_ranges("5-3")


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 1100))
def test_the_frontier_gives_the_root_of_the_leaves_so_far(n: int) -> None:
    frontier, memory = Frontier(), MemoryTree()
    for i in range(n):
        frontier.append(leaf_hash(leaf(i)))
        memory.append(leaf_hash(leaf(i)))
    assert frontier.size == n
    assert frontier.root() == memory.root()
