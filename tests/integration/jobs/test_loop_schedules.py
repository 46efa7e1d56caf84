"""L-6, T-8: which loops run on the lease keeper's thread, and that its pass runs them.

Lease expiry and gone-holder release are time-critical: they run between the keeper's
passes, never queued behind a slow maintenance loop (retention, redrive)."""

from __future__ import annotations

import pytest
from django.conf import settings

from jobs.management.commands.runworker import maintenance_loops
from jobs.models import LoopRun
from jobs.runtime import keeper, loops
from jobs.runtime.loops import Report

pytestmark = pytest.mark.django_db(transaction=True)  # a loop pass closes old connections


def test_lease_loops_are_time_critical_and_slow_loops_are_not():
    maintenance, critical = loops.split(maintenance_loops(settings.RECEIPT, "worker-chat"))
    assert {loop.name for loop in critical} >= {"due", "lease_expiry", "holder_release"}
    assert {"retention", "queued_redrive"} <= {loop.name for loop in maintenance}
    assert not {loop.name for loop in critical} & {loop.name for loop in maintenance}


def test_the_keeper_pass_runs_the_due_time_critical_loops_and_records_them(tmp_path):
    ran: list[str] = []

    def loop(name: str, delay_ms: int) -> loops.Loop:
        def run(now_ms: int) -> Report:
            ran.append(name)
            return Report(name)

        return loops.Loop(name, 60_000, delay_ms, run)

    schedule = loops.Schedule([loop("due", 0), loop("later", 60_000)], "keeper-test:1")
    lease_keeper = keeper.Keeper(tmp_path, schedule=schedule)
    lease_keeper.one_pass()
    lease_keeper.one_pass()  # the next tick counts from the end of the pass
    assert ran == ["due"]
    assert LoopRun.objects.get(loop="due", process_id="keeper-test:1").runs == 1
    next_in_s = schedule.next_in_s()
    assert next_in_s is not None and 0 < next_in_s <= 60
