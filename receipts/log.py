"""The store-wide log (issue 36): every receipt's hash is a leaf of one append-only RFC
9162 tree, in commit order, stored as tiles (receipts.core.log_tiles).

`extend` appends the receipts committed since the last extension, in seq order, but
only up to the stable horizon (receipts.live.horizon, the live feed's): below it every
seq is committed or will never exist, so a slow transaction can never commit a receipt
behind a leaf already appended. Extensions lock the log's one head row and follow one
another; the loop that runs them is scheduled by the jobs runtime (the store imports no
jobs). `StoredTiles` serves proofs: one query for the few tiles a proof needs.

Nothing here deletes a leaf or rewrites a full tile: pruning removes a stream's receipts
and keeps their leaves (receipts.retention names them on the tombstone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from django.db import connection, transaction

from receipts import db
from receipts.core import log_tiles, merkle
from receipts.core.log_tiles import TILE_HEIGHT, Tile, TileKey
from receipts.core.merkle import HASH_SIZE, Subtree
from receipts.live import horizon
from receipts.models import LogHead, LogTile
from receipts.models import Receipt as ReceiptRow

READ_PAGE = 5_000  # receipts read per statement while extending
PASS_LIMIT = 100_000  # leaves one extension appends at most (the next pass goes on)
WAIT_STEP_S = 0.02

_tracker = horizon.Horizon()  # this process's view of the stable horizon
_tracker_lock = threading.Lock()


class LogBehind(RuntimeError):
    """The log has not reached receipts it needs to (their transactions are still open)."""


@dataclass(frozen=True)
class Extension:
    """What one extension did: leaves added, the log's size and reach after it."""

    added: int
    size: int
    covered_seq: int
    skipped: bool = False  # another process was extending


@dataclass(frozen=True)
class Head:
    size: int
    covered_seq: int
    updated_at: int


def head() -> Head:
    row = LogHead.objects.filter(id=1).first()
    return Head(0, 0, 0) if row is None else Head(row.size, row.covered_seq, row.updated_at)


def stable_horizon(*, wait_s: float = 0.0) -> int:
    """The highest seq below which nothing can still commit, as this process knows it;
    waits up to `wait_s` for the writers a probe saw to end (one-off callers: a command,
    a prune). The loop waits for nothing: its next pass sees them gone. Never above the
    seqs the database shows now (a store restored from a backup starts lower again)."""
    deadline = time.monotonic() + wait_s
    with _tracker_lock:
        while True:
            probe = horizon.probe()
            stable = min(_tracker.observe(probe) or 0, probe.max_seq)
            if not _tracker.pending or time.monotonic() >= deadline:
                return stable
            time.sleep(WAIT_STEP_S)


def extend(
    *, now_ms: int, wait_s: float = 0.0, limit: int = PASS_LIMIT, blocking: bool = False
) -> Extension:
    """Append the receipts below the stable horizon that are not leaves yet, at most
    `limit` (the next call goes on). Skips (`skipped`) when another process is
    extending, unless `blocking`."""
    stable = stable_horizon(wait_s=wait_s)
    with transaction.atomic():
        row = _locked_head(blocking=blocking)
        if row is None:
            return Extension(0, 0, 0, skipped=True)
        before = (row.size, row.covered_seq)
        tiles = _load(log_tiles.rightmost(row.size))
        added = 0
        while added < limit and row.covered_seq < stable:
            want = min(READ_PAGE, limit - added)
            page = list(
                ReceiptRow.objects.filter(seq__gt=row.covered_seq, seq__lte=stable)
                .order_by("seq")
                .values_list("seq", "hash")[:want]
            )
            if page:
                changed = log_tiles.grow(
                    row.size, tiles, [(seq, bytes.fromhex(h)) for seq, h in page]
                )
                _save(changed)
                row.size += len(page)
                added += len(page)
                tiles = {k: changed.get(k) or tiles[k] for k in log_tiles.rightmost(row.size)}
            # a short page read everything up to the horizon
            row.covered_seq = page[-1][0] if len(page) == want else stable
        if (row.size, row.covered_seq) != before:
            row.updated_at = now_ms
            row.save(update_fields=["size", "covered_seq", "updated_at"])
        return Extension(added, row.size, row.covered_seq)


def _locked_head(*, blocking: bool) -> LogHead | None:
    LogHead.objects.get_or_create(id=1)
    return LogHead.objects.select_for_update(skip_locked=not blocking).filter(id=1).first()


def ensure_covered(seq: int, *, now_ms: int, wait_s: float = 2.0) -> None:
    """Extend the log until receipt `seq` is behind it (a prune's streams must be leaves
    before their receipts go); LogBehind when open transactions keep it from getting
    there in `wait_s`."""
    deadline = time.monotonic() + wait_s
    while head().covered_seq < seq:
        extension = extend(now_ms=now_ms, wait_s=WAIT_STEP_S, blocking=True)
        if extension.covered_seq >= seq:
            return
        if time.monotonic() >= deadline:
            raise LogBehind(
                f"the log reaches seq {extension.covered_seq}, not yet {seq}: it is still "
                "catching up, or transactions that write receipts are still open"
            )


# ---- tiles ----------------------------------------------------------------------------------


# The tiles of a proof or an extension, in one statement: PostgreSQL takes the keys as
# two arrays (one prepared statement for any number of keys); SQLite as a VALUES list.
_TILES_PG = (
    "SELECT level, number, hashes, seqs FROM receipt_log_tile "
    "WHERE (level, number) IN (SELECT * FROM unnest(%s::smallint[], %s::bigint[]))"
)
_TILES_SQLITE = (
    "SELECT level, number, hashes, seqs FROM receipt_log_tile WHERE (level, number) IN (VALUES {})"
)


def _load(keys: Iterable[TileKey]) -> dict[TileKey, Tile]:
    keys = sorted(set(keys))
    if not keys:
        return {}
    if connection.vendor == "postgresql":
        rows, _ = db.prepared(_TILES_PG, [[k[0] for k in keys], [k[1] for k in keys]])
    else:
        sql = _TILES_SQLITE.format(",".join(["(%s, %s)"] * len(keys)))
        rows, _ = db.prepared(sql, [part for key in keys for part in key])
    return {
        (level, number): Tile(
            bytearray(hashes), None if seqs is None else log_tiles.decode_seqs(bytes(seqs))
        )
        for level, number, hashes, seqs in rows
    }


def _save(changed: dict[TileKey, Tile]) -> None:
    LogTile.objects.bulk_create(
        [
            LogTile(
                level=level,
                number=number,
                hashes=bytes(tile.hashes),
                seqs=None if tile.seqs is None else log_tiles.encode_seqs(tile.seqs),
                first_seq=tile.seqs[0] if tile.seqs else None,
            )
            for (level, number), tile in changed.items()
        ],
        update_conflicts=True,
        unique_fields=["level", "number"],
        update_fields=["hashes", "seqs", "first_seq"],
    )


class StoredTiles:
    """The log's tree as stored: a merkle.SubtreeSource reading the tiles a request
    needs in one query."""

    def subtree_hashes(self, subtrees: Sequence[Subtree]) -> list[bytes]:
        found = {key: tile.hashes for key, tile in _load(log_tiles.tiles_for(subtrees)).items()}
        return log_tiles.subtree_hashes(subtrees, found)


def root(size: int) -> bytes:
    return merkle.root(size, StoredTiles())


# ---- leaves and receipts ----------------------------------------------------------------------


def leaf_index(seq: int) -> int | None:
    """The leaf of the receipt at `seq`, None when it is not (yet) in the log."""
    return leaf_indexes([seq]).get(seq)


# The level-0 tile of each of a set of seqs (the greatest first_seq <= it, on the
# partial index), then those tiles: two statements for any number of receipts.
_TILE_OF_PG = (
    "SELECT s.seq, (SELECT number FROM receipt_log_tile WHERE level = 0 AND first_seq <= s.seq "
    "ORDER BY first_seq DESC LIMIT 1) FROM unnest(%s::bigint[]) AS s(seq)"
)
_TILE_OF_SQLITE = (
    "WITH s(seq) AS (VALUES {}) SELECT s.seq, (SELECT number FROM receipt_log_tile "
    "WHERE level = 0 AND first_seq <= s.seq ORDER BY first_seq DESC LIMIT 1) FROM s"
)


def leaf_indexes(seqs: Iterable[int]) -> dict[int, int]:
    """The leaf of each of `seqs` that is in the log."""
    wanted = sorted(set(seqs))
    if not wanted:
        return {}
    if connection.vendor == "postgresql":
        rows, _ = db.prepared(_TILE_OF_PG, [wanted])
    else:
        rows, _ = db.prepared(_TILE_OF_SQLITE.format(",".join(["(%s)"] * len(wanted))), wanted)
    tile_of = {seq: number for seq, number in rows if number is not None}
    tiles = _load((0, number) for number in set(tile_of.values()))
    found = {}
    for seq, number in tile_of.items():
        tile = tiles.get((0, number))
        index = log_tiles.leaf_position(number, tile.seqs or [], seq) if tile else None
        if index is not None:
            found[seq] = index
    return found


def leaf_at(index: int) -> bytes | None:
    """Leaf `index` (a receipt hash, raw), None beyond the log."""
    number, offset = index >> TILE_HEIGHT, index % (1 << TILE_HEIGHT)
    row = LogTile.objects.filter(level=0, number=number).values_list("hashes", flat=True).first()
    if row is None or (offset + 1) * HASH_SIZE > len(row):
        return None
    return bytes(row[offset * HASH_SIZE : (offset + 1) * HASH_SIZE])


@dataclass(frozen=True)
class LeafTile:
    number: int
    leaves: list[bytes]
    seqs: list[int]

    @property
    def first_index(self) -> int:
        return self.number << TILE_HEIGHT


def leaf_tiles(size: int, *, page: int = 64) -> Iterator[LeafTile]:
    """The level-0 tiles holding the first `size` leaves, in order, cut at `size`; a tile
    missing from the store is yielded empty, so the caller sees the hole."""
    last = (size - 1) >> TILE_HEIGHT if size else -1
    number = 0
    while number <= last:
        rows = {
            n: (hashes, seqs)
            for n, hashes, seqs in LogTile.objects.filter(
                level=0, number__gte=number, number__lt=number + page
            ).values_list("number", "hashes", "seqs")
        }
        for n in range(number, min(number + page, last + 1)):
            hashes, seqs = rows.get(n, (b"", b""))
            keep = min(1 << TILE_HEIGHT, size - (n << TILE_HEIGHT))
            leaves = log_tiles.entries(bytes(hashes))[:keep]
            yield LeafTile(n, leaves, log_tiles.decode_seqs(bytes(seqs or b""))[:keep])
        number += page
