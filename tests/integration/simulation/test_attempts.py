"""The simulated worker drives the real attempt machine (`jobs.runtime.attempt`, D-5,
D-6): small scenarios on the simulated world, on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from random import Random

import pytest
from django.db import transaction

from jobs import queue
from jobs.runtime import driver, promises, recovery
from jobs.runtime.dispatch import start_driver
from jobs.simulation import worker
from jobs.simulation.clock import VirtualClock
from jobs.simulation.invariants import Checker
from jobs.simulation.run import sandbox
from jobs.simulation.world import Attempt, Process, World
from tests.integration.jobs.helpers import payload, terminal_receipts

pytestmark = pytest.mark.django_db
CHAT = "worker-chat"


@pytest.fixture
def world() -> Iterator[World]:
    world = World(Random(0), VirtualClock(), max_jobs=4)
    with sandbox(world), transaction.atomic():
        yield world
        transaction.set_rollback(True)


def _dispatched(world: World, agent_id: str = "factory") -> tuple[str, str]:
    """A job enqueued and driven: (job id, the execute promise waiting in the broker)."""
    now = world.clock.now_ms
    job = queue.enqueue(agent_id, payload("factory.dispatch"), now_ms=now).job
    world.active.append(world.add_job(job.job_id))
    start_driver(job, now_ms=now)
    driver.drive(world.broker.take("driver", 0).promise_id, now_ms=now)
    return job.job_id, world.broker.take(CHAT, 0).promise_id


def _running(world: World, process: Process | None = None) -> Attempt:
    _, promise_id = _dispatched(world)
    step = worker.start(world, process or world.processes["chat"][0], promise_id)
    assert step.status == "running" and step.attempt is not None
    return step.attempt


def _promise(world: World, promise_id: str) -> promises.PromiseView:
    view = promises.get(promise_id, now_ms=world.clock.now_ms)
    assert view is not None
    return view


def test_start_claims_and_leases_in_one_step_and_finish_settles_the_promise_with_the_job(world):
    attempt = _running(world)
    promise = _promise(world, attempt.promise_id)
    assert promise.pending and promise.worker_id == attempt.fence.worker_id
    job = queue.get(attempt.job.job_id)
    assert job is not None and job.status == "running" and job.worker_id == attempt.fence.worker_id
    step = worker.finish(world, attempt, "ok")
    assert (step.status, step.note) == ("completed", "job completed")
    promise = _promise(world, attempt.promise_id)
    assert promise.state == "resolved" and promise.result["jobStatus"] == "completed"
    assert attempt.key not in attempt.process.running
    assert Checker(world).check() is None


def test_a_duplicated_delivery_never_starts_a_second_handler(world):
    attempt = _running(world)
    for process in world.processes["chat"]:  # the same process, and its sibling
        step = worker.start(world, process, attempt.promise_id)
        assert step.status == "stale_attempt" and step.attempt is None
    assert world.attempts() == [attempt]
    assert _promise(world, attempt.promise_id).pending  # the duplicates settled nothing


def test_redelivered_work_under_the_same_worker_id_is_stale_and_under_another_lease_lost(world):
    attempt = _running(world)
    job_id, number = attempt.key
    first = world.processes["chat"][0]
    # A second execute promise for the same attempt and dispatch key (two deliveries of
    # one attempt), taken by a sibling process of the same runworker (same worker id, its
    # own `_running`), then by a process of another runworker.
    sibling = Process(first.group, first.slot, first.pid)
    other = world.processes["chat"][1]
    assert sibling.worker_id(job_id, job_id) == attempt.fence.worker_id
    for process, status in ((sibling, "stale_attempt"), (other, "lease_lost")):
        promise_id = f"{job_id}:attempt:{number}:dispatch:{process.name}"
        assert promises.create(
            promise_id=promise_id,
            function="execute",
            job_id=job_id,
            attempt=number,
            target_group="chat",
            dispatch_key=job_id,
            timeout_ms=6_000,
            now_ms=world.clock.now_ms,
        )
        step = worker.start(world, process, promise_id)
        assert step.status == status and not process.running
        assert _promise(world, promise_id).state == "rejected"
    assert world.attempts() == [attempt]
    assert worker.finish(world, attempt, "ok").status == "completed"


def test_an_abort_seen_by_the_heartbeat_cancels_and_resolves_the_promise(world):
    attempt = _running(world)
    queue.command(
        attempt.job.job_id, "abort", None, by="test", reason="enough", now_ms=world.clock.now_ms
    )
    step = worker.beat(world, attempt)
    assert (step.status, attempt.stopped) == ("canceled", "enough")
    assert _promise(world, attempt.promise_id).state == "resolved"
    assert terminal_receipts(attempt.job.job_id) == ["job.canceled"]
    assert not world.attempts()


def test_a_lost_lease_abandons_the_attempt_and_rejects_its_promise(world):
    attempt = _running(world)
    # the lease is given back (its holder thought gone) while the handler still runs
    assert recovery.release_holder(
        attempt.job.job_id, attempt.fence, now_ms=world.clock.now_ms, reason="holder gone"
    ).applied
    step = worker.beat(world, attempt)
    assert (step.status, attempt.stopped) == ("lease_lost", "lease lost")
    promise = _promise(world, attempt.promise_id)
    assert promise.state == "rejected" and promise.result == {"status": "lease_lost"}
    assert not world.attempts()


def test_the_execution_timeout_fails_the_attempt(world):
    attempt = _running(world)
    world.clock.advance(attempt.timeout_ms)
    step = worker.beat(world, attempt)
    assert step.status == "execution_timeout" and attempt.stopped == "execution timeout"
    assert _promise(world, attempt.promise_id).state == "resolved"
    job = queue.get(attempt.job.job_id)
    assert job is not None and job.last_error == f"execution timeout after {attempt.timeout_ms} ms"


def test_transient_storage_errors_are_retried_and_an_exhausted_retry_writes_nothing(world):
    retried = _running(world)
    step = worker.finish(world, retried, "ok", transient=4)
    assert (step.status, step.note) == ("completed", "job completed, 4 storage retries")
    exhausted = _running(world)
    step = worker.finish(world, exhausted, "ok", transient=5)
    assert step.status == "error" and "database is locked" in step.note
    # Neither the job's receipt nor the promise was written: lease expiry recovers it.
    job = queue.get(exhausted.job.job_id)
    assert job is not None and job.status == "running"
    promise = _promise(world, exhausted.promise_id)
    assert promise.pending and promise.worker_id == exhausted.fence.worker_id
    assert not world.attempts()


def test_a_crash_right_after_settling_leaves_job_and_promise_settled_together(world):
    attempt = _running(world)
    step = worker.finish(world, attempt, "ok", crash_after=True)
    assert step.status == "crashed"
    assert attempt.process not in world.processes["chat"]
    assert _promise(world, attempt.promise_id).state == "resolved"
    assert terminal_receipts(attempt.job.job_id) == ["job.completed"]


def test_an_agent_without_a_handler_fails_in_the_start_step(world):
    _, promise_id = _dispatched(world, agent_id="sim-no-handler")
    step = worker.start(world, world.processes["chat"][0], promise_id)
    assert (step.status, step.note) == ("failed", "job failed")
    assert not world.attempts()
    assert _promise(world, promise_id).state == "resolved"
