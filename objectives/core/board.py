"""Board sections of the objectives overview (A-9, U-5), derived from the fold alone.

- Archived: the archived flag, whatever the status.
- Needs Attention: blocked, failed, or waiting for an operator to promote it.
- Queued: planning or waiting for a repo slot.
- Completed: completed or canceled.
- Active: everything else that is running.
"""

from __future__ import annotations

from typing import Final

from objectives.core.state import ObjectiveState

SECTIONS: Final[tuple[tuple[str, str], ...]] = (
    ("needs_attention", "Needs Attention"),
    ("active", "Active"),
    ("queued", "Queued"),
    ("completed", "Completed"),
    ("archived", "Archived"),
)
SECTION_KEYS: Final = tuple(key for key, _ in SECTIONS)


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
