"""A-9 / U-5 board sections from the fold."""

from __future__ import annotations

import pytest

from objectives.core import vocabulary as v
from objectives.core.board import section_for, task_counts, task_shown, with_queued
from tests.support import present
from tests.unit.objectives.helpers import Chain, created, diamond, fact, run_pass


def test_sections_follow_status_flags_and_the_promotion_gate():
    chain = Chain()
    chain.append(created(tasks=diamond()[:1], policy={"autoPromote": False}))
    assert section_for(chain.state) == "queued"
    run_pass(chain)
    assert section_for(chain.state) == "active"
    job = v.task_job_id("obj-1", "a", 1)
    run_pass(
        chain,
        {
            job: fact(job, result={"outcome": "approved"}),
            job.replace("task-", "mon-", 1): fact("m"),
        },
    )
    assert chain.state.awaiting_promotion and section_for(chain.state) == "needs_attention"
    chain.append({"type": v.CANCELED, "reason": "x"})
    assert section_for(chain.state) == "completed"
    chain.append({"type": v.ARCHIVED, "archived": True})
    assert section_for(chain.state) == "archived"


def test_blocked_and_failed_need_attention():
    chain = Chain()
    chain.append(created(), {"type": v.OBJECTIVE_BLOCKED, "reason": "r"})
    assert section_for(chain.state) == "needs_attention"
    other = Chain("obj-2")
    other.append(created("obj-2"), {"type": v.FAILED, "reason": "budget"})
    assert section_for(other.state) == "needs_attention"


def _dispatched() -> Chain:
    chain = Chain()
    chain.append(created(tasks=diamond()))
    run_pass(chain)  # task a is dispatched: its job is enqueued, not started
    return chain


def test_a_task_whose_job_is_still_queued_is_shown_queued():
    """U-5, O-3: dispatched is not running; the job's status tells them apart."""
    chain = _dispatched()
    job = v.task_job_id("obj-1", "a", 1)
    task = present(chain.state.task("a"))
    assert task.status == "running"
    assert task_shown(task, chain.state, "queued") == "queued"
    assert task_shown(task, chain.state, "leased") == "running"
    assert task_shown(task, chain.state, "running") == "running"
    assert task_counts(chain.state, {job: "queued"}) == {"queued": 1, "pending": 3}
    assert task_counts(chain.state, {job: "running"}) == {"running": 1, "pending": 3}


def test_a_canceled_objective_shows_no_running_task():
    """U-5, O-11: after a cancel nothing runs, whatever the tasks' last status was."""
    chain = _dispatched()
    job = v.task_job_id("obj-1", "a", 1)
    chain.append({"type": v.CANCELED, "reason": "stopped by the user"})
    task = present(chain.state.task("a"))
    assert task_shown(task, chain.state, "running") == "stopped"
    assert task_counts(chain.state) == {"stopped": 1, "pending": 3}
    assert task_counts(chain.state, {job: "canceled"}) == {"stopped": 1, "pending": 3}


@pytest.mark.parametrize(
    ("counts", "queued", "shown"),
    [
        ({"running": 2, "pending": 1}, 1, {"running": 1, "queued": 1, "pending": 1}),
        ({"running": 1}, 1, {"queued": 1}),
        ({"running": 1}, 3, {"queued": 1}),  # never more than were running
        ({"stopped": 1}, 1, {"stopped": 1}),
        ({"pending": 2}, 0, {"pending": 2}),
    ],
)
def test_summary_counts_move_queued_jobs_out_of_running(counts, queued, shown):
    """U-5, A-9: the board's summary counts with the queued task jobs counted apart."""
    assert with_queued(counts, queued) == shown
