"""The store-wide log's tree as tiles (issue 36): how it is stored, grown and read.

A tile holds up to 32 consecutive entries of one tile level, as in the Go checksum
database's tiled log (whose tiles are 256 wide). Level-0 entries are the leaves
themselves (receipt hashes, raw); an entry of tile level t >= 1 is the hash of the
complete subtree of 32**t leaves at its position. So the tree costs one hash per leaf
plus 1/31 of that, and the hash of any complete subtree (merkle.Subtree) is a fold of
at most 16 consecutive entries of one tile: a proof reads a few tiles in one query,
whatever the tree's size, and nothing rebuilds the tree.

Why 32: a proof hashes every other entry of each tile on its path, so narrow tiles
keep a proof to a few hundred hashes (256-wide tiles cost Python ~2 ms a proof, 32-wide
~0.4 ms); a tile row (1 KB of hashes) stays below PostgreSQL's 2 KB TOAST threshold,
so rewriting the rightmost tiles on every extension stays cheap; and the row overhead
is still about a byte a leaf.

Level-0 tiles also carry each leaf's receipt position (the store's global seq, strictly
increasing with the leaf index) as deltas in varints, about a byte a leaf: how a
receipt finds its leaf index, and how verify walks leaves beside receipt rows.

Standard library and the other cores only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from receipts.core.merkle import HASH_SIZE, ProofError, Subtree, leaf_hash, node_hash

TILE_HEIGHT = 5
TILE_WIDTH = 1 << TILE_HEIGHT  # entries in a full tile

TileKey = tuple[int, int]  # (tile level, tile index within the level)


def entry_count(size: int, tile_level: int) -> int:
    """Entries of `tile_level` in a tree of `size` leaves (complete subtrees only)."""
    return size >> (TILE_HEIGHT * tile_level)


def tile_of(tile_level: int, position: int) -> TileKey:
    return (tile_level, position >> TILE_HEIGHT)


def rightmost(size: int) -> list[TileKey]:
    """The partly filled tile of each level of a tree of `size` leaves: what growing it
    rewrites (the full tiles to their left never change)."""
    keys = []
    tile_level = 0
    while (count := entry_count(size, tile_level)) > 0:
        if count % TILE_WIDTH:
            keys.append(tile_of(tile_level, count))
        tile_level += 1
    return keys


def _span(subtree: Subtree) -> tuple[int, int, int]:
    """(tile level, first entry, entries) whose fold is the subtree's hash."""
    tile_level, rest = divmod(subtree.level, TILE_HEIGHT)
    return tile_level, subtree.index << rest, 1 << rest


def tiles_for(subtrees: Iterable[Subtree]) -> set[TileKey]:
    """The tiles the hashes of `subtrees` are folded from: one each, as a subtree of
    fewer than 32**(t+1) leaves never crosses a tile of level t."""
    return {tile_of(level, first) for level, first, _ in map(_span, subtrees)}


def perfect_root(hashes: Sequence[bytes]) -> bytes:
    """The root of a complete subtree from its 2**k node hashes, left to right."""
    row = list(hashes)
    while len(row) > 1:
        row = [node_hash(row[i], row[i + 1]) for i in range(0, len(row), 2)]
    return row[0]


def _nodes(tile_level: int, entries: bytes | bytearray, first: int, count: int) -> list[bytes]:
    raw = [bytes(entries[i * HASH_SIZE : (i + 1) * HASH_SIZE]) for i in range(first, first + count)]
    return [leaf_hash(leaf) for leaf in raw] if tile_level == 0 else raw


def subtree_hashes(
    subtrees: Sequence[Subtree], tiles: Mapping[TileKey, bytes | bytearray]
) -> list[bytes]:
    """The hash of each of `subtrees` from the tiles holding them (`tiles_for`)."""
    out = []
    for subtree in subtrees:
        tile_level, first, count = _span(subtree)
        key = tile_of(tile_level, first)
        entries = tiles.get(key)
        offset = first - (key[1] << TILE_HEIGHT)
        if entries is None or (offset + count) * HASH_SIZE > len(entries):
            raise ProofError(f"subtree {subtree.index} of level {subtree.level} is not stored")
        out.append(perfect_root(_nodes(tile_level, entries, offset, count)))
    return out


def entries(tile: bytes | bytearray) -> list[bytes]:
    """A tile's entries (32 bytes each)."""
    return [bytes(tile[i : i + HASH_SIZE]) for i in range(0, len(tile), HASH_SIZE)]


# ---- positions: strictly increasing integers, first absolute, then deltas, as varints ----


def encode_seqs(seqs: Sequence[int]) -> bytes:
    out = bytearray()
    last = 0
    for seq in seqs:
        delta = seq - last
        if delta <= 0 and out:
            raise ValueError(f"positions must increase: {seq} after {last}")
        if delta < 0:
            raise ValueError(f"a position is not negative: {seq}")
        while True:
            byte = delta & 0x7F
            delta >>= 7
            out.append(byte | (0x80 if delta else 0))
            if not delta:
                break
        last = seq
    return bytes(out)


def decode_seqs(data: bytes | bytearray) -> list[int]:
    seqs: list[int] = []
    value, shift, last = 0, 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte & 0x80:
            continue
        last += value
        seqs.append(last)
        value, shift = 0, 0
    if shift:
        raise ValueError("positions end in the middle of a number")
    return seqs


# ---- growing ----------------------------------------------------------------------------


@dataclass
class Tile:
    """A tile's contents: entries (32 bytes each) and, at level 0, their positions."""

    hashes: bytearray
    seqs: list[int] | None = None


def grow(
    size: int, tiles: Mapping[TileKey, Tile], leaves: Sequence[tuple[int, bytes]]
) -> dict[TileKey, Tile]:
    """Append `leaves` ((position, receipt hash as 32 bytes), positions increasing) to
    the tree of `size` leaves whose `rightmost` tiles are `tiles`. Returns every tile
    that changed or is new, whole: a full tile's root becomes the next level's entry."""
    work: dict[TileKey, Tile] = {
        key: Tile(bytearray(t.hashes), None if t.seqs is None else list(t.seqs))
        for key, t in tiles.items()
    }
    changed: dict[TileKey, Tile] = {}
    for seq, leaf in leaves:
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"a leaf is {HASH_SIZE} bytes, not {len(leaf)}")
        position, tile_level, entry = size, 0, leaf
        size += 1
        while True:
            key = tile_of(tile_level, position)
            tile = work.setdefault(key, Tile(bytearray(), [] if tile_level == 0 else None))
            if len(tile.hashes) != (position % TILE_WIDTH) * HASH_SIZE:
                raise ValueError(f"tile {key} does not end where the tree does")
            tile.hashes += entry
            if tile.seqs is not None:
                if tile.seqs and seq <= tile.seqs[-1]:
                    raise ValueError(f"positions must increase: {seq} after {tile.seqs[-1]}")
                tile.seqs.append(seq)
            changed[key] = tile
            if position % TILE_WIDTH != TILE_WIDTH - 1:
                break
            entry = perfect_root(_nodes(tile_level, tile.hashes, 0, TILE_WIDTH))
            position, tile_level = position >> TILE_HEIGHT, tile_level + 1
    return changed


def leaf_position(tile_index: int, seqs: Sequence[int], seq: int) -> int | None:
    """The leaf index of receipt position `seq` in level-0 tile `tile_index`, if there."""
    lo, hi = 0, len(seqs)
    while lo < hi:
        mid = (lo + hi) // 2
        if seqs[mid] < seq:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(seqs) and seqs[lo] == seq:
        return (tile_index << TILE_HEIGHT) + lo
    return None


def ranges(indexes: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted leaf indexes as inclusive ranges: [3, 4, 5, 9] -> [(3, 5), (9, 9)]."""
    out: list[tuple[int, int]] = []
    for index in sorted(set(indexes)):
        if out and index == out[-1][1] + 1:
            out[-1] = (out[-1][0], index)
        else:
            out.append((index, index))
    return out


def ranges_text(spans: Sequence[tuple[int, int]]) -> str:
    """ "3-5,9": how a tombstone names its stream's leaves."""
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def parse_ranges(text: str) -> list[tuple[int, int]]:
    out = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        a, b = int(first), int(last or first)
        if b < a or a < 0:
            raise ValueError(f"not a leaf range: {part!r}")
        out.append((a, b))
    return out
