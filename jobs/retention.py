"""Retention of settled job streams: `prune` (the loop and `receipts prune` share it).

A settled job stream past its family's window (jobs.core.retention) is removed with its
read-model row, delivery promises and callback rows; counters are left alone. Each
batch is one short transaction: the candidates' stream rows are locked (FOR UPDATE SKIP
LOCKED on PostgreSQL, so a stream being appended to, or claimed by a concurrent prune,
is passed over; SQLite has one writer anyway), re-checked under the lock, verified,
removed, and committed to by a receipt on `retention/jobs` with their tombstones
(receipts.retention). Candidates come from one indexed scan per (family, status) in
(updated_at, id) order with a keyset cursor, so a pass always moves forward and never
rereads what it passed over. Active jobs are never candidates; apps add reasons to keep
a settled job in `holds` (objectives: its objective is not settled).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import CharField, Exists, OuterRef, Q, Value
from django.db.models.functions import Collate, Concat

from jobs.core import flat_wire
from jobs.core.diagnosis import utc_text
from jobs.core.retention import Lane, Windows, lanes
from jobs.core.vocabulary import (
    JOB_STREAM_PREFIX,
    TERMINAL_STATUSES,
    job_stream,
    validate_job_id,
)
from jobs.models import Callback, DeliveryPromise, Job
from jobs.runtime import counters, faults
from jobs.runtime.loops import Report
from observability.logs import log_event
from receipts import retention as receipt_retention
from receipts import store
from receipts.core.chain import StreamRecord
from receipts.core.retention import Tombstone, covers, fill
from receipts.models import Stream as StreamRow

logger = logging.getLogger("receipt.retention")

RETENTION_STREAM = "retention/jobs"
BATCH_STREAMS = 500  # streams per transaction
BATCH_RECEIPTS = 50_000  # receipts per transaction (one longer stream still goes alone)
_sleep = time.sleep  # the pause between batches (a test replaces only this one)
PASS_BATCHES = 10  # the loop's bounded batch-set per pass; the command runs to the end
INTERVAL_MS = 3_600_000
LOOP_ACTOR = "retention-loop"
FAULT_PAUSE_S = 3.0  # after each batch, with RECEIPT_FAULTS=retention_batch

# Reasons to keep a settled job: each returns a condition on a Job row (OuterRef names its
# columns) that holds while the job must stay. Registered by apps in ready().
holds: list[Callable[[], Exists]] = []


@dataclass
class PruneReport:
    name: str = "retention"
    dry_run: bool = False
    windows_days: dict[str, int] = field(default_factory=dict)
    examined: int = 0  # candidates scanned
    acted: int = 0  # streams pruned (or, in a dry run, that would be)
    receipts: int = 0
    batches: int = 0
    skipped: int = 0  # locked by a writer or another prune, changed, or not verifying
    by_family: dict[str, int] = field(default_factory=dict)
    complete: bool = True  # False when max_batches stopped it with candidates left
    errors: list[str] = field(default_factory=list)

    def to_wire(self) -> dict[str, Any]:
        """Each field in camelCase and in order, `acted` as `pruned`, the family for the name."""
        wire = flat_wire.to_wire(self)
        del wire["name"]
        return {"family": "jobs", **{"pruned" if k == "acted" else k: v for k, v in wire.items()}}

    def describe(self) -> str:
        verb = "would prune" if self.dry_run else "pruned"
        families = ", ".join(f"{k} {v}" for k, v in sorted(self.by_family.items())) or "none"
        return (
            f"jobs: {verb} {self.acted} stream(s), {self.receipts} receipt(s) in "
            f"{self.batches} batch(es) ({families}); {self.skipped} skipped"
            f"{'' if self.complete else '; more remain'}"
        )


def prune(
    *,
    now_ms: int,
    dry_run: bool = False,
    older_than_days: int | None = None,
    max_batches: int | None = None,
    by: str = LOOP_ACTOR,
    batch_streams: int = BATCH_STREAMS,
    batch_receipts: int = BATCH_RECEIPTS,
    windows: Windows | None = None,
    pause_s: float = 0.0,
) -> PruneReport:
    """Remove settled job streams past their windows, in batches (all of them unless
    `max_batches`); `dry_run` counts what would go and writes nothing. `pause_s` between
    batches leaves the database to other work during a large prune (no transaction is
    open then): batches are CPU-bound, so the pause, not the process's priority, is what
    gives enqueues their rate back."""
    config = settings.RECEIPT
    windows = windows or Windows(
        default_days=config.retention_days,
        watchdog_days=config.retention_watchdog_days,
        control_days=config.retention_control_days,
    )
    windows = windows.overridden(older_than_days)
    report = PruneReport(dry_run=dry_run, windows_days=windows.as_dict())
    for lane in lanes(windows, now_ms=now_ms):
        after: tuple[int, str] | None = None
        while True:
            if max_batches is not None and report.batches >= max_batches:
                report.complete = False
                return report
            rows = _candidates(lane, after, batch_streams)
            if not rows:
                break
            report.examined += len(rows)
            if dry_run:
                taken = _count(rows, lane, report, batch_receipts)
            else:
                taken = _prune_batch(
                    rows, lane, report, now_ms=now_ms, by=by, batch_receipts=batch_receipts
                )
            report.batches += 1
            faults.pause("retention_batch", FAULT_PAUSE_S)  # C-3: a long pass, for tests
            after = (rows[taken - 1][1], rows[taken - 1][0])
            if pause_s and not dry_run:
                _sleep(pause_s)
            if len(rows) < batch_streams and taken == len(rows):
                break
    return report


def prune_pass(*, now_ms: int) -> Report:
    """The loop (L-6): one bounded batch-set per pass; the next pass carries on."""
    config = settings.RECEIPT
    if not config.retention_enabled:
        return Report("retention")
    pruned = prune(now_ms=now_ms, max_batches=PASS_BATCHES)
    return Report("retention", examined=pruned.examined, acted=pruned.acted, errors=pruned.errors)


def _callbacks_pending() -> Exists:
    """A callback still being delivered keeps its job (the row would go with it)."""
    return Exists(Callback.objects.filter(job_id=OuterRef("id"), state="pending"))


_FIELDS = ("id", "updated_at", "status", "organization_id", "agent_id", "kind")


def _candidates(lane: Lane, after: tuple[int, str] | None, limit: int) -> list[tuple[Any, ...]]:
    """Settled jobs of one lane before its cutoff, oldest first after the cursor: the
    (status, updated_at) index in order; kept jobs are filtered in the same query so they
    never fill a batch."""
    rows = Job.objects.filter(status=lane.status, updated_at__lt=lane.cutoff_ms)
    if lane.kinds is not None:
        rows = rows.filter(kind__in=lane.kinds)
    elif lane.excluded_kinds:
        rows = rows.exclude(kind__in=lane.excluded_kinds)
    for hold in (_callbacks_pending, *holds):
        rows = rows.filter(~hold())
    if after is not None:  # the >= bounds the index scan; the OR alone would be a filter
        rows = rows.filter(updated_at__gte=after[0]).filter(
            Q(updated_at__gt=after[0]) | Q(updated_at=after[0], id__gt=after[1])
        )
    return list(rows.order_by("updated_at", "id").values_list(*_FIELDS)[:limit])


def _count(
    rows: list[tuple[Any, ...]], lane: Lane, report: PruneReport, batch_receipts: int
) -> int:
    counts = dict(
        StreamRow.objects.filter(name__in=[job_stream(r[0]) for r in rows]).values_list(
            "name", "receipt_count"
        )
    )
    sizes = [counts.get(job_stream(r[0]), 0) for r in rows]
    taken = fill(sizes, max_streams=len(rows), max_receipts=batch_receipts)
    report.acted += taken
    report.receipts += sum(sizes[:taken])
    report.by_family[lane.family] = report.by_family.get(lane.family, 0) + taken
    return taken


def _prune_batch(
    rows: list[tuple[Any, ...]],
    lane: Lane,
    report: PruneReport,
    *,
    now_ms: int,
    by: str,
    batch_receipts: int,
) -> int:
    """One transaction; returns how many of `rows` the batch covered (the cursor moves
    past them, pruned or skipped)."""
    try:
        with transaction.atomic():
            return _remove(rows, lane, report, now_ms=now_ms, by=by, batch_receipts=batch_receipts)
    except Exception as error:  # per batch: log it, move past it, carry on
        report.errors.append(f"batch after {rows[0][0]}: {error}")
        log_event(
            logger,
            "retention.batch_failed",
            f"a retention batch failed: {error}",
            level=logging.WARNING,
            firstJobId=rows[0][0],
            exc_info=True,
        )
        return len(rows)


def _remove(
    rows: list[tuple[Any, ...]],
    lane: Lane,
    report: PruneReport,
    *,
    now_ms: int,
    by: str,
    batch_receipts: int,
) -> int:
    names = [job_stream(r[0]) for r in rows]
    # Lock the stream rows: appends to a job take the same lock, so a locked job cannot
    # change under us; one held by a writer or another prune is skipped, not waited for.
    locked = {
        name: StreamRecord(head, count, last_ts)
        for name, head, count, last_ts in StreamRow.objects.select_for_update(skip_locked=True)
        .filter(name__in=names)
        .values_list("name", "head", "receipt_count", "last_ts")
    }
    taken = fill(
        [locked[n].count if n in locked else 0 for n in names],
        max_streams=len(names),
        max_receipts=batch_receipts,
    )
    rows, names = rows[:taken], names[:taken]
    # Re-read under the lock: a receipt may have landed between the scan and the lock.
    still = set(
        Job.objects.filter(
            id__in=[r[0] for r in rows], status__in=TERMINAL_STATUSES, updated_at__lt=lane.cutoff_ms
        ).values_list("id", flat=True)
    )
    chosen = [(r, n) for r, n in zip(rows, names, strict=True) if n in locked and r[0] in still]
    # the chains against their locked rows: the comparison `receipts verify` makes
    verified = store.verify_many([n for _, n in chosen], rows=locked)
    tombstones: list[Tombstone] = []
    for row, name in chosen:
        head, count = locked[name].head, locked[name].count
        check = verified[name]
        if not check.ok or head is None:
            # never erase the evidence of a broken chain: it stays for an operator
            report.errors.append(
                f"{name}: not pruned, its chain does not verify ({check.describe()})"
            )
            continue
        _, updated_at, status, organization_id, agent_id, kind = row
        tombstones.append(
            Tombstone(
                stream=name,
                family=lane.family,
                receipt_count=count,
                head=head,
                final_status=status,
                settled_at_ms=updated_at,
                pruned_at_ms=now_ms,
                organization_id=organization_id,
                agent_id=agent_id,
                kind=kind,
            )
        )
    report.skipped += taken - len(tombstones)
    if not tombstones:
        return taken
    gone_jobs = [t.stream[len(JOB_STREAM_PREFIX) :] for t in tombstones]
    Job.objects.filter(id__in=gone_jobs).delete()
    for model in (DeliveryPromise, Callback):
        model.objects.filter(job_id__in=gone_jobs).delete()
    store.remove_streams(
        tombstones,
        retention_stream=RETENTION_STREAM,
        windows_days=report.windows_days,
        now_ms=now_ms,
        by=by,
    )
    pruned = sum(t.receipt_count for t in tombstones)
    report.acted += len(tombstones)
    report.receipts += pruned
    report.by_family[lane.family] = report.by_family.get(lane.family, 0) + len(tombstones)
    counters.incr("receipt_streams_pruned_total", len(tombstones), family=lane.family)
    log_event(
        logger,
        "retention.pruned",
        f"pruned {len(tombstones)} job stream(s)",
        family=lane.family,
        streams=len(tombstones),
        receipts=pruned,
    )
    return taken


# ---- verify: rows that name a job stream that is gone ---------------------------------------


def _stream_of(column: str) -> Concat | Collate:
    name = Concat(Value(JOB_STREAM_PREFIX), OuterRef(column), output_field=CharField())
    # Stream names compare byte by byte on PostgreSQL (receipts.models.NameField): the
    # job id's own collation would conflict with theirs.
    return Collate(name, "C") if connection.vendor == "postgresql" else name


def check(prefix: str) -> list[receipt_retention.Issue]:
    """Registered with receipts.retention.checks: a job read-model row whose stream is
    gone, and (verifying all of `jobs/`) delivery or callback rows of a job whose stream
    is gone with no tombstone: a stream removed by anything but retention."""
    if not covers(prefix, JOB_STREAM_PREFIX):
        return []
    id_prefix = prefix[len(JOB_STREAM_PREFIX) :] if prefix.startswith(JOB_STREAM_PREFIX) else ""
    limit = receipt_retention.ISSUE_LIMIT
    no_stream = ~Exists(StreamRow.objects.filter(name=_stream_of("id")))
    orphans = list(
        Job.objects.filter(id__startswith=id_prefix)
        .filter(no_stream)
        .values_list("id", flat=True)[:limit]
    )
    pruned = receipt_retention.tombstoned([job_stream(i) for i in orphans])
    issues = [
        receipt_retention.Issue(
            job_stream(i),
            "read-model row of a pruned stream"
            if job_stream(i) in pruned
            else "stream missing with no tombstone (its read-model row remains)",
        )
        for i in orphans
    ]
    named: set[str] = set()
    if not id_prefix:  # the delivery tables have no index for an id prefix: a whole verify only
        no_job_stream = ~Exists(StreamRow.objects.filter(name=_stream_of("job_id")))
        for model in (DeliveryPromise, Callback):
            rows = model.objects.filter(no_job_stream).values_list("job_id", flat=True)
            named |= set(rows.distinct()[:limit])
    named -= set(orphans)
    for name in receipt_retention.missing(sorted(job_stream(i) for i in named)):
        issues.append(
            receipt_retention.Issue(
                name, "stream missing with no tombstone (delivery or callback rows name it)"
            )
        )
    return issues


# ---- reads of a pruned job (the API's 410, the admin's pruned page) ---------------------------

PRUNED_CODE = "job_pruned"


def pruned(job_id: str, *, may_see: Callable[[str | None], bool]) -> Tombstone | None:
    """The tombstone of a pruned job when the caller may see its organization (Q-2: one
    of another organization is not found, like its job was). An id that could never name
    a job has none, and never reaches a query."""
    try:
        validate_job_id(job_id)
    except (ValueError, TypeError):
        return None
    tombstone = receipt_retention.tombstone_of(job_stream(job_id))
    return tombstone if tombstone is not None and may_see(tombstone.organization_id) else None


def pruned_wire(job_id: str, tombstone: Tombstone) -> dict[str, Any]:
    """The 410 body: the error shape of every API error, plus the tombstone."""
    return {
        "ok": False,
        "error": PRUNED_CODE,
        "detail": describe_pruned(job_id, tombstone),
        "tombstone": {"jobId": job_id, **tombstone.to_wire(), "retentionStream": RETENTION_STREAM},
    }


def describe_pruned(job_id: str, tombstone: Tombstone) -> str:
    return (
        f"job {job_id} was pruned on {utc_text(tombstone.pruned_at_ms)} after "
        f"{tombstone.receipt_count} receipts, head hash {tombstone.head}, final status "
        f"{tombstone.final_status}"
    )
