"""Delayed jobs (issue 33 item 3, G-3) and priorities (item 4, G-4) in the pure core: the
enqueued body, the fold, the wire form, the due rule, the take order and diagnosis."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from jobs.core import bodies
from jobs.core.diagnosis import Facts, diagnose, utc_text
from jobs.core.reducer import InvariantError, fold_job
from jobs.core.scheduling import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    due_at,
    is_priority,
    take_order,
)
from jobs.core.wire import job_from_wire, job_to_wire
from receipts.core.chain import seal
from tests.support import present

NOW = 2_000_000_000_000
LIVE = {"driver": 1, "worker-chat": 1, "worker-codex": 1, "worker-control": 1}


def enqueued_body(**options: Any) -> dict[str, Any]:
    return bodies.enqueued(
        "j1",
        agent_id="factory",
        lane="collect",
        payload={"kind": "factory.run"},
        max_attempts=2,
        session_key=None,
        singleton_mode="allow",
        lease_ms=300_000,
        **options,
    )


def folded(body: dict[str, Any]):
    receipt = seal(stream="jobs/j1", prev=None, body=body, ts=NOW - 60_000, random_hex16="0" * 16)
    return present(fold_job([receipt]))


def test_a_plain_body_carries_neither_key_so_its_text_and_hash_are_unchanged():
    assert "runAt" not in enqueued_body() and "priority" not in enqueued_body()
    assert enqueued_body(run_at=None, priority=0) == enqueued_body()


def test_run_at_and_priority_are_folded_from_the_body():
    job = folded(enqueued_body(run_at=NOW + 5_000, priority=-7))
    assert (job.run_at, job.priority) == (NOW + 5_000, -7)
    plain = folded(enqueued_body())
    assert (plain.run_at, plain.priority) == (None, 0)


@pytest.mark.parametrize("key, value", [("runAt", "soon"), ("priority", 1.5), ("priority", True)])
def test_a_malformed_run_at_or_priority_is_refused_by_the_fold(key, value):
    with pytest.raises(InvariantError, match=key):
        folded({**enqueued_body(), key: value})


def test_the_wire_form_stores_them_only_when_set_and_rebuilds_both():
    plain = folded(enqueued_body())
    assert "runAt" not in job_to_wire(plain) and "priority" not in job_to_wire(plain)
    delayed = folded(enqueued_body(run_at=NOW + 1, priority=100))
    wire = job_to_wire(delayed)
    assert (wire["runAt"], wire["priority"]) == (NOW + 1, 100)
    assert job_from_wire(wire) == delayed
    assert job_from_wire(job_to_wire(plain)) == plain  # a row stored before them reads too


@pytest.mark.parametrize(
    "run_at, now, expected",
    [(None, NOW, None), (NOW - 1, NOW, None), (NOW, NOW, None), (NOW + 1, NOW, NOW + 1)],
)
def test_a_run_at_waits_only_while_it_is_ahead(run_at, now, expected):
    assert due_at(run_at, now) == expected


def test_a_job_is_scheduled_only_while_queued_before_its_first_attempt_and_its_time():
    job = folded(enqueued_body(run_at=NOW + 10_000))
    assert job.scheduled_for(NOW) == NOW + 10_000
    assert job.scheduled_for(NOW + 10_000) is None
    assert replace(job, attempt=1).scheduled_for(NOW) is None
    assert replace(job, status="canceled").scheduled_for(NOW) is None


@pytest.mark.parametrize(
    "value, ok",
    [
        *[(0, True), (MIN_PRIORITY, True), (MAX_PRIORITY, True), (101, False), (-101, False)],
        *[(True, False), ("high", False), (1.0, False), (None, False)],
    ],
)
def test_a_priority_is_an_integer_from_minus_100_to_100(value, ok):
    assert is_priority(value) is ok


def test_higher_priority_stands_earlier_by_its_lead_and_aging_bounds_the_wait():
    aging = 1_000
    assert take_order(NOW, 0, aging) == NOW  # priority 0: its own time, as before
    assert take_order(NOW, 100, aging) < take_order(NOW - 99_000, 0, aging)
    # G-4 starvation guard: whatever arrives MAX-MIN points of aging after a lowest
    # priority delivery stands behind it, however high its priority.
    lowest = take_order(NOW, MIN_PRIORITY, aging)
    later = NOW + (MAX_PRIORITY - MIN_PRIORITY) * aging + 1
    assert take_order(later, MAX_PRIORITY, aging) > lowest


def diagnosed(job, now=NOW):
    return diagnose(Facts(job=job, now_ms=now, has_handler=True, live_processes=LIVE))


def test_diagnosis_says_scheduled_for_the_time_and_nothing_about_delivery():
    due = NOW + 600_000
    blockers = diagnosed(folded(enqueued_body(run_at=due)))
    assert [b.code for b in blockers] == ["scheduled"]
    assert f"scheduled for {utc_text(due)}" in blockers[0].detail
    assert utc_text(due) == "2033-05-18 03:43:20 UTC"
    assert "in 10m 00s" in blockers[0].detail


def test_once_its_time_passed_a_delayed_job_is_diagnosed_like_any_other():
    job = folded(enqueued_body(run_at=NOW - 1))
    assert "scheduled" not in [b.code for b in diagnosed(job)]
