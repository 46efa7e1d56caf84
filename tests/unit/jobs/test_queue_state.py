"""Issue 34 item 5: the fold of `queues/<group>`: who paused the group and when, cleared
by a resume; other receipt types change nothing; the wire form round-trips."""

from __future__ import annotations

from jobs.core import queue_state
from jobs.core.queue_state import PAUSED, RESUMED, group_from_stream
from receipts.core import chain
from receipts.core.chain import Receipt


def fold(receipts: list[Receipt]) -> queue_state.QueueState | None:
    return chain.fold(receipts, queue_state.reduce)


def receipt(kind: str, by: str, ts: int) -> Receipt:
    body = {"type": kind, "group": "emails", "by": by}
    return Receipt(f"r{ts}", ts, "queues/emails", None, body, f"h{ts}")


def test_pause_resume_and_pause_again():
    state = fold([receipt(PAUSED, "alice", 10)])
    assert state is not None and (state.paused, state.paused_by, state.paused_at) == (
        True,
        "alice",
        10,
    )
    state = fold([receipt(PAUSED, "alice", 10), receipt(RESUMED, "bob", 20)])
    assert state is not None and not state.paused
    assert (state.resumed_by, state.resumed_at, state.receipt_count, state.head) == (
        "bob",
        20,
        2,
        "h20",
    )
    again = queue_state.reduce(state, receipt(PAUSED, "carol", 30))
    assert again is not None and (again.paused_by, again.paused_at) == ("carol", 30)
    assert queue_state.from_wire(queue_state.to_wire(again)) == again


def test_other_types_fold_to_nothing_and_stream_names_are_groups():
    assert fold([receipt("queue.renamed", "x", 1)]) is None
    assert group_from_stream("queues/emails") == "emails"
    assert group_from_stream("queues/Not A Group") is None
    assert group_from_stream("schedules/emails") is None
