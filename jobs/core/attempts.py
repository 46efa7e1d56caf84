"""A job's attempts as its receipts tell them: who ran each one, when it began and ended,
and how it ended. The fold (`JobState`) keeps only the latest attempt; a task result
(`jobs.tasks`) shows every one.

Pure: it replays the receipts through the job fold (`jobs.core.reducer.reduce`), so the
fold's fencing rules decide what counts (a superseded attempt's late write is inert here
too). An attempt begins with the lease that raises the job's attempt number and ends
with the receipt that takes the lease away (settlement, requeue, expiry, release).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from jobs.core.reducer import reduce
from jobs.core.state import JobState
from jobs.core.vocabulary import JOB_CANCELED, JOB_COMPLETED, JOB_LEASE_EXPIRED
from receipts.core.chain import Receipt


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One attempt: `ended_by` is the receipt type that ended it (None while it runs);
    `error` the fold's error text or cancel reason it ended with; `detail` the `result`
    its `job.failed` body carried (what the handler left about its failure), else None."""

    attempt: int
    worker_id: str
    started_at: int
    ended_at: int | None = None
    ended_by: str | None = None
    error: str | None = None
    detail: Any = None


@dataclass(frozen=True, slots=True)
class History:
    """The job after the receipts (None if they hold no job), its attempts in order, and
    the ts of the receipt that settled it (None while it is active)."""

    job: JobState | None
    attempts: tuple[Attempt, ...]
    settled_at: int | None


def attempt_history(receipts: Iterable[Receipt]) -> History:
    state: JobState | None = None
    attempts: list[Attempt] = []
    settled_at: int | None = None
    for receipt in receipts:
        before = state
        state = reduce(state, receipt)
        if state is None or before is None:
            continue
        if state.attempt > before.attempt and state.worker_id is not None:
            attempts.append(
                Attempt(attempt=state.attempt, worker_id=state.worker_id, started_at=receipt.ts)
            )
        elif before.holds_lease and not state.holds_lease and attempts:
            attempts[-1] = _ended(attempts[-1], state, receipt)
        if state.is_terminal and not before.is_terminal:
            settled_at = receipt.ts
    return History(state, tuple(attempts), settled_at)


def _ended(attempt: Attempt, state: JobState, receipt: Receipt) -> Attempt:
    kind = receipt.type
    if kind == JOB_COMPLETED:
        error = None
    elif kind == JOB_CANCELED:
        error = state.cancel_reason
    else:
        error = state.last_error
        reason = receipt.body.get("reason")  # a release names the gone holder
        if kind == JOB_LEASE_EXPIRED and isinstance(reason, str):
            error = f"{error}: {reason}"
    return replace(
        attempt,
        ended_at=receipt.ts,
        ended_by=kind,
        error=error,
        detail=receipt.body.get("result") if kind != JOB_COMPLETED else None,
    )
