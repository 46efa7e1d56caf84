"""Does the store still extend a checkpoint kept elsewhere? (issue 36, `receipts verify
--against <checkpoint file>`.)

The checkpoint commits to the hash of every receipt before it, in commit order. So the
leaves are recomputed from the receipt rows themselves (each row's sealed text hashed
again), in the order the log's level-0 tiles give, with the stored leaf only where a
tombstone says retention removed the receipt; their root must be the checkpoint's. That
is the proof, and it holds even when the chains and stream rows were rewritten to agree
with each other. Beside it, each difference is named: a receipt gone, edited, moved,
reordered, replaced or inserted, a tombstone whose leaves do not match it, a tree whose
stored tiles no longer give the root.

A walk over the whole log: an audit, not a hot path (keyset pages of 64 tiles).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from receipts import append, checkpoints, log, signing
from receipts.core import log_tiles
from receipts.core.chain import Receipt
from receipts.core.checkpoint import (
    Checkpoint,
    CheckpointError,
    checkpoint_hash,
    from_wire,
    link_fault,
)
from receipts.core.merkle import Frontier, ProofError, leaf_hash
from receipts.errors import CheckpointKeyError, CheckpointNotFound
from receipts.models import LogCheckpoint
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow
from receipts.models import Tombstone as TombstoneRow

BATCH_LEAVES = 2048  # leaves whose receipt rows one query reads
FINDING_LIMIT = 1000  # enough to act on; the count says how many more


@dataclass(frozen=True)
class Finding:
    """One difference between the store and the checkpoint: `where` names the receipt
    (`<stream>#<n>`, a leaf, a tombstone or the log), `reason` what happened to it."""

    where: str
    reason: str

    def to_wire(self) -> dict[str, str]:
        return {"where": self.where, "reason": self.reason}


@dataclass
class Findings:
    """What a check found, the first FINDING_LIMIT of them, and how many more."""

    findings: list[Finding] = field(default_factory=list)
    more: int = 0  # findings past FINDING_LIMIT

    @property
    def ok(self) -> bool:
        return not self.findings

    def add(self, where: str, reason: str) -> None:
        if len(self.findings) < FINDING_LIMIT:
            self.findings.append(Finding(where, reason))
        else:
            self.more += 1

    def findings_wire(self) -> dict[str, Any]:
        return {"findings": [f.to_wire() for f in self.findings], "moreFindings": self.more}


@dataclass(kw_only=True)
class Against(Findings):
    checkpoint: Checkpoint
    signature: str
    leaves: int = 0
    pruned: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checkpoint": checkpoint_hash(self.checkpoint),
            "treeSize": self.checkpoint.tree_size,
            "signature": self.signature,
            "leaves": self.leaves,
            "pruned": self.pruned,
            **self.findings_wire(),
        }


def _keys(given: Sequence[Ed25519PublicKey]) -> dict[str, Ed25519PublicKey]:
    """The public keys a signature may be checked with, by key id: those given, and the
    public half of the key this store signs with (when one is configured and usable)."""
    known = {signing.key_id(k): k for k in given}
    try:
        own = checkpoints.signing_key()
    except CheckpointKeyError:
        own = None
    if own is not None:
        known.setdefault(signing.key_id(own.public_key()), own.public_key())
    return known


def _signature(
    cp: Checkpoint, known: dict[str, Ed25519PublicKey], out: Findings, where: str
) -> str:
    if not cp.signed:
        return "unsigned"
    key = known.get(cp.key_id or "")
    if key is None:
        return f"signed by key {cp.key_id}, signature not checked (key not given)"
    fault = signing.signature_fault(cp, key)
    if fault:
        out.add(where, fault)
        return f"signature INVALID, key {cp.key_id}"
    return f"signature valid, key {cp.key_id}"


class _Pruned:
    """The leaves tombstones name, as sorted disjoint ranges."""

    def __init__(self, out: Against) -> None:
        spans: list[tuple[int, int]] = []
        rows = TombstoneRow.objects.exclude(leaves=None).values_list(
            "stream", "leaves", "receipt_count", "head"
        )
        self.heads: list[tuple[str, int, str]] = []  # (stream, last leaf, head hash)
        for stream, text, count, head in rows.iterator():
            try:
                found = log_tiles.parse_ranges(text)
            except ValueError:
                out.add(f"tombstone of {stream}", f"its leaves {text!r} are not leaf ranges")
                continue
            named = sum(b - a + 1 for a, b in found)
            if named != count:
                out.add(
                    f"tombstone of {stream}",
                    f"names {named} leaves for its {count} receipts: edited",
                )
            if found:
                self.heads.append((stream, found[-1][1], head))
            spans += found
        spans.sort()
        merged: list[tuple[int, int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        self._starts = [a for a, _ in merged]
        self._spans = merged

    def __contains__(self, index: int) -> bool:
        at = bisect.bisect_right(self._starts, index) - 1
        return at >= 0 and self._spans[at][1] >= index


def against(cp: Checkpoint, *, keys: Sequence[Ed25519PublicKey] = ()) -> Against:
    """Check that the store still holds, in order, every receipt `cp` commits to."""
    out = Against(checkpoint=cp, signature="")
    out.signature = _signature(cp, _keys(keys), out, "the checkpoint")
    size = cp.tree_size
    held = log.head().size
    if held < size:
        out.add("the log", f"holds {held} leaves, fewer than the checkpoint's {size}: truncated")
    _check_own_checkpoint(cp, out)
    pruned = _Pruned(out)
    from_rows, from_log = Frontier(), Frontier()
    gone: dict[str, tuple[int, int]] = {}  # receipt hash -> (leaf, seq) of rows not found
    displaced: list[tuple[int, int, str, Receipt]] = []  # (leaf, seq, leaf hash, row there)
    streams: dict[str, tuple[int, str]] = {}  # stream -> (stream_seq, name) seen last
    names: dict[str, str] = {}  # gone hash -> `<stream>#<n>`, from the receipt after it
    last_seq = 0
    for batch in _batches(log.leaf_tiles(size)):
        for tile in batch:
            expected = min(log_tiles.TILE_WIDTH, size - tile.first_index)
            if len(tile.leaves) != expected or len(tile.seqs) != len(tile.leaves):
                first, end = tile.first_index + len(tile.leaves), tile.first_index + expected
                out.add(f"leaves {first}..{end - 1}", "are missing from the log: removed")
        in_log = {seq for tile in batch for seq in tile.seqs}
        top = max(in_log, default=last_seq)
        rows = {r.seq: r for r in append.read_seq_range(last_seq, top, stored=True)}
        for extra in rows.values():
            if extra.seq not in in_log:
                out.add(
                    f"{extra.stream}#{extra.stream_seq}",
                    f"seq {extra.seq} lies among the checkpoint's leaves but is none of them: "
                    "inserted",
                )
        leaves = [
            (tile.first_index + offset, leaf, seq)
            for tile in batch
            for offset, (leaf, seq) in enumerate(zip(tile.leaves, tile.seqs, strict=False))
        ]
        for index, leaf, seq in leaves:
            out.leaves += 1
            from_log.append(leaf_hash(leaf))
            row = rows.get(seq)
            if row is None:
                if index in pruned:
                    out.pruned += 1
                else:
                    gone[leaf.hex()] = (index, seq)
                from_rows.append(leaf_hash(leaf))
                continue
            if row.prev in gone and row.stream_seq:
                names[row.prev] = f"{row.stream}#{row.stream_seq - 1}"
            content = row.expected_hash()
            from_rows.append(leaf_hash(bytes.fromhex(content)))
            name = f"{row.stream}#{row.stream_seq}"
            if row.hash != leaf.hex():
                displaced.append((index, seq, leaf.hex(), row))
                continue
            if content != row.hash:
                out.add(name, f"leaf {index}: its sealed text no longer hashes to its hash: edited")
            unsealed = row.unsealed_field()
            if unsealed == "stream":
                out.add(name, f"leaf {index}: sealed on another stream: moved here")
            elif unsealed:
                out.add(name, f"leaf {index}: its {unsealed} is not what its hash seals: edited")
            before = streams.get(row.stream)
            if before is not None and row.stream_seq is not None and row.stream_seq <= before[0]:
                out.add(name, f"leaf {index}: comes after {before[1]} in the log: reordered")
            streams[row.stream] = (row.stream_seq or 0, name)
        last_seq = max(last_seq, top)
    _name_displaced(displaced, gone, out)
    _name_gone(gone, names, out)
    _check_tombstone_heads(pruned, size, out)
    _check_roots(cp, from_rows.root(), from_log.root(), out)
    return out


def _batches(tiles: Iterable[log.LeafTile]) -> Iterator[list[log.LeafTile]]:
    """Consecutive tiles, about BATCH_LEAVES leaves at a time: one query for their rows."""
    left = iter(tiles)
    while batch := list(itertools.islice(left, -(-BATCH_LEAVES // log_tiles.TILE_WIDTH))):
        yield batch


def _check_own_checkpoint(cp: Checkpoint, out: Against) -> None:
    try:
        own = checkpoints.by_size(cp.tree_size)
    except CheckpointNotFound:
        if cp.tree_size:
            out.add("the checkpoints stream", f"has no checkpoint of {cp.tree_size} leaves")
        return
    if own.hash != checkpoint_hash(cp):
        out.add(
            f"checkpoint {own.number}",
            "the store's checkpoint of this size is another one: a second log was signed",
        )


def _name_displaced(
    displaced: Sequence[tuple[int, int, str, Receipt]],
    gone: dict[str, tuple[int, int]],
    out: Against,
) -> None:
    """Rows at a leaf's seq holding another receipt: that receipt elsewhere (reordered or
    moved) or nowhere (the row was rewritten)."""
    wanted = [leaf for _, _, leaf, _ in displaced]
    where = _rows_by_hash(wanted)
    for index, seq, leaf, row in displaced:
        name = f"{row.stream}#{row.stream_seq}"
        if leaf in where:
            _reordered(index, seq, where[leaf], out)
        else:
            out.add(
                name,
                f"leaf {index}: the log holds receipt {leaf[:16]}, this row is "
                f"{row.hash[:16]}: rewritten",
            )
            gone.pop(leaf, None)


def _reordered(index: int, seq: int, found: tuple[int, str], out: Against) -> None:
    """Leaf `index` is a receipt the store holds, but at another seq."""
    other_seq, other = found
    out.add(
        other, f"leaf {index}: the log has it at seq {seq}, the store at seq {other_seq}: reordered"
    )


def _rows_by_hash(hashes: Iterable[str]) -> dict[str, tuple[int, str]]:
    found: dict[str, tuple[int, str]] = {}
    wanted = list(hashes)
    for start in range(0, len(wanted), 500):
        rows = ReceiptRow.objects.filter(hash__in=wanted[start : start + 500]).values_list(
            "hash", "seq", "stream", "stream_seq"
        )
        for h, seq, stream, stream_seq in rows:
            found[h] = (seq, f"{stream}#{stream_seq}")
    return found


def _name_gone(gone: dict[str, tuple[int, int]], names: dict[str, str], out: Against) -> None:
    """Receipts whose rows are gone, named by the receipt after them on their stream, or
    as their stream's newest by the stream row's head."""
    moved = _rows_by_hash(gone)
    unnamed = [h for h in gone if h not in names and h not in moved]
    for start in range(0, len(unnamed), 500):
        rows = StreamRow.objects.filter(head__in=unnamed[start : start + 500])
        for name, head, count in rows.values_list("name", "head", "receipt_count"):
            names[head] = f"{name}#{count}"
    for h, (index, seq) in sorted(gone.items(), key=lambda item: item[1]):
        if h in moved:
            _reordered(index, seq, moved[h], out)
            continue
        out.add(
            names.get(h, f"receipt {h[:16]}"),
            f"leaf {index} (seq {seq}): receipt {h[:16]} is gone from the store: deleted",
        )


def _check_tombstone_heads(pruned: _Pruned, size: int, out: Against) -> None:
    """A tombstone's last leaf is its stream's head: the leaves it names are its own."""
    for stream, last, head in pruned.heads:
        if last >= size:
            continue
        leaf = log.leaf_at(last)
        if leaf is None or leaf.hex() != head:
            out.add(f"tombstone of {stream}", f"leaf {last} is not its head {head[:16]}: edited")


def _check_roots(cp: Checkpoint, from_rows: bytes, from_log: bytes, out: Against) -> None:
    if cp.tree_size > out.leaves:
        return  # already reported: leaves are missing
    if from_rows.hex() != cp.root_hash and not out.findings:
        out.add(
            "the log",
            "the receipts and the log's leaves agree with each other but not with the "
            "checkpoint's root: both were rewritten",
        )
    if from_log.hex() != cp.root_hash:
        out.add("the log", "its stored leaves do not give the checkpoint's root: rewritten")
    elif log.root(cp.tree_size).hex() != cp.root_hash:
        out.add("the log", "its stored tree does not give the checkpoint's root: tiles rewritten")


# ---- the store's own checkpoints ----------------------------------------------------------


@dataclass(kw_only=True)
class OwnCheckpoints(Findings):
    checked: int = 0

    def to_wire(self) -> dict[str, Any]:
        return {"ok": self.ok, "checked": self.checked, **self.findings_wire()}


def own_checkpoints(*, keys: Sequence[Ed25519PublicKey] = ()) -> OwnCheckpoints:
    """Read back every checkpoint the store made, in order: each must parse, name the one
    before it (`link_fault`), carry a valid signature where its key is known, still be
    the root the log's tree gives at its size, and agree with its index row (what
    lookups by size and hash read). A chain rewritten and resealed to agree with itself
    still fails on its signatures, or on the tree."""
    out = OwnCheckpoints()
    known = _keys(keys)
    held = log.head().size
    index = LogCheckpoint.objects.order_by("number").values_list(
        "number", "tree_size", "hash", "timestamp_ms", "key_id"
    )
    rows = iter(index.iterator(chunk_size=2000))  # beside the receipts, both by number
    row = next(rows, None)
    previous: Checkpoint | None = None
    for receipt in append.iter_receipts(checkpoints.STREAM):
        number = receipt.stream_seq or 0
        where = f"checkpoint {number}"
        out.checked += 1
        try:
            cp = from_wire(receipt.body.get("checkpoint"))
        except CheckpointError as exc:
            out.add(where, f"is not a checkpoint: {exc}")
            previous = None
            continue
        if previous is not None:
            fault = link_fault(previous, cp)
            if fault:
                out.add(where, fault)
        elif number == 1 and cp.previous is not None:
            out.add(where, "the first checkpoint names one before it")
        _signature(cp, known, out, where)
        if cp.tree_size > held:
            out.add(where, f"the log holds {held} leaves, fewer than its {cp.tree_size}")
        elif _root(cp.tree_size) != cp.root_hash:
            out.add(where, "the log's tree no longer gives its root")
        while row is not None and row[0] < number:
            out.add(f"checkpoint {row[0]}", "is indexed but not on the checkpoints stream")
            row = next(rows, None)
        if row is None or row[0] != number:
            out.add(where, "has no index row: lookups by size or hash miss it")
        else:
            if row[1:] != (cp.tree_size, checkpoint_hash(cp), cp.timestamp_ms, cp.key_id):
                out.add(where, "its index row says another size, hash, time or key")
            row = next(rows, None)
        previous = cp
    while row is not None:
        out.add(f"checkpoint {row[0]}", "is indexed but not on the checkpoints stream")
        row = next(rows, None)
    return out


def _root(size: int) -> str | None:
    try:
        return log.root(size).hex()
    except ProofError:  # a tile the root needs is gone
        return None
