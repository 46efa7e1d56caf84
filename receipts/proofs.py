"""Proofs from the store-wide log (issue 36): a receipt's inclusion in a checkpoint and
the consistency of two checkpoints, in the JSON formats `receipts.verify_offline`
checks (receipts.core.log_proofs). Each proof reads a few tiles in one query.

A receipt is named by its hash, `<stream>#<n>` (or `<stream>/<n>`), or its id. A receipt
that retention removed keeps its leaf: `<stream>#<n>` still finds it through its
stream's tombstone, which names the stream's leaves in order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from receipts import checkpoints, log
from receipts.checkpoints import Stored
from receipts.core import log_proofs, log_tiles
from receipts.errors import InvalidReference, NotInCheckpoint, ReceiptNotFound
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow
from receipts.models import Tombstone as TombstoneRow

_HEX64 = re.compile("[0-9a-f]{64}")
_RECEIPT_ID = re.compile("[0-9a-z]{1,14}-[0-9a-f]{16}")
_POSITION = re.compile(r"(?P<stream>.+)[#/](?P<n>[0-9]{1,15})")


@dataclass(frozen=True)
class Located:
    """Where a receipt is in the log: its leaf `index` and its hash (the leaf)."""

    name: str  # how to show it: `<stream>#<n>` when known
    index: int
    leaf: str


def locate(ref: str, *, field: str = "receipt") -> Located:
    """The leaf of the receipt `ref` names (see the module's doc)."""
    text = ref.strip()
    if any(ord(c) < 32 or 0xD800 <= ord(c) < 0xE000 for c in text) or len(text) > 600:
        raise InvalidReference(f"{field}: not a receipt hash, <stream>#<n> or a receipt id")
    if _HEX64.fullmatch(text):
        row = ReceiptRow.objects.filter(hash=text).values_list("stream", "stream_seq", "seq")
        found = row.first()
        if found is None:
            raise ReceiptNotFound(
                f"no receipt {text[:16]} in the store (name a pruned one by <stream>#<n>)"
            )
        return _at_seq(f"{found[0]}#{found[1]}", found[2])
    position = _POSITION.fullmatch(text)
    if position and (position["n"] != "0"):
        return locate_position(position["stream"], int(position["n"]))
    if _RECEIPT_ID.fullmatch(text):
        rows = list(
            ReceiptRow.objects.filter(receipt_id=text).values_list("stream", "stream_seq", "seq")[
                :2
            ]
        )
        if len(rows) > 1:
            raise InvalidReference(
                f"{field}: receipt id {text} is on several streams: name it by <stream>#<n>"
            )
        if rows:
            return _at_seq(f"{rows[0][0]}#{rows[0][1]}", rows[0][2])
        raise ReceiptNotFound(f"no receipt {text}")
    raise InvalidReference(
        f"{field}: {text[:80]!r} is neither a receipt hash, <stream>#<n> nor a receipt id"
    )


def locate_position(stream: str, stream_seq: int) -> Located:
    """The leaf of receipt `stream_seq` (1-based) of `stream`, kept or pruned."""
    name = f"{stream}#{stream_seq}"
    seq = (
        ReceiptRow.objects.filter(stream=stream, stream_seq=stream_seq)
        .values_list("seq", flat=True)
        .first()
    )
    if seq is not None:
        return _at_seq(name, seq)
    if StreamRow.objects.filter(name=stream).exists():
        raise ReceiptNotFound(f"no receipt {name}")
    pruned = (
        TombstoneRow.objects.filter(stream=stream)
        .order_by("-id")
        .values_list("leaves", "receipt_count")
        .first()
    )
    if pruned is None or pruned[0] is None or stream_seq > pruned[1]:
        raise ReceiptNotFound(f"no receipt {name}")
    indexes = [i for a, b in log_tiles.parse_ranges(pruned[0]) for i in range(a, b + 1)]
    if stream_seq > len(indexes):
        raise ReceiptNotFound(f"no leaf of {name}: its tombstone names {len(indexes)}")
    index = indexes[stream_seq - 1]
    leaf = log.leaf_at(index)
    if leaf is None:
        raise ReceiptNotFound(f"leaf {index} of {name} is not in the log")
    return Located(name, index, leaf.hex())


def _at_seq(name: str, seq: int) -> Located:
    index = log.leaf_index(seq)
    if index is None:
        raise NotInCheckpoint(f"receipt {name} is not in the log yet: ask again in a minute")
    leaf = log.leaf_at(index)
    assert leaf is not None  # a leaf index comes from a stored tile
    return Located(name, index, leaf.hex())


def inclusion(located: Located, checkpoint: Stored) -> log_proofs.InclusionProof:
    """The proof that `located`'s receipt is in `checkpoint`'s tree."""
    size = checkpoint.checkpoint.tree_size
    if located.index >= size:
        raise NotInCheckpoint(
            f"receipt {located.name} is leaf {located.index}; checkpoint {checkpoint.number} "
            f"has {size} leaves: ask for a later checkpoint"
        )
    return log_proofs.inclusion_proof(
        located.leaf, located.index, checkpoint.checkpoint, log.StoredTiles()
    )


def consistency(old: Stored, new: Stored) -> log_proofs.ConsistencyProof:
    """The proof that `new`'s tree extends `old`'s."""
    if old.checkpoint.tree_size > new.checkpoint.tree_size:
        raise InvalidReference(
            f"old: checkpoint {old.number} ({old.checkpoint.tree_size} leaves) is newer than "
            f"checkpoint {new.number} ({new.checkpoint.tree_size} leaves)"
        )
    return log_proofs.consistency_proof(old.checkpoint, new.checkpoint, log.StoredTiles())


def inclusion_for(ref: str, checkpoint_ref: str | None = None) -> log_proofs.InclusionProof:
    return inclusion(locate(ref), checkpoints.resolve(checkpoint_ref))
