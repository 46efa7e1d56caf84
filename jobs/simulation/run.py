"""`simulate(seed, steps, jobs) -> Report`: a deterministic simulation of the delivery
runtime (C-2).

A run has two phases. The fault phase takes `steps` seeded actions (`actions.ACTIONS`:
enqueue, deliveries, worker steps, commands, recovery passes, time, and faults: lost
and duplicated deliveries, killed workers, role outages, transient storage errors, a
lost dispatch pass), with weights scaled per run (`actions.mix`, swarm testing), and
checks every invariant (`invariants`) after each one. The liveness phase then stops
injecting faults: outages end, running handlers return, the clock jumps past every
lease, promise timeout, redrive min age and cooldown, and lease expiry, queued redrive
and the broker are run with healthy workers, round after round, until every job is
terminal (at most `LIVENESS_ROUNDS`); then every job must have settled exactly once.
The first violation ends the run and is reported with its step, action and replay
command.

Determinism means: the same seed gives the same sequence of actions and outcomes (the
report's `trace`). Ids the runtime generates (job ids, command ids, receipt ids) are
random and differ between runs; no decision depends on them (see `world`).

The run patches process-wide state and restores it afterwards: `settings.RECEIPT`
(short leases and redrive windows, no callback URL), `transport.send` and `send_woken`
(into the simulated broker), the runtime's wall clock (counted, see `clock`),
`counters.flush` (wall-clock driven), the queue's after-commit listeners (the simulation
runs the dispatch pass itself, and with the default rollback they would never fire), and
the `receipt` loggers (quiet below ERROR). Do not run it in a process that is doing real
work. It runs in one transaction, rolled back unless `keep`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from random import Random
from typing import Any

from django.conf import settings
from django.db import transaction

from jobs import queue, selectors
from jobs.core.timing import driver_timeout_ms
from jobs.errors import JobsError
from jobs.runtime import counters, loops, recovery, transport
from jobs.simulation import actions, worker
from jobs.simulation.clock import EPOCH_MS, VirtualClock
from jobs.simulation.invariants import Checker, Violation
from jobs.simulation.world import Attempt, World

DEFAULT_JOBS = 6
LIVENESS_ROUNDS = 40
DRAIN_LIMIT = 2_000  # deliveries per liveness round

# Short windows, so a few hundred steps see leases expire and redrives fire.
SIM_SETTINGS = {
    "job_lease_ms": 6_000,
    "codex_job_lease_ms": 9_000,
    "factory_control_job_lease_ms": 9_000,
    "factory_control_job_execution_timeout_ms": None,
    "heartbeat_interval_ms": None,
    "queued_redrive_min_age_ms": 3_000,
    "queued_redrive_cooldown_ms": 2_000,
    "resonate_callback_url": None,
    "event_callback_url": None,
    "callback_token": None,
}
# Every module of the delivery path that reads the wall clock when not given now_ms.
WALL_CLOCK_READERS = (
    "jobs.queue",
    "jobs.runtime.dispatch",
    "jobs.runtime.driver",
    "jobs.runtime.worker",
    "receipts.append",
    "receipts.new_streams",
)


class SimulationRefused(JobsError):
    code = "simulation_refused"


@dataclass
class Report:
    seed: int
    steps: int
    jobs: int
    actions: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # "<action>:<outcome>"
    settled: Counter[str] = field(default_factory=Counter)  # final status of every job
    jobs_created: int = 0
    steps_run: int = 0
    liveness_rounds: int = 0
    liveness_steps: int = 0
    virtual_ms: int = 0
    mix: dict[str, float] = field(default_factory=dict)  # this run's action weights
    violation: Violation | None = None
    violation_step: int | None = None
    violation_action: str | None = None
    trace: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.violation is None

    @property
    def replay(self) -> str:
        return (
            f"python manage.py simulate --seed {self.seed} --steps {self.steps} --jobs {self.jobs}"
        )

    def to_wire(self, *, trace: bool = False) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "ok": self.ok,
            "seed": self.seed,
            "steps": self.steps,
            "jobs": self.jobs,
            "stepsRun": self.steps_run,
            "jobsCreated": self.jobs_created,
            "livenessRounds": self.liveness_rounds,
            "livenessSteps": self.liveness_steps,
            "virtualMs": self.virtual_ms,
            "elapsedS": round(self.elapsed_s, 3),
            "actions": dict(sorted(self.actions.items())),
            "outcomes": dict(sorted(self.outcomes.items())),
            "settled": dict(sorted(self.settled.items())),
            "mix": dict(sorted(self.mix.items())),
            "violation": None,
            "replay": self.replay,
        }
        if self.violation is not None:
            wire["violation"] = {
                **self.violation.to_wire(),
                "step": self.violation_step,
                "action": self.violation_action,
            }
        if trace:
            wire["trace"] = list(self.trace)
        return wire


@contextmanager
def _patched(target: Any, name: str, value: Any) -> Iterator[None]:
    before = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, before)


@contextmanager
def _emptied(listeners: list[Any]) -> Iterator[None]:
    saved = list(listeners)
    listeners.clear()
    try:
        yield
    finally:
        listeners[:] = saved


@contextmanager
def sandbox(world: World) -> Iterator[None]:
    """Point the runtime at the simulated world for the duration of a run."""
    import importlib

    import receipts.clock

    with ExitStack() as stack:
        config = dataclasses.replace(settings.RECEIPT, **SIM_SETTINGS)
        stack.enter_context(_patched(settings, "RECEIPT", config))
        stack.enter_context(_patched(transport, "send", world.broker.send))
        stack.enter_context(_patched(transport, "send_woken", world.broker.send))
        stack.enter_context(_patched(counters, "flush", lambda **_: 0))
        stack.enter_context(_patched(receipts.clock, "now_ms", world.clock.read_by_runtime))
        for name in WALL_CLOCK_READERS:
            stack.enter_context(
                _patched(
                    importlib.import_module(name), "wall_clock_ms", world.clock.read_by_runtime
                )
            )
        stack.enter_context(_emptied(queue.on_commit_listeners))
        stack.enter_context(_emptied(queue.joined_dispatch))
        stack.enter_context(_emptied(queue.mutation_listeners))
        stack.enter_context(_quiet_logs())
        yield


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """The report is the output: the runtime's per-item warnings would drown it."""
    logger = logging.getLogger("receipt")
    before = logger.level
    logger.setLevel(max(before, logging.ERROR))
    try:
        yield
    finally:
        logger.setLevel(before)


def simulate(seed: int, steps: int, jobs: int = DEFAULT_JOBS, *, keep: bool = False) -> Report:
    """Run one simulation; see the module docstring. Raises SimulationRefused when the
    database already has active jobs (the recovery passes would drive them too)."""
    if steps < 0 or jobs < 1:
        raise ValueError("steps must be >= 0 and jobs >= 1")
    started = time.monotonic()
    clock = VirtualClock()
    world = World(Random(seed), clock, max_jobs=jobs)
    report = Report(seed=seed, steps=steps, jobs=jobs)
    with sandbox(world), transaction.atomic():
        try:
            foreign = selectors.active_count()
            if foreign:
                raise SimulationRefused(
                    f"the database has {foreign} active job(s); the simulation's recovery "
                    f"passes would drive them too: run it on a scratch or idle database"
                )
            _run(world, Checker(world), report)
        finally:
            if not keep:
                transaction.set_rollback(True)
    report.virtual_ms = clock.now_ms - EPOCH_MS
    report.elapsed_s = time.monotonic() - started
    return report


def _step(
    world: World,
    checker: Checker,
    report: Report,
    name: str,
    run: Callable[[World], actions.Result],
    *,
    liveness: bool = False,
) -> bool:
    """Run one action in a savepoint, record it, check the invariants; False on a violation."""
    try:
        with transaction.atomic():
            outcome, detail = run(world)
    except Exception as error:  # in production tasks._guarded would log it: still a bug
        where = traceback.extract_tb(error.__traceback__)[-1]
        outcome = "error"
        detail = f"{type(error).__name__}: {error} ({where.filename}:{where.lineno})"
        violation: Violation | None = Violation("unexpected_error", f"{name}: {detail}")
    else:
        violation = checker.check()
    if liveness:
        report.liveness_steps += 1
    else:
        report.steps_run += 1
        report.actions[name] += 1
    report.outcomes[f"{name}:{outcome}"] += 1
    report.trace.append(f"{world.step} t+{world.clock.now_ms - EPOCH_MS} {name} {detail}")
    if violation is not None:
        report.violation = violation
        report.violation_step = world.step
        report.violation_action = name
        return False
    return True


def _run(world: World, checker: Checker, report: Report) -> None:
    weights = actions.mix(actions.ACTIONS, world.rng)
    report.mix = {name: round(w, 2) for name, w in weights.items()}
    for step in range(report.steps):
        world.step = step
        world.clock.advance(1)  # every step takes a millisecond: no two enqueues tie
        action = actions.choose(world, actions.ACTIONS, weights, faults=True)
        if not _step(world, checker, report, action.name, action.run):
            break
    else:
        _liveness(world, checker, report)
    report.jobs_created = len(world.job_ids)
    report.settled.update(selectors.statuses(world.job_ids).values())


def _quiet_ms() -> int:
    """Past every promise timeout, lease, redrive min age and cooldown."""
    config = settings.RECEIPT
    longest_lease = max(
        config.job_lease_ms, config.codex_job_lease_ms, config.factory_control_job_lease_ms
    )
    return (
        max(
            driver_timeout_ms(longest_lease),
            longest_lease,
            config.queued_redrive_min_age_ms + config.queued_redrive_cooldown_ms,
        )
        + 1
    )


def _returns_ok(attempt: Attempt) -> Callable[[World], actions.Result]:
    """A healthy handler returns at once."""
    return lambda w: (worker.finish(w, attempt, "ok").status, f"{attempt.label()} returns ok")


def _recovery_pass(run: Callable[..., loops.Report]) -> Callable[[World], actions.Result]:
    return lambda w: actions.report_pass(run(now_ms=w.clock.now_ms))


def _quiet_period(world: World) -> actions.Result:
    ms = _quiet_ms()
    world.clock.advance(ms)
    return "advanced", f"+{ms} ms"


Runner = Callable[[str, Callable[[World], actions.Result]], bool]


def _liveness(world: World, checker: Checker, report: Report) -> None:
    """No more faults; healthy workers and recovery until every job is terminal."""
    step = report.steps

    def run(name: str, action: Callable[[World], actions.Result]) -> bool:
        nonlocal step
        world.step = step
        step += 1
        return _step(world, checker, report, f"liveness.{name}", action, liveness=True)

    world.down.clear()  # outages end
    for round_ in range(1, LIVENESS_ROUNDS + 1):
        report.liveness_rounds = round_
        if not (
            all(run("handler_ok", _returns_ok(a)) for a in world.attempts())
            and _drain(world, run)
            and run("advance_clock", _quiet_period)
            and run("expire", _recovery_pass(recovery.expire_leases))
            and run("redrive", _recovery_pass(recovery.redrive_queued))
            and run("sweep", _recovery_pass(recovery.sweep_promises))
            and _drain(world, run)
        ):
            return
        if not world.active and not world.attempts() and not world.broker.pending():
            break
    violation = checker.check_liveness()
    if violation is not None:
        report.violation = violation
        report.violation_step = step
        report.violation_action = "liveness.final"


def _drain(world: World, run: Runner) -> bool:
    """Deliver every queued task in broker order; started handlers return at once."""
    for _ in range(DRAIN_LIMIT):
        task = world.broker.first()
        if task is None:
            return True
        world.broker.queues[task.cluster].remove(task)
        if not run("deliver", functools.partial(actions.deliver, task=task)):
            return False
        if not all(run("handler_ok", _returns_ok(a)) for a in world.attempts()):
            return False
    return True
