"""The objective watchdog's judgement (L-4): should this objective be reconciled, and why.

Three reasons, checked in this order:

- `phase_supersession_has_active_stale_job`: a job the objective dispatched for an
  earlier phase (or for an objective that is now blocked or settled) is still active
  and stale (silent for two of its own heartbeats, `objectives.core.facts`);
- `active_objective_work_stalled`: a job of the current phase is active and stale;
- `no_active_objective_work`: nothing is active at all (no control pass queued or
  running, no task, monitor, integration or audit job) although the objective still
  has something to do, and it has been quiet for `quiet_ms`.

"Something to do": an active objective, except one that waits for an operator to
promote it; or a settled one whose audit was never requested or was superseded.
Blocked objectives wait for an operator and are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from objectives.core.facts import DEFAULT_STALENESS, JobFact, Staleness, is_stale
from objectives.core.state import ObjectiveState

NO_ACTIVE_WORK: Final = "no_active_objective_work"
PHASE_SUPERSEDED_STALE: Final = "phase_supersession_has_active_stale_job"
WORK_STALLED: Final = "active_objective_work_stalled"
RECONCILE: Final = "reconcile"


def has_work_to_do(state: ObjectiveState) -> bool:
    if state.is_terminal:
        return state.audit.status in ("none", "superseded")
    if state.is_blocked:
        return False
    return not state.awaiting_promotion


def assess(
    state: ObjectiveState,
    active_jobs: Sequence[JobFact],
    now_ms: int,
    *,
    staleness: Staleness = DEFAULT_STALENESS,
    quiet_ms: int | None = None,
) -> str | None:
    """The reason to reconcile `state`, or None. `active_jobs`: its active jobs' facts."""
    quiet = staleness.live_ms if quiet_ms is None else quiet_ms
    stale = [f for f in active_jobs if f.is_active and is_stale(f, now_ms, staleness)]
    for fact in stale:
        ref = state.ref(fact.job_id)
        if ref is None or ref.phase is None:
            continue
        if state.is_terminal or state.is_blocked or ref.phase != state.phase:
            return PHASE_SUPERSEDED_STALE
    for fact in stale:
        ref = state.ref(fact.job_id)
        if ref is not None and ref.phase == state.phase:
            return WORK_STALLED
    if any(f.is_active for f in active_jobs) or not has_work_to_do(state):
        return None
    if now_ms - state.updated_at < quiet:
        return None
    return NO_ACTIVE_WORK
