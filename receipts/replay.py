"""Rebuild and replay (S-8): read models recomputed from verified receipts, every
difference reported as drift. A stream whose chain does not verify is refused, never
projected. Callers go through the `receipts.store` facade.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from receipts import registry
from receipts.append import iter_receipts, list_streams, read, stream_info, stream_record, verify
from receipts.core.chain import Receipt, Verification, as_sealed, check_against_head
from receipts.core.chain import verify as verify_receipts
from receipts.errors import ReplayRefused


@dataclass(frozen=True)
class Drift:
    stream: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @property
    def fields(self) -> list[str]:
        before, after = self.before or {}, self.after or {}
        return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))

    def to_wire(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "fields": self.fields,
            "before": {k: (self.before or {}).get(k) for k in self.fields},
            "after": {k: (self.after or {}).get(k) for k in self.fields},
        }


@dataclass
class RebuildReport:
    checked: int = 0
    drift: list[Drift] = field(default_factory=list)
    refused: list[Verification] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "drift": [d.to_wire() for d in self.drift],
            "refused": [v.to_wire() for v in self.refused],
        }


def rebuild(
    projector: registry.Projector, streams: Sequence[str], *, dry_run: bool = False
) -> RebuildReport:
    """Recompute read-model rows of `streams` from their receipts; report every difference.

    A stream whose chain does not verify is refused (reported, never projected).
    """
    report = RebuildReport()
    for stream in streams:
        receipts, verification = _read_verified(stream)
        if not verification.ok:
            report.refused.append(verification)
            continue
        receipts = [as_sealed(r) for r in receipts]  # project what was sealed, as reads do
        report.checked += 1
        with transaction.atomic():
            before = projector.snapshot(stream)
            after = projector.compute(stream, receipts)
            if before != after:
                report.drift.append(Drift(stream, before, after))
                if not dry_run:
                    projector.write(stream, after)
    return report


def _read_verified(stream: str) -> tuple[list[Receipt], Verification]:
    """The receipts of `stream` as stored, and their verification against the stream row
    as `verify` makes it (the row read after them, then read on to its count): a
    truncated chain rebuilt would hide what was removed."""
    receipts = list(iter_receipts(stream, stored=True))
    row = stream_info(stream)
    if row is not None and row.count > len(receipts):
        receipts += read(stream, after=len(receipts), limit=row.count - len(receipts), stored=True)
    return receipts, check_against_head(verify_receipts(stream, receipts), stream_record(row))


def matching_streams(target: str) -> list[str]:
    """`target` itself when it is a stream, else every stream under it as a prefix."""
    if stream_info(target):
        return [target]
    names: list[str] = []
    after = None
    while True:
        page = list_streams(target, after=after, limit=1000)
        names += [s.name for s in page]
        if len(page) < 1000:
            return names
        after = page[-1].name


def replay(target: str, *, dry_run: bool = False) -> RebuildReport:
    """Verify then rebuild the read model of one stream or every stream under a prefix.

    Raises ReplayRefused for a single stream whose chain is invalid; for a prefix the
    invalid ones are listed in the report's `refused`.
    """
    streams = matching_streams(target)
    report = RebuildReport()
    for stream in streams:
        family = registry.family_for(stream)
        if family is None or family.projector is None:
            verification = verify(stream)
            if not verification.ok:
                report.refused.append(verification)
            else:
                report.checked += 1
            continue
        part = rebuild(family.projector, [stream], dry_run=dry_run)
        report.checked += part.checked
        report.drift += part.drift
        report.refused += part.refused
    if len(streams) == 1 and streams[0] == target and report.refused:
        bad = report.refused[0]
        raise ReplayRefused(target, bad.reason or "invalid", bad.index)
    return report
