"""What the control pass, the watchdog and the monitor know about a job: a small, pure
view of its fold, and when its silence means it is stale.

Staleness (L-4): a leased or running job is stale once it has been silent (no heartbeat,
progress or other receipt) for two of its own heartbeat beats plus a margin, and never
sooner than `live_stale_ms` (90 s); sandboxed (`computer`) execution never sooner than
`computer_stale_ms` (15 min). The beat is the worker's own formula (K-7) applied to the
job's lease, so a healthy job between two beats is never judged stale: a fixed 90 s would
condemn every job whose cadence is 100 s (300 s leases) or 200 s (codex leases). Queued
jobs are never stale here: getting them delivered is the queued redrive's business (L-1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from jobs.core.timing import TimingSettings, heartbeat_interval_ms

LIVE_STALE_MS: Final = 90_000
COMPUTER_STALE_MS: Final = 900_000
MISSED_BEATS: Final = 2
STALE_MARGIN_MS: Final = 30_000  # a beat's append, a slow database, clock skew between hosts
ACTIVE: Final = frozenset({"queued", "leased", "running"})
LEASED: Final = frozenset({"leased", "running"})


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFact:
    job_id: str
    status: str
    kind: str | None = None
    result: Any = None
    last_error: str | None = None
    attempt: int = 0
    created_at: int = 0
    updated_at: int = 0  # ts of the job's last receipt (heartbeat, progress ...)
    lease_until: int | None = None
    lease_ms: int | None = None  # the job's lease (K-6); None: the default lease
    abort_requested: bool = False
    aborted_by: str | None = None  # who sent the abort (or canceled it while queued)
    cancel_reason: str | None = None
    execution_path: str | None = None
    task_id: str | None = None

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def is_terminal(self) -> bool:
        return not self.is_active


@dataclass(frozen=True, slots=True, kw_only=True)
class Staleness:
    """The floors and the timing settings the workers beat with (production defaults)."""

    live_ms: int = LIVE_STALE_MS
    computer_ms: int = COMPUTER_STALE_MS
    timing: TimingSettings = field(default_factory=TimingSettings)


DEFAULT_STALENESS: Final = Staleness()


def stale_after_ms(fact: JobFact, staleness: Staleness = DEFAULT_STALENESS) -> int:
    """How long `fact`'s job may stay silent before it counts as stale."""
    timing = staleness.timing
    beat = heartbeat_interval_ms(fact.lease_ms or timing.job_lease_ms, timing)
    floor = staleness.computer_ms if fact.execution_path == "computer" else staleness.live_ms
    return max(floor, MISSED_BEATS * beat + STALE_MARGIN_MS)


def is_stale(fact: JobFact, now_ms: int, staleness: Staleness = DEFAULT_STALENESS) -> bool:
    if fact.status not in LEASED:
        return False
    return now_ms - fact.updated_at > stale_after_ms(fact, staleness)


def liveness(fact: JobFact, now_ms: int, staleness: Staleness = DEFAULT_STALENESS) -> str:
    """A monitor checkpoint's word for the task job (O-9): queued, alive, stale, settled."""
    if fact.is_terminal:
        return "settled"
    if fact.status == "queued":
        return "queued"
    return "stale" if is_stale(fact, now_ms, staleness) else "alive"
