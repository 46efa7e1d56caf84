"""The fold of a queue's stream `queues/<group>`: whether the worker group is paused,
by whom and since when. Pure: the shell (`jobs.queues`) appends, the projector keeps
one `jobs_queue` row per group that was ever paused."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final

from jobs.core import flat_wire
from jobs.core.groups import is_group_name
from receipts.core.chain import Receipt

STREAM_PREFIX: Final = "queues/"
PAUSED: Final = "queue.paused"
RESUMED: Final = "queue.resumed"


@dataclass(frozen=True)
class QueueState:
    group: str
    paused: bool
    paused_by: str | None
    paused_at: int | None  # ms since epoch
    resumed_by: str | None
    resumed_at: int | None
    updated_at: int
    receipt_count: int
    head: str


def stream_of(group: str) -> str:
    return STREAM_PREFIX + group


def group_from_stream(stream: str) -> str | None:
    if not stream.startswith(STREAM_PREFIX):
        return None
    group = stream[len(STREAM_PREFIX) :]
    return group if is_group_name(group) else None


def reduce(state: QueueState | None, receipt: Receipt) -> QueueState | None:
    body = receipt.body
    if receipt.type not in (PAUSED, RESUMED):
        return state
    if state is None:
        state = QueueState(body["group"], False, None, None, None, None, receipt.ts, 0, "")
    if receipt.type == PAUSED:
        state = replace(state, paused=True, paused_by=body.get("by"), paused_at=receipt.ts)
    else:
        state = replace(state, paused=False, resumed_by=body.get("by"), resumed_at=receipt.ts)
    return replace(
        state, updated_at=receipt.ts, receipt_count=state.receipt_count + 1, head=receipt.hash
    )


def to_wire(state: QueueState) -> dict[str, Any]:
    return flat_wire.to_wire(state)


def from_wire(wire: dict[str, Any]) -> QueueState:
    return flat_wire.from_wire(QueueState, wire)
