"""What the control pass and the watchdog know about a job: a small, pure view of its fold.

Staleness (L-4): a leased or running job with live execution is stale once it has gone
`live_stale_ms` (90 s) without a heartbeat or progress receipt; sandboxed (`computer`)
execution only after `computer_stale_ms` (15 min). Queued jobs are never stale here:
getting them delivered is the queued redrive's business (L-1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

LIVE_STALE_MS: Final = 90_000
COMPUTER_STALE_MS: Final = 900_000
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
    abort_requested: bool = False
    execution_path: str | None = None
    task_id: str | None = None

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def is_terminal(self) -> bool:
        return not self.is_active


def is_stale(fact: JobFact, now_ms: int, *, live_stale_ms: int = LIVE_STALE_MS,
             computer_stale_ms: int = COMPUTER_STALE_MS) -> bool:
    if fact.status not in LEASED:
        return False
    limit = computer_stale_ms if fact.execution_path == "computer" else live_stale_ms
    return now_ms - fact.updated_at > limit
