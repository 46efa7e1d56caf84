"""L-4: the three reasons, and when the watchdog leaves an objective alone."""

from __future__ import annotations

from objectives.core import vocabulary as v
from objectives.core.watchdog import NO_ACTIVE_WORK, PHASE_SUPERSEDED_STALE, WORK_STALLED, assess
from tests.unit.objectives.helpers import Chain, created, diamond, fact, run_pass

DEFAULT_LEASE, TASK_LEASE = 300_000, 900_000  # K-6 defaults: most jobs, codex jobs


def executing() -> Chain:
    chain = Chain()
    chain.append(created(tasks=diamond()))
    run_pass(chain)
    return chain


def test_no_active_work_after_the_quiet_window():
    state = executing().state
    assert assess(state, [], state.updated_at + 1_000) is None
    assert assess(state, [], state.updated_at + 91_000) == NO_ACTIVE_WORK
    assert assess(state, [], state.updated_at + 2_000, quiet_ms=1_000) == NO_ACTIVE_WORK


def test_a_live_job_is_stale_after_two_missed_beats_computer_after_15_minutes():
    """L-4, K-7: a codex task job (lease 900 s) beats every 200 s; stale after 430 s."""
    chain = executing()
    job = v.task_job_id("obj-1", "a", 1)
    now = 1_000_000
    fresh = fact(job, "running", updated_at=now - 400_000, lease_ms=TASK_LEASE)
    stale = fact(job, "running", updated_at=now - 431_000, lease_ms=TASK_LEASE)
    computer = fact(
        job, "running", updated_at=now - 431_000, lease_ms=TASK_LEASE, execution_path="computer"
    )
    assert assess(chain.state, [fresh], now) is None
    assert assess(chain.state, [stale], now) == WORK_STALLED
    assert assess(chain.state, [computer], now) is None
    assert (
        assess(
            chain.state,
            [fact(job, "running", updated_at=now - 901_000, execution_path="computer")],
            now,
        )
        == WORK_STALLED
    )
    assert assess(chain.state, [fact(job, "queued", updated_at=0)], now) is None


def test_healthy_jobs_between_beats_are_not_reconciled_at_default_cadences():
    """L-4, K-7: a monitor between two beats (lease 300 s, a beat every 100 s) and a task
    under an executor that reports no progress (lease 900 s, a beat every 200 s) are
    healthy, however long past 90 s they are."""
    chain = executing()
    task, monitor = v.task_job_id("obj-1", "a", 1), v.monitor_job_id("obj-1", "a", 1)
    now = 1_000_000
    quiet_monitor = fact(monitor, "running", updated_at=now - 150_000)  # default lease
    quiet_task = fact(task, "running", updated_at=now - 399_000, lease_ms=TASK_LEASE)
    assert assess(chain.state, [quiet_monitor], now) is None
    assert assess(chain.state, [quiet_task], now) is None
    assert assess(chain.state, [quiet_monitor, quiet_task], now) is None


def test_a_long_audit_is_not_superseded_stale_between_beats():
    """L-4, O-10: an audit running past 90 s, heartbeating every 100 s, is left alone."""
    chain = Chain()
    chain.append(
        created(),
        {"type": v.CANCELED, "reason": "x"},
        {"type": v.AUDIT_REQUESTED, "jobId": "audit-obj-1", "round": 1},
    )
    audit = fact("audit-obj-1", "running", updated_at=0, lease_ms=DEFAULT_LEASE)
    assert assess(chain.state, [audit], 120_000) is None
    assert assess(chain.state, [audit], 231_000) == PHASE_SUPERSEDED_STALE


def test_a_stale_job_of_an_earlier_phase_is_superseded():
    chain = executing()
    chain.append({"type": v.INTEGRATION_REQUESTED, "jobId": "validate-x", "round": 1})
    job = v.task_job_id("obj-1", "a", 1)
    running = fact(job, "running", updated_at=0, lease_ms=TASK_LEASE)
    assert assess(chain.state, [running], 400_000) is None  # between two beats
    assert assess(chain.state, [running], 431_000) == PHASE_SUPERSEDED_STALE


def test_blocked_and_awaiting_promotion_objectives_are_left_alone():
    chain = executing()
    chain.append({"type": v.OBJECTIVE_BLOCKED, "reason": "r"})
    assert assess(chain.state, [], 10**9) is None


def test_a_settled_objective_without_its_audit_is_reconciled():
    chain = Chain()
    chain.append(created(), {"type": v.CANCELED, "reason": "x"})
    assert assess(chain.state, [], 10**9) == NO_ACTIVE_WORK
    chain.append({"type": v.AUDIT_REQUESTED, "jobId": "a1", "round": 1})
    assert assess(chain.state, [], 10**9) is None
