"""Control at production defaults (T-8, D-5, D-11, L-2): abort within seconds and dead
lease holders released within 30 s, with the DEFAULT codex lease (15 minutes), so a
slow path cannot hide behind a short lease. Condition-waits with deadlines, no sleeps.
"""

from __future__ import annotations

import os
import signal

import pytest

from jobs import queue
from jobs.diagnosis import diagnosis
from jobs.models import WorkerProcess
from receipts import store
from tests.conftest import wait_for
from tests.runtime.helpers import (
    assert_settled_once,
    enqueue,
    freeze_outside_transactions,
    wait_status,
)

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]

CODEX_DEFAULT_LEASE_MS = 900_000


def _codex_job(**fields):
    job = enqueue("codex", kind="factory.task.run", **fields)
    assert job.lease_ms == CODEX_DEFAULT_LEASE_MS  # the production default, not a test lease
    return job


def _receipt(job, receipt_type):
    return next(r for r in store.read(job.stream) if r.type == receipt_type)


def test_abort_reaches_a_running_codex_handler_within_two_seconds(stack):
    stack.start("driver")
    stack.start("codex")
    job = _codex_job(sleepMs=600_000)
    wait_for(lambda: stack.marks("start", job.job_id), message="attempt to start", timeout=60)
    queue.abort(job.job_id, reason="operator stop", by="ops")
    canceled = wait_status(job.job_id, "canceled", timeout=20)
    assert canceled.cancel_reason == "operator stop"
    abort_s = _receipt(job, "queue.command").ts / 1000
    seen = stack.marks("aborted", job.job_id)
    assert seen and seen[0]["t"] - abort_s <= 2.0, (seen, abort_s)
    assert_settled_once(job.job_id)


def test_leases_of_a_killed_runworker_are_released_within_30s_and_named(stack):
    stack.start("driver")
    doomed = stack.start("codex", name="codex-doomed")
    job = _codex_job(sleepMs=600_000, laterSleepMs=10, max_attempts=2)
    wait_for(lambda: stack.marks("start", job.job_id), message="attempt to start", timeout=60)
    stack.kill("codex-doomed")
    row = WorkerProcess.objects.get(pid=doomed.pid)
    # Seen from the moment the registry calls it gone (three missed beats), before any
    # loop released the lease: diagnosis names the gone holder.
    gone_at = row.last_seen + 16_000
    blockers = {b["code"]: b["detail"] for b in diagnosis(job.job_id, now_ms=gone_at)["blockers"]}
    assert row.id in blockers["holder_gone"], blockers
    stack.start("codex", name="codex-fresh")
    done = wait_status(job.job_id, "completed", timeout=60)
    assert done.attempt == 2
    expired = _receipt(job, "job.lease_expired")
    last_seen = WorkerProcess.objects.get(pk=row.pk).last_seen
    assert expired.ts - last_seen <= 30_000, (expired.ts, last_seen)
    assert "gone" in expired.body["reason"]
    assert_settled_once(job.job_id)


def test_a_holder_declared_gone_that_is_alive_loses_its_fence(stack):
    stack.start("driver")
    frozen = stack.start("codex", name="codex-frozen")
    job = _codex_job(sleepMs=25_000, laterSleepMs=10, max_attempts=2)
    wait_for(lambda: stack.marks("start", job.job_id), message="attempt to start", timeout=60)
    freeze_outside_transactions(frozen.pid)  # its keeper stops beating; its handler runs on
    try:
        # A deadline for the test, not the bound: the kill test above asserts the 30 s from
        # the receipts. Under both suite legs on two cores the loops run late (once, 45 s).
        wait_for(
            lambda: "job.lease_expired" in [r.type for r in store.read(job.stream)],
            timeout=90,
            message="the frozen holder's lease to be released",
        )
        stack.start("codex", name="codex-other")
        wait_status(job.job_id, "completed", timeout=60)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    # The first handler finishes later: its settlement is refused, the job settled once.
    wait_for(
        lambda: [m for m in stack.marks("end", job.job_id) if m["attempt"] == 1],
        timeout=60,
        message="the frozen attempt's handler to return",
    )
    types = [r.type for r in store.read(job.stream)]
    assert types.count("job.completed") == 1
    assert queue.get(job.job_id).attempt == 2
    assert_settled_once(job.job_id)


def test_sigterm_past_its_grace_releases_the_runworkers_own_leases(stack):
    stack.start("driver")
    worker = stack.start("codex", name="codex-stubborn", RUNWORKER_STOP_GRACE_S="2")
    job = enqueue("codex", kind="factory.task.run", stubbornMs=600_000, max_attempts=2)
    wait_for(lambda: stack.marks("start", job.job_id), message="attempt to start", timeout=60)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)
    requeued = wait_status(job.job_id, "queued", timeout=10)
    assert requeued.attempt == 1
    expired = _receipt(job, "job.lease_expired")
    assert "stopped" in expired.body["reason"]
