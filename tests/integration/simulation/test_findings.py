"""Runtime bugs the simulation found, replayed as small deterministic scenarios on the
simulated world, kept as regression tests once fixed."""

from __future__ import annotations

from random import Random

import pytest
from django.db import transaction

from jobs import queue
from jobs.runtime import driver, recovery
from jobs.runtime.dispatch import start_driver
from jobs.simulation import worker
from jobs.simulation.clock import VirtualClock
from jobs.simulation.invariants import Checker
from jobs.simulation.run import sandbox
from jobs.simulation.world import World
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db


# Found by `simulate --seed 1014 --steps 5000 --jobs 2`: a group down for ~3 hours used up
# every delivery generation of a queued job (D-3), after which nothing could start it. Fixed
# by letting late (timed-out, unsettled) deliveries still do their hop, and by keeping
# exhausted jobs out of the redrive batch (they are named by the diagnosis instead).
def test_a_queued_job_is_redriven_however_long_its_worker_group_was_down():
    clock = VirtualClock()
    world = World(Random(0), clock, max_jobs=1)
    with sandbox(world), transaction.atomic():
        job = queue.enqueue("factory", payload("factory.dispatch"), now_ms=clock.now_ms).job
        world.add_job(job.job_id)
        world.active.append(0)
        start_driver(job, now_ms=clock.now_ms)
        checker = Checker(world)
        # worker-chat has no live process: each execute task waits past its promise's
        # timeout (the lease); the promise sweep marks it timed out; redrive tries again.
        for _ in range(40):
            while world.broker.queues["driver"]:
                driver.drive(world.broker.take("driver", 0).promise_id, now_ms=clock.now_ms)
            clock.advance(10_000)
            recovery.sweep_promises(now_ms=clock.now_ms)
            redrive = recovery.redrive_queued(now_ms=clock.now_ms)
            assert not redrive.errors, redrive.errors
            assert checker.check() is None
        # the group is back: the newest delivery runs the job
        while world.broker.queues["driver"]:
            driver.drive(world.broker.take("driver", 0).promise_id, now_ms=clock.now_ms)
        started = [
            worker.start(world, world.processes["chat"][0], t.promise_id)
            for t in list(world.broker.queues["worker-chat"])
        ]
        running = [s.attempt for s in started if s.attempt is not None]
        assert len(running) == 1
        assert worker.finish(world, running[0], "ok").status == "completed"
        transaction.set_rollback(True)
