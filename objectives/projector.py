"""The objective summary projector (O-1, S-5): folds new receipts of
`factory/objectives/<id>` onto its summary row inside the append transaction."""

from __future__ import annotations

from typing import Any

from objectives.core.board import section_for, task_counts
from objectives.core.reducer import reduce
from objectives.core.state import ObjectiveState, objective_from_wire, objective_to_wire
from objectives.core.vocabulary import (
    OBJECTIVE_STREAM_PREFIX,
    RUN_STREAM_PREFIX,
    objective_id_from_stream,
)
from objectives.models import ObjectiveSummary
from receipts import registry
from receipts.core.chain import Receipt
from receipts.projection import RowProjector, stored_state

CACHE_KEY = "objective"


def row_for(state: ObjectiveState) -> dict[str, Any]:
    """Every column of the summary row, derived from the fold alone."""
    return {
        "id": state.objective_id,
        "title": state.title[:300],
        "status": state.status,
        "phase": state.phase,
        "mode": state.mode,
        "severity": state.severity,
        "section": section_for(state),
        "archived": state.archived,
        # the watchdog's and the resume pass's scan: everything but settled-and-audited
        "active": not (state.is_terminal and state.audit.status == "recorded"),
        "organization_id": state.organization_id,
        "task_counts": task_counts(state),  # the board adds queued jobs (board.with_queued)
        "slot_held": state.slot_held,
        "control_outbox_pending": bool(state.unenqueued_requests),
        "control_request_pending": bool(state.pending_requests),
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "receipt_count": state.receipt_count,
        "head": state.head,
        "state": objective_to_wire(state),
    }


PROJECTOR = RowProjector(
    name="objectives",
    model=ObjectiveSummary,
    cache_key=CACHE_KEY,
    noun="an objective",
    id_from_stream=objective_id_from_stream,
    reduce=reduce,
    row_for=row_for,
    load_state=stored_state(ObjectiveSummary, objective_from_wire),
)


def _run_reducer(state: dict[str, Any] | None, receipt: Receipt) -> dict[str, Any]:
    """The fold of a factory run stream (O-12): what started, what it produced."""
    out = dict(state or {"runId": None, "status": None, "events": 0})
    body = receipt.body
    out["events"] += 1
    out["runId"] = body.get("runId", out["runId"])
    if receipt.type == "run.started":
        out.update(status="started", jobId=body.get("jobId"), startedAt=receipt.ts)
    elif receipt.type == "run.completed":
        out.update(status="completed", objectiveId=body.get("objectiveId"), completedAt=receipt.ts)
    return out


def register() -> None:
    PROJECTOR.register(OBJECTIVE_STREAM_PREFIX, "objective", objective_to_wire)
    registry.register(
        registry.StreamFamily(prefix=RUN_STREAM_PREFIX, label="factory run", reducer=_run_reducer)
    )
