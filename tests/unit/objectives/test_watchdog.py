"""L-4: the three reasons, and when the watchdog leaves an objective alone."""

from __future__ import annotations

from objectives.core import vocabulary as v
from objectives.core.watchdog import NO_ACTIVE_WORK, PHASE_SUPERSEDED_STALE, WORK_STALLED, assess
from tests.unit.objectives.helpers import Chain, created, diamond, fact, run_pass


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


def test_a_live_job_is_stale_after_90_seconds_computer_after_15_minutes():
    chain = executing()
    job = v.task_job_id("obj-1", "a", 1)
    now = 100_000
    fresh = fact(job, "running", updated_at=now - 60_000)
    stale = fact(job, "running", updated_at=now - 91_000)
    computer = fact(job, "running", updated_at=now - 91_000, execution_path="computer")
    assert assess(chain.state, [fresh], now) is None
    assert assess(chain.state, [stale], now) == WORK_STALLED
    assert assess(chain.state, [computer], now) is None
    assert assess(chain.state, [fact(job, "running", updated_at=now - 901_000,
                                     execution_path="computer")], now) == WORK_STALLED
    assert assess(chain.state, [fact(job, "queued", updated_at=0)], now) is None


def test_a_stale_job_of_an_earlier_phase_is_superseded():
    chain = executing()
    chain.append({"type": v.INTEGRATION_REQUESTED, "jobId": "validate-x", "round": 1})
    job = v.task_job_id("obj-1", "a", 1)
    reason = assess(chain.state, [fact(job, "running", updated_at=0)], 100_000)
    assert reason == PHASE_SUPERSEDED_STALE


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
