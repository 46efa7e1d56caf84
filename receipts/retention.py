"""Tombstones and the `retention/` chains (the I/O of receipts.core.retention).

A family that removes streams (jobs: `jobs.retention`) calls `store.remove_streams`
(`remove_streams` here) with the streams' rows locked: in its transaction their receipts
and rows are deleted, the batch is numbered by the next position on its retention chain,
its tombstones are written and one receipt commits to them (`record`). `verify`
recomputes every batch's hash from the tombstone rows and runs the checks families
register (for jobs: a read-model or delivery row naming a stream that is gone with no
tombstone). Families also register their prune entry point for `receipts prune`.
Nothing here decides what is prunable, and nothing here updates a tombstone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef

from receipts import append, log, replay
from receipts.core import log_tiles
from receipts.core.chain import Receipt
from receipts.core.retention import PREFIX, PRUNED, Tombstone, batch_body, batch_fault, covers
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow
from receipts.models import Tombstone as TombstoneRow

ISSUE_LIMIT = 100  # per check: enough to act on, bounded output


@dataclass(frozen=True)
class Issue:
    """Something verify found about removed streams: `stream` names what it concerns."""

    stream: str
    reason: str

    def to_wire(self) -> dict[str, Any]:
        return {"stream": self.stream, "reason": self.reason}


# name -> prune(*, now_ms, dry_run, older_than_days, by) -> a report with to_wire()/describe()
pruners: dict[str, Callable[..., Any]] = {}
# verify(prefix) -> issues; families register what only they can see (rows naming streams)
checks: list[Callable[[str], list[Issue]]] = []


def remove_streams(
    tombstones: Sequence[Tombstone],
    *,
    retention_stream: str,
    windows_days: dict[str, int],
    now_ms: int,
    by: str,
) -> Receipt:
    """Delete each tombstoned stream's receipts and row and record the tombstones on
    `retention_stream` (`record`), all in one transaction (the caller's, when it has one:
    it holds the streams' rows locked and has verified their chains). The only delete of
    receipt rows."""
    names = [t.stream for t in tombstones]
    with transaction.atomic(savepoint=False):
        tombstones = _with_leaves(tombstones, now_ms=now_ms)
        ReceiptRow.objects.filter(stream__in=names).delete()
        StreamRow.objects.filter(name__in=names).delete()
        return record(retention_stream, tombstones, windows_days=windows_days, now_ms=now_ms, by=by)


def _with_leaves(tombstones: Sequence[Tombstone], *, now_ms: int) -> list[Tombstone]:
    """The tombstones naming their streams' leaves. The log is extended over the
    streams' receipts first, so that removing them never removes a leaf: proofs of
    other receipts, and of every checkpoint, go on verifying (log.LogBehind when open
    transactions keep the log from reaching them: the prune is retried later)."""
    positions = list(
        ReceiptRow.objects.filter(stream__in=[t.stream for t in tombstones]).values_list(
            "stream", "seq"
        )
    )
    if not positions:
        return [replace(t, leaves="") for t in tombstones]
    log.ensure_covered(max(seq for _, seq in positions), now_ms=now_ms)
    index_of = log.leaf_indexes(seq for _, seq in positions)
    by_stream: dict[str, list[int]] = {}
    for stream, seq in positions:
        if seq in index_of:
            by_stream.setdefault(stream, []).append(index_of[seq])
    return [
        replace(t, leaves=log_tiles.ranges_text(log_tiles.ranges(by_stream.get(t.stream, []))))
        for t in tombstones
    ]


def record(
    retention_stream: str,
    tombstones: Sequence[Tombstone],
    *,
    windows_days: dict[str, int],
    now_ms: int,
    by: str,
) -> Receipt:
    """Inside the caller's transaction (the one deleting the streams): number the batch,
    write its tombstones and append the receipt committing to them. The retention
    stream's lock also serializes concurrent prune runs' commits."""
    with append.open_stream(retention_stream, savepoint=False) as handle:
        batch = handle.count + 1
        stamped = [replace(t, batch=batch) for t in tombstones]
        TombstoneRow.objects.bulk_create([_row(t, retention_stream) for t in stamped])
        body = batch_body(
            batch=batch, tombstones=stamped, windows_days=windows_days, pruned_at_ms=now_ms
        )
        return handle.append(body, now_ms=now_ms, context={"actor": by})[0]


# A tombstone's fields are its row's columns, but for these two names.
_COLUMN_OF = {"settled_at_ms": "settled_at", "pruned_at_ms": "pruned_at"}


def _row(t: Tombstone, retention_stream: str) -> TombstoneRow:
    columns = {_COLUMN_OF.get(f.name, f.name): getattr(t, f.name) for f in fields(Tombstone)}
    return TombstoneRow(**columns, retention_stream=retention_stream)


def _tombstone(row: TombstoneRow) -> Tombstone:
    return Tombstone(
        **{f.name: getattr(row, _COLUMN_OF.get(f.name, f.name)) for f in fields(Tombstone)}
    )


def tombstone_of(stream: str) -> Tombstone | None:
    """The latest tombstone of `stream` (an id reused after a prune may have two)."""
    row = TombstoneRow.objects.filter(stream=stream).order_by("-id").first()
    return _tombstone(row) if row else None


def tombstoned(streams: Sequence[str]) -> set[str]:
    return set(
        TombstoneRow.objects.filter(stream__in=list(streams)).values_list("stream", flat=True)
    )


# ---- verify ---------------------------------------------------------------------------------


def verify(prefix: str = "") -> list[Issue]:
    """Issues about removed streams under `prefix` (all for ""): batches whose tombstones
    do not match their receipt, tombstones no receipt commits to, and what the families'
    checks find. (Receipts left without their stream row are a broken stream, reported
    by the store's own verify: `store.rowless_streams`.)"""
    issues: list[Issue] = []
    if covers(prefix, PREFIX):
        for name in replay.matching_streams(PREFIX):
            if covers(prefix, name):
                issues += _verify_chain(name)
        issues += _unclaimed(prefix)
    for check in checks:
        issues += check(prefix)
    return issues


def _verify_chain(retention_stream: str) -> list[Issue]:
    issues = []
    for receipt in append.iter_receipts(retention_stream):
        if receipt.type != PRUNED:
            continue
        rows = TombstoneRow.objects.filter(
            retention_stream=retention_stream, batch=receipt.stream_seq
        )
        fault = batch_fault(receipt.body, [_tombstone(r) for r in rows])
        if fault is not None:
            issues.append(Issue(retention_stream, fault))
    return issues[:ISSUE_LIMIT]


def _unclaimed(prefix: str) -> list[Issue]:
    """Tombstones no retention receipt commits to (added by hand, or their chain gone)."""
    committed = StreamRow.objects.filter(
        name=OuterRef("retention_stream"), receipt_count__gte=OuterRef("batch")
    )
    rows = (
        TombstoneRow.objects.filter(
            retention_stream__startswith=prefix if prefix.startswith(PREFIX) else PREFIX
        )
        .filter(~Exists(committed))
        .values_list("stream", "retention_stream", "batch")
        .order_by("id")[:ISSUE_LIMIT]
    )
    return [
        Issue(stream, f"tombstone claims batch {batch} of {chain}, which no receipt commits to")
        for stream, chain, batch in rows
    ]


def missing(streams: Sequence[str]) -> list[str]:
    """Those of `streams` with neither a stream row nor a tombstone (for families' checks)."""
    if not streams:
        return []
    present = set(StreamRow.objects.filter(name__in=list(streams)).values_list("name", flat=True))
    absent = [s for s in streams if s not in present]
    gone = tombstoned(absent)
    return [s for s in absent if s not in gone]
