"""A-9 / U-5 board sections from the fold."""

from __future__ import annotations

from objectives.core import vocabulary as v
from objectives.core.board import section_for
from tests.unit.objectives.helpers import Chain, created, diamond, fact, run_pass


def test_sections_follow_status_flags_and_the_promotion_gate():
    chain = Chain()
    chain.append(created(tasks=diamond()[:1], policy={"autoPromote": False}))
    assert section_for(chain.state) == "queued"
    run_pass(chain)
    assert section_for(chain.state) == "active"
    job = v.task_job_id("obj-1", "a", 1)
    run_pass(chain, {job: fact(job, result={"outcome": "approved"}),
                     job.replace("task-", "mon-", 1): fact("m")})
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
