"""Board sections of the objectives overview (A-9, U-5), derived from the fold alone.

- Archived: the archived flag, whatever the status.
- Needs Attention: blocked, failed, or waiting for an operator to promote it.
- Queued: planning or waiting for a repo slot.
- Completed: completed or canceled.
- Active: everything else that is running.

What a task is shown as (board counts, the graph, the task table, live status) is its
O-3 status with two corrections the fold alone cannot make:

- `queued`: the task is dispatched (`running` in the fold) but its job waits in the
  queue, not started by any worker yet (or requeued for a retry);
- `stopped`: the task was in flight when its objective settled (canceled or failed);
  nothing runs for a settled objective, and its status stays as history in the fold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from objectives.core.state import ObjectiveState, Task

SECTIONS: Final[tuple[tuple[str, str], ...]] = (
    ("needs_attention", "Needs Attention"),
    ("active", "Active"),
    ("queued", "Queued"),
    ("completed", "Completed"),
    ("archived", "Archived"),
)
SECTION_KEYS: Final = tuple(key for key, _ in SECTIONS)
# shown task statuses in the order of a task's life (O-3 plus `queued` and `stopped`)
SHOWN_ORDER: Final = (
    "pending",
    "ready",
    "queued",
    "running",
    "reviewing",
    "approved",
    "integrated",
    "blocked",
    "superseded",
    "stopped",
)


def section_for(state: ObjectiveState) -> str:
    if state.archived:
        return "archived"
    if state.status in ("blocked", "failed") or state.awaiting_promotion:
        return "needs_attention"
    if state.status in ("planning", "waiting_for_slot"):
        return "queued"
    if state.status in ("completed", "canceled"):
        return "completed"
    return "active"


def task_shown(task: Task, state: ObjectiveState, job_status: str | None = None) -> str:
    """What to call `task`; `job_status`: the status of its open run's job, if known."""
    if task.in_flight and state.is_terminal:
        return "stopped"
    if task.status == "running" and job_status == "queued":
        return "queued"
    return task.status


def task_counts(
    state: ObjectiveState, job_statuses: Mapping[str, str] | None = None
) -> dict[str, int]:
    """Tasks per shown status; `job_statuses`: job id -> status of the open runs' jobs."""
    known = job_statuses or {}
    counts: dict[str, int] = {}
    for task in state.tasks:
        run = task.open_run
        shown = task_shown(task, state, known.get(run.job_id) if run else None)
        counts[shown] = counts.get(shown, 0) + 1
    return ordered(counts)


def with_queued(counts: Mapping[str, int], queued: int) -> dict[str, int]:
    """A summary row's counts (the fold alone) with `queued` of its running tasks' jobs
    counted as queued: the board reads those from the jobs, not from the fold."""
    moved = min(queued, counts.get("running", 0))
    out = dict(counts)
    if moved:
        out["running"] -= moved
        out["queued"] = out.get("queued", 0) + moved
    return ordered(out)


def ordered(counts: Mapping[str, int]) -> dict[str, int]:
    """Non-zero counts in SHOWN_ORDER (a JSON column may not keep the order it was given)."""
    rank = {status: i for i, status in enumerate(SHOWN_ORDER)}
    return {
        k: counts[k] for k in sorted(counts, key=lambda k: (rank.get(k, len(rank)), k)) if counts[k]
    }
