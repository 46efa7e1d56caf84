"""The schedules read-model projector: folds new receipts of `schedules/<name>` onto the
schedule's row inside the append transaction. Nothing else writes `jobs_schedule`."""

from __future__ import annotations

from typing import Any

from jobs.core import schedule_state
from jobs.core.schedule_state import ScheduleState
from jobs.core.schedules import STREAM_PREFIX, name_from_stream, trigger_text
from jobs.models import Schedule
from receipts.projection import RowProjector, stored_state

CACHE_KEY = "schedule"  # StreamHandle.cache slot: the schedule's state as of the stream head


def row_for(state: ScheduleState) -> dict[str, Any]:
    """Every column of the schedule row, derived from the fold alone."""
    definition = state.definition
    payload = definition.get("payload") or {}
    auth = payload.get("authContext")
    organization = auth.get("organizationId") if isinstance(auth, dict) else None
    kind = payload.get("kind")
    return {
        "name": state.name,
        "agent_id": definition.get("agentId", "")[:128],
        "kind": kind[:64] if isinstance(kind, str) else None,
        "trigger": trigger_text(definition)[:200],
        "status": state.status,
        "organization_id": organization if isinstance(organization, str) else None,
        "next_run_at": state.next_run_at,
        "last_run_at": state.last_run_at,
        "last_job_id": state.last_job_id,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "receipt_count": state.receipt_count,
        "head": state.head,
        "state": schedule_state.to_wire(state),
    }


load_state = stored_state(Schedule, schedule_state.from_wire)
PROJECTOR = RowProjector(
    name="schedules",
    model=Schedule,
    cache_key=CACHE_KEY,
    noun="a schedule",
    id_from_stream=name_from_stream,
    reduce=schedule_state.reduce,
    row_for=row_for,
    load_state=load_state,
)


def register() -> None:
    PROJECTOR.register(STREAM_PREFIX, "schedule", schedule_state.to_wire)
