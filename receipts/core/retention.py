"""Retention that stays verifiable: tombstones and the batch commitment (pure).

A stream removed by retention leaves a tombstone (what it was: receipt count, head hash,
final status, when it settled and was pruned, who it belonged to). Each prune batch
appends one receipt to a `retention/` chain whose body commits to the batch: the number
of tombstones, the windows in force and a hash over the tombstones themselves. Verify
recomputes that hash from the tombstone rows, so an edited, added or removed tombstone
shows, and the chain's own hashes show an edited commitment. This module owns those
rules; it must not know which streams are prunable (the families decide) or how rows are
stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from receipts.core.canonical import sha256_hex

PREFIX: Final = "retention/"
PRUNED: Final = "retention.pruned"  # body.type of a batch's receipt
DAY_MS: Final = 86_400_000


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a pruned stream was. `batch` is the stream_seq of the retention receipt that
    commits to it (0 until the batch is numbered)."""

    stream: str
    family: str  # the retention family whose window applied
    receipt_count: int
    head: str
    final_status: str
    settled_at_ms: int
    pruned_at_ms: int
    organization_id: str | None = None
    agent_id: str | None = None
    kind: str | None = None
    batch: int = 0
    # its receipts' leaves in the store-wide log, as ranges ("3-5,9"); None before the log
    leaves: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire = {
            "stream": self.stream,
            "family": self.family,
            "receiptCount": self.receipt_count,
            "head": self.head,
            "finalStatus": self.final_status,
            "settledAt": self.settled_at_ms,
            "prunedAt": self.pruned_at_ms,
            "organizationId": self.organization_id,
            "agentId": self.agent_id,
            "kind": self.kind,
            "batch": self.batch,
        }
        if self.leaves is not None:  # absent from tombstones older than the log
            wire["leaves"] = self.leaves
        return wire


def batch_hash(tombstones: Iterable[Tombstone]) -> str:
    """sha256 over the canonical JSON of the tombstones' wire forms in stream order: any
    client holding the rows can recompute it (S-2's canonical JSON)."""
    return sha256_hex([t.to_wire() for t in sorted(tombstones, key=lambda t: t.stream)])


def batch_body(
    *,
    batch: int,
    tombstones: Sequence[Tombstone],
    windows_days: Mapping[str, int],
    pruned_at_ms: int,
) -> dict[str, Any]:
    """The body of the retention receipt committing to one batch."""
    return {
        "type": PRUNED,
        "batch": batch,
        "count": len(tombstones),
        "receipts": sum(t.receipt_count for t in tombstones),
        "batchHash": batch_hash(tombstones),
        "windowsDays": dict(windows_days),
        "prunedAt": pruned_at_ms,
    }


def batch_fault(body: Mapping[str, Any], tombstones: Sequence[Tombstone]) -> str | None:
    """Why the tombstone rows of a batch do not match its receipt, or None when they do."""
    batch = body.get("batch")
    if len(tombstones) != body.get("count"):
        return (
            f"batch {batch} commits to {body.get('count')} tombstone(s) but "
            f"{len(tombstones)} are stored (removed or added)"
        )
    if batch_hash(tombstones) != body.get("batchHash"):
        return f"tombstones of batch {batch} do not hash to the committed batchHash (edited)"
    return None


def cutoff_ms(now_ms: int, days: int) -> int:
    """Streams settled before this instant are past a window of `days`."""
    return now_ms - days * DAY_MS


def fill(receipt_counts: Sequence[int], *, max_streams: int, max_receipts: int) -> int:
    """How many candidates (their receipt counts, in order) one batch takes: at most
    `max_streams`, and no more than `max_receipts` receipts in all, except that the
    first is always taken, so a stream longer than the cap still goes (alone)."""
    taken, receipts = 0, 0
    for count in receipt_counts[: max(1, max_streams)]:
        if taken and receipts + count > max_receipts:
            break
        taken += 1
        receipts += count
    return taken


def covers(prefix: str, root: str) -> bool:
    """Whether a verify over `prefix` concerns streams under `root` (either contains the
    other: "" and "jobs" cover "jobs/", and so does "jobs/abc")."""
    return root.startswith(prefix) or prefix.startswith(root)
