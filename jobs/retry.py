"""Retrying failed jobs: an operator returns a failed job (a canceled one when asked) to
the queue with a fresh budget of attempts and a new delivery; one job, or every job a
filter matches.

The one code path behind the admin (the job page and the bulk action), the API and
`manage.py jobs retry`. A retry is a `job.retried` receipt with `by` (`queue.retry`)
and a driver delivery under its own key (`dispatch.retry_key`), committed together.

A bulk retry walks the matching jobs in keyset order over `(status, updated_at, id)`,
the `job_status_updated` index, one batch per short transaction: it counts nothing, and
no lock outlives its batch. It takes only jobs that settled before it began, so a job it
retried that fails again meanwhile is not retried twice. Knows nothing of HTTP.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet

from jobs import queue, selectors
from jobs.core.state import JobState
from jobs.core.vocabulary import RETRYABLE_STATUSES
from jobs.errors import InvalidRequest, JobNotFound, JobNotRetryable
from jobs.models import Job
from jobs.presenters import job_json
from jobs.runtime import dispatch
from jobs.validation import MAX_BY, check_text
from observability.logs import log_event
from receipts.clock import now_ms as wall_clock_ms

logger = logging.getLogger("receipt.retry")
BATCH = 200  # jobs a batch transaction retries: a short lock, even on SQLite
MAX_REASON = 2000
SKIPPED_SHOWN = 20  # skipped jobs a report names (the counts cover them all)
_RELATIVE = re.compile(r"(\d{1,6})([smhd])")
_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class Retried:
    job: JobState  # queued again, its `retries` counting this one
    started: dispatch.StartResult  # the driver delivery opened for it

    def to_wire(self) -> dict[str, Any]:
        """The answer of the API and the CLI."""
        return {
            "ok": True,
            "job": job_json(self.job),
            "retry": self.job.retries,
            "delivery": self.started.promise_id,
        }


def retry_job(
    job_id: str,
    *,
    by: str,
    include_canceled: bool = False,
    reason: str | None = None,
) -> Retried:
    """Retry one job now, on record as `by`. Raises JobNotFound, JobNotRetryable (409,
    nothing written) or InvalidRequest."""
    now = wall_clock_ms()
    with transaction.atomic():
        written = queue.retry(
            job_id, by=by, include_canceled=include_canceled, reason=reason, now_ms=now
        )
        if written.job is None:
            raise JobNotFound(job_id)
        if written.refusal is not None:
            job = written.job
            raise JobNotRetryable(
                job_id, job.status, written.refusal, objective_id=job.objective_id
            )
        started = _deliver(written.job, now)
    log_event(
        logger,
        "jobs.retried",
        f"{job_id} retried by {by}",
        jobId=job_id,
        by=by,
        retry=written.job.retries,
        promiseId=started.promise_id,
    )
    return Retried(written.job, started)


def _deliver(job: JobState, now: int) -> dispatch.StartResult:
    return dispatch.start_driver(
        job, dispatch_key=dispatch.retry_key(job), now_ms=now, savepoint=False
    )


# ---- many jobs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    """Where a bulk retry stands: the status it walks, the last job it took (by settled
    time and id), and the moment it began (it takes jobs settled before it only)."""

    status: str
    updated_at: int | None
    job_id: str | None
    began_at: int

    def encode(self) -> str:
        settled = "" if self.updated_at is None else str(self.updated_at)
        raw = f"{self.status}:{self.began_at}:{settled}:{self.job_id or ''}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, cursor: str, statuses: Sequence[str]) -> Position:
        try:
            padded = cursor + "=" * (-len(cursor) % 4)
            text = base64.urlsafe_b64decode(padded.encode()).decode()
            status, began_at, settled, job_id = text.split(":", 3)
            position = cls(status, int(settled) if settled else None, job_id or None, int(began_at))
        except (ValueError, UnicodeDecodeError, binascii.Error):
            raise InvalidRequest("invalid_cursor", "cursor is not one this API returned") from None
        if status not in statuses:
            raise InvalidRequest(
                "invalid_cursor",
                "cursor belongs to a retry of other statuses; send the same filter",
            )
        return position


@dataclass
class BulkReport:
    """What a bulk retry did: jobs retried, jobs skipped by reason (a refusal code of
    `bodies.retry_refusal`, or `missing`), the first few skipped, batches (each its own
    transaction), failed batches, and where to go on (None: every match was taken)."""

    retried: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_jobs: list[tuple[str, str]] = field(default_factory=list)
    batches: int = 0
    errors: list[str] = field(default_factory=list)
    next_cursor: str | None = None

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def skip(self, job_id: str, refusal: str) -> None:
        self.skipped[refusal] = self.skipped.get(refusal, 0) + 1
        if len(self.skipped_jobs) < SKIPPED_SHOWN:
            self.skipped_jobs.append((job_id, refusal))

    def to_wire(self) -> dict[str, Any]:
        return {
            "retried": self.retried,
            "skipped": self.skipped_total,
            "skippedBy": dict(sorted(self.skipped.items())),
            "skippedJobs": [{"jobId": i, "refusal": r} for i, r in self.skipped_jobs],
            "batches": self.batches,
            "errors": self.errors,
            "nextCursor": self.next_cursor,
        }

    def describe(self) -> str:
        """One sentence for the operator."""
        text = f"Retried {self.retried} job(s) in {self.batches} batch(es)"
        if self.skipped:
            why = ", ".join(f"{n} {code}" for code, n in sorted(self.skipped.items()))
            text += f"; skipped {self.skipped_total} ({why})"
        if self.errors:
            text += f"; {len(self.errors)} batch(es) failed and were rolled back"
        return text + "."


def retry_matching(
    rows: QuerySet[Job],
    *,
    by: str,
    statuses: Sequence[str] = ("failed",),
    reason: str | None = None,
    limit: int | None = None,
    batch_size: int = BATCH,
    cursor: str | None = None,
    on_batch: Callable[[BulkReport], None] | None = None,
) -> BulkReport:
    """Retry the jobs of `rows` whose status is one of `statuses`, a batch at a time.

    `rows` carries the filters (API and CLI: `matching`; the admin: its changelist's
    queryset). At most `limit` jobs are taken (retried or skipped) in this call; then
    `next_cursor` continues where it stopped. `on_batch` hears the report after each
    batch (the CLI prints progress).
    """
    _check(by, reason)
    walk: list[str] = list(dict.fromkeys(s for s in statuses if s in RETRYABLE_STATUSES))
    if not walk or len(walk) != len(set(statuses)):
        raise InvalidRequest(
            "invalid_status", f"status must be failed or canceled; got {', '.join(statuses)}"
        )
    began = wall_clock_ms()
    at = Position.decode(cursor, walk) if cursor else Position(walk[0], None, None, began)
    report = BulkReport()
    taken = 0
    for status in walk[walk.index(at.status) :]:
        after = (at.updated_at, at.job_id) if status == at.status else (None, None)
        while True:
            if limit is not None and taken >= limit:  # say where to go on
                report.next_cursor = Position(status, *after, at.began_at).encode()
                break
            size = batch_size if limit is None else min(batch_size, limit - taken)
            page = _page(rows, status, before=at.began_at, after=after, size=size)
            if page:
                _retry_batch(
                    [job_id for job_id, _ in page],
                    report,
                    by=by,
                    include_canceled=status == "canceled",
                    reason=reason,
                )
                taken += len(page)
                after = (page[-1][1], page[-1][0])
                if on_batch is not None:
                    on_batch(report)
            if len(page) < size:
                break  # every job of this status was taken
        if report.next_cursor is not None:
            break
    return _logged(report, by=by)


def retry_ids(
    job_ids: Sequence[str],
    *,
    by: str,
    include_canceled: bool = False,
    reason: str | None = None,
    visible: Callable[[str | None], bool] | None = None,
) -> BulkReport:
    """Retry the jobs named, a batch per transaction; each one retried or skipped with its
    refusal. `visible(organization_id)`: the caller may see the job (an organization-bound
    token); a job it may not see is skipped as `missing`, exactly like an unknown id."""
    _check(by, reason)
    report = BulkReport()
    ids = list(dict.fromkeys(job_ids))
    for start in range(0, len(ids), BATCH):
        part = ids[start : start + BATCH]
        if visible is not None:
            owners = dict(Job.objects.filter(pk__in=part).values_list("id", "organization_id"))
            for job_id in [i for i in part if i not in owners or not visible(owners[i])]:
                report.skip(job_id, "missing")
            part = [i for i in part if i in owners and visible(owners[i])]
        if part:
            _retry_batch(part, report, by=by, include_canceled=include_canceled, reason=reason)
    return _logged(report, by=by)


def _logged(report: BulkReport, *, by: str) -> BulkReport:
    log_event(
        logger,
        "jobs.bulk_retried",
        f"{by}: {report.describe()}",
        by=by,
        retried=report.retried,
        skipped=report.skipped_total,
        batches=report.batches,
        errors=len(report.errors),
    )
    return report


def _check(by: str, reason: str | None) -> None:
    """Refuse bad input before the first batch: inside one it would fail the batch."""
    check_text("invalid_by", "by", by, MAX_BY, required=True)
    check_text("invalid_reason", "reason", reason, MAX_REASON, required=False)


def _page(
    rows: QuerySet[Job],
    status: str,
    *,
    before: int,
    after: tuple[int | None, str | None],
    size: int,
) -> list[tuple[str, int]]:
    """The next `size` (id, updated_at) of `rows` in `status`, settled before `before`,
    past `after`: a range of the `(status, updated_at)` index from the cursor on."""
    page = rows.filter(status=status, updated_at__lt=before)
    settled, job_id = after
    if settled is not None and job_id is not None:
        # `updated_at >= settled` is implied by the OR, but only it starts the index scan
        # at the cursor instead of at the oldest failure
        page = page.filter(updated_at__gte=settled).filter(
            Q(updated_at__gt=settled) | Q(updated_at=settled, id__gt=job_id)
        )
    return list(page.order_by("updated_at", "id").values_list("id", "updated_at")[:size])


def _retry_batch(
    job_ids: list[str],
    report: BulkReport,
    *,
    by: str,
    include_canceled: bool,
    reason: str | None,
) -> None:
    """One transaction: each job's receipt and delivery, or its refusal. A batch that
    fails is rolled back whole, logged, and passed over."""
    now = wall_clock_ms()
    retried: list[str] = []
    refused: list[tuple[str, str]] = []
    report.batches += 1
    try:
        with transaction.atomic():
            for job_id in job_ids:
                written = queue.retry(
                    job_id, by=by, include_canceled=include_canceled, reason=reason, now_ms=now
                )
                if written.job is not None and written.refusal is None:
                    _deliver(written.job, now)
                    retried.append(job_id)
                else:
                    refused.append((job_id, written.refusal or "missing"))
    except Exception as error:  # per batch: none of it was retried; carry on with the next
        report.errors.append(f"batch from {job_ids[0]}: {type(error).__name__}: {error}")
        log_event(
            logger,
            "jobs.retry_batch_failed",
            f"a retry batch from {job_ids[0]} failed: {type(error).__name__}: {error}",
            level=logging.WARNING,
            firstJobId=job_ids[0],
        )
        return
    report.retried += len(retried)
    for job_id, refusal in refused:
        report.skip(job_id, refusal)


# ---- the filter of the API and the CLI --------------------------------------------------------


def matching(
    filters: dict[str, Any],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    organization_id: str | None = None,
) -> QuerySet[Job]:
    """Jobs of `filters` (the `selectors.filtered` names, without status) that settled in
    [since, until); an organization-bound caller's own only."""
    rows = selectors.filtered(filters, organization_id=organization_id)
    if since_ms is not None:
        rows = rows.filter(updated_at__gte=since_ms)
    if until_ms is not None:
        rows = rows.filter(updated_at__lt=until_ms)
    return rows


def parse_moment(raw: Any, *, name: str, now_ms: int) -> int | None:
    """A moment given by a person or a client: ms since the epoch (an integer), an
    ISO 8601 time (UTC when it names no zone), or a span back from now (`90s`, `30m`,
    `2h`, `7d`). None when absent; InvalidRequest `invalid_<name>` otherwise."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        if 0 <= raw < 2**53:
            return raw
    elif isinstance(raw, str):
        text = raw.strip()
        relative = _RELATIVE.fullmatch(text)
        if relative:
            return now_ms - int(relative.group(1)) * _UNIT_MS[relative.group(2)]
        if text.isdigit() and len(text) <= 16:
            return int(text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return int(moment.timestamp() * 1000)
    raise InvalidRequest(
        f"invalid_{name}",
        f"{name} must be ms since the epoch, an ISO 8601 time or a span back from now "
        f"such as 30m, 2h or 7d; got {str(raw)[:40]!r}",
    )
