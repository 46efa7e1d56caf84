"""D-12: a queued job behind a saturated worker group is told so, with who holds the slots."""

from dataclasses import replace

import pytest

from jobs.core.diagnosis import (
    COUNT_CAP,
    Capacity,
    Facts,
    PendingDelivery,
    bounded_count,
    capacity_detail,
    diagnose,
    slot_state,
)
from tests.unit.jobs.test_diagnosis import LIVE, NOW, job

CODEX = job(agent_id="codex", kind="factory.task.run")
PENDING = (PendingDelivery("j1:attempt:1", "execute", NOW - 44_000, NOW + 76_000),)


def blockers(capacity, **facts):
    base = {
        "job": CODEX,
        "now_ms": NOW,
        "has_handler": True,
        "live_processes": LIVE,
        "pending": PENDING,
        "capacity": capacity,
    }
    return diagnose(Facts(**{**base, **facts}))


def test_saturated_group_is_the_first_reason_before_the_pending_delivery():
    full = Capacity("codex", busy=1, slots=1, busy_jobs=("j0",), queued_ahead=2)
    found = blockers(full)
    assert [b.code for b in found] == ["waiting_for_capacity", "delivery_pending"]
    assert found[0].detail == (
        "waiting for a free codex slot: codex 1/1 busy with j0; 2 queued ahead"
    )


@pytest.mark.parametrize(("busy", "slots"), [(0, 1), (3, 4)])
def test_a_free_slot_is_not_a_blocker(busy, slots):
    free = Capacity("codex", busy=busy, slots=slots, busy_jobs=("j0",) * busy)
    assert [b.code for b in blockers(free)] == ["delivery_pending"]


def test_without_a_live_process_the_missing_process_stays_the_answer():
    # a busy job but no process: zero slots, so "no live process", never "0 slots busy"
    orphaned = Capacity("codex", busy=1, slots=0, busy_jobs=("j0",))
    found = [b.code for b in blockers(orphaned, live_processes={"driver": 1})]
    assert "no_live_process" in found and "waiting_for_capacity" not in found


def test_only_a_queued_job_waits_for_capacity():
    full = Capacity("codex", busy=1, slots=1, busy_jobs=("j1",))
    running = replace(
        CODEX, status="running", attempt=1, worker_id="codex:h:1", lease_until=NOW + 9_000
    )
    assert [b.code for b in blockers(full, job=running)] == ["running"]
    done = replace(CODEX, status="completed")
    assert [b.code for b in blockers(full, job=done)] == ["terminal"]


def test_more_busy_than_slots_still_counts_as_saturated():
    # a dead worker's lease holds its slot until the lease expiry loop frees it
    stale = Capacity("chat", busy=5, slots=4, busy_jobs=("a", "b", "c"), queued_ahead=0)
    assert capacity_detail(stale) == (
        "waiting for a free chat slot: chat 5/4 busy with a, b, c and 2 more; 0 queued ahead"
    )


def test_bounded_counts_read_as_more_than_the_cap():
    huge = Capacity(
        "chat", busy=COUNT_CAP + 1, slots=4, busy_jobs=("a", "b", "c"), queued_ahead=COUNT_CAP + 1
    )
    assert capacity_detail(huge) == (
        "waiting for a free chat slot: chat 1000+/4 busy with "
        "a, b, c and 997+ more; 1000+ queued ahead"
    )
    assert huge.to_wire() == {
        "group": "chat",
        "busy": 1000,
        "slots": 4,
        "busyJobs": ["a", "b", "c"],
        "queuedAhead": 1000,
        "capped": True,
        "saturated": True,
    }
    assert [bounded_count(n) for n in (0, 999, 1000, 1001)] == ["0", "999", "1000", "1000+"]


def test_busy_without_names_reads_without_with():
    assert capacity_detail(Capacity("control", busy=1, slots=1)) == (
        "waiting for a free control slot: control 1/1 busy; 0 queued ahead"
    )


@pytest.mark.parametrize(
    ("busy", "slots", "state"),
    [
        (0, 0, "no live process"),
        (2, 0, "no live process"),
        (1, 1, "saturated"),
        (5, 4, "saturated"),
        (1, 4, "3 free"),
        (0, 1, "1 free"),
    ],
)
def test_slot_state_at_a_glance(busy, slots, state):
    assert slot_state(busy=busy, slots=slots) == state
