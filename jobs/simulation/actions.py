"""The step kinds of a simulation (C-2) and the seeded choice among them.

Each action does one thing the production system can do, through the real runtime
modules: a client enqueues or sends a command, the broker delivers, drops or
duplicates a task, a driver drives, a worker process runs one step of an attempt or
dies, a recovery loop makes a pass, or time passes. An action returns `(outcome,
detail)`: the outcome is counted in the report, the detail goes into the trace.

Faults (`fault=True`) are left out once the run reaches its liveness phase. Every
choice is drawn from `world.rng`, and every list a choice is drawn from is in a stable
order (job index, process slot, broker order), never in id order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from random import Random
from typing import Any

from django.db import transaction

from jobs import queue, selectors
from jobs.core.contracts import routed_group
from jobs.core.names import group_of_cluster
from jobs.core.vocabulary import RETRYABLE_STATUSES
from jobs.errors import JobsError
from jobs.runtime import dispatch, driver, loops, recovery
from jobs.simulation import worker
from jobs.simulation.world import Attempt, Task, World

Result = tuple[str, str]  # (outcome counted in the report, detail for the trace)
AUTH = {"userId": "simulate", "organizationId": "org-simulate"}
SESSIONS = ("sim-session-0", "sim-session-1")

# (agent id, payload kind): one per worker group, plus an agent without a handler (K-4).
# None of these kinds writes the durable ledger or reconciles an objective.
PROFILES: tuple[tuple[str, str], ...] = (
    ("factory", "factory.dispatch"),  # chat
    ("factory", "factory.dispatch"),
    ("factory-control", "factory.objective.watchdog"),  # control
    ("codex", "factory.integration.validate"),  # codex, the longer codex lease (K-6)
    ("sim-no-handler", "factory.dispatch"),  # chat; failed non-retryably by the worker
)


@dataclass(frozen=True)
class Action:
    name: str
    weight: float
    run: Callable[[World], Result]
    enabled: Callable[[World], bool] = lambda world: True
    fault: bool = False


def mix(actions: tuple[Action, ...], rng: Random) -> dict[str, float]:
    """Swarm testing: every run scales each action's weight by a seeded factor, so runs
    differ in character (one barely heartbeats, another never aborts and loses half its
    deliveries). Optional actions may be switched off; the ones that move work forward
    never are."""
    return {
        a.name: a.weight
        * rng.choice((0.3, 1.0, 3.0) if a.name in ESSENTIAL else (0.0, 0.3, 1.0, 3.0))
        for a in actions
    }


def choose(
    world: World, actions: tuple[Action, ...], weights: dict[str, float], *, faults: bool
) -> Action:
    candidates = [
        a for a in actions if (faults or not a.fault) and weights[a.name] > 0 and a.enabled(world)
    ]
    return world.rng.choices(candidates, weights=[weights[a.name] for a in candidates])[0]


# ---- clients -----------------------------------------------------------------------------


def enqueue(world: World, *, dispatched: bool) -> Result:
    rng = world.rng
    agent_id, kind = rng.choice(PROFILES)
    payload: dict[str, Any] = {"kind": kind, "authContext": dict(AUTH), "sim": world.step}
    options: dict[str, Any] = {"max_attempts": rng.choice((1, 2, 2, 3))}
    if rng.random() < 0.25:  # singleton modes J-7 / J-8 (and J-9 before them)
        options["session_key"] = rng.choice(SESSIONS)
        options["singleton_mode"] = rng.choice(("cancel", "steer"))
    now = world.clock.now_ms
    result = queue.enqueue(agent_id, payload, now_ms=now, by="simulate", **options)
    index = world.add_job(result.job.job_id)
    group = routed_group(agent_id, kind)
    mode = options.get("singleton_mode", "allow")
    if not result.created:
        return (
            "steered" if result.steered else "existing",
            f"j{index} {agent_id}/{group} {mode} -> {'steered' if result.steered else 'existing'}",
        )
    world.active.append(index)
    if not dispatched:  # D-2: committed, then the process died before the dispatch pass
        return "created_undispatched", f"j{index} {agent_id}/{group} {mode} -> created, no dispatch"
    # D-2: the after-commit dispatch pass (dispatch_batch) starts the driver.
    started = dispatch.start_driver(result.job, now_ms=now)
    return "created", f"j{index} {agent_id}/{group} {mode} -> created, {started.reason or 'driver'}"


def _room(world: World) -> bool:
    return len(world.active) < world.max_jobs


def _pick_active(world: World) -> tuple[int, str]:
    index = world.rng.choice(world.active)
    return index, world.job_ids[index]


def abort(world: World) -> Result:
    index, job_id = _pick_active(world)
    try:
        done = queue.command(
            job_id,
            "abort",
            None,
            by="simulate",
            reason="simulated abort",
            now_ms=world.clock.now_ms,
        )
    except JobsError as error:
        return f"refused_{error.code}", f"j{index} -> refused ({error.code})"
    outcome = "canceled" if done.canceled else "abort_requested"
    return outcome, f"j{index} -> {outcome}"


def steer(world: World) -> Result:
    index, job_id = _pick_active(world)
    command = world.rng.choice(("steer", "follow_up"))
    try:
        queue.command(
            job_id, command, {"step": world.step}, by="simulate", now_ms=world.clock.now_ms
        )
    except JobsError as error:
        return f"refused_{error.code}", f"j{index} {command} -> refused ({error.code})"
    return command, f"j{index} {command}"


def _has_active(world: World) -> bool:
    return bool(world.active)


def retry(world: World) -> Result:
    """An operator retries a failed or canceled job: its `job.retried` receipt and a
    driver delivery under the retry's own key in one transaction, as `jobs.retry` does
    (a service beside the simulation, not below it)."""
    settled = [i for i in range(len(world.job_ids)) if i not in world.active]
    states = {job.job_id: job for job in selectors.states([world.job_ids[i] for i in settled])}
    candidates = [
        i
        for i in settled
        if (job := states.get(world.job_ids[i])) is not None and job.status in RETRYABLE_STATUSES
    ]
    if not candidates:
        return "nothing_to_retry", "no failed or canceled job"
    index = world.rng.choice(candidates)
    before = states[world.job_ids[index]]
    now = world.clock.now_ms
    with transaction.atomic():
        written = queue.retry(before.job_id, by="simulate", include_canceled=True, now_ms=now)
        if written.job is None or written.refusal is not None:
            return f"refused_{written.refusal}", f"j{index} -> refused ({written.refusal})"
        started = dispatch.start_driver(
            written.job, dispatch_key=dispatch.retry_key(written.job), now_ms=now
        )
    world.active = sorted([*world.active, index])
    return "retried", (
        f"j{index} {before.status} after attempt {before.attempt} -> retry "
        f"{written.job.retries}, {started.reason or 'driver'}"
    )


def _has_settled(world: World) -> bool:
    return _room(world) and len(world.job_ids) > len(world.active)


# ---- the broker --------------------------------------------------------------------------


def _pick_task(world: World, *, driver_only: bool | None, up: bool) -> tuple[str, int]:
    clusters = world.broker.nonempty(driver=driver_only, up=up)
    cluster = world.rng.choice(clusters)
    size = len(world.broker.queues[cluster])
    index = 0 if world.rng.random() < 0.7 else world.rng.randrange(size)  # mostly in order
    return cluster, index


def deliver(world: World, task: Task) -> Result:
    """Run a delivered task: the driver (D-4), or a worker's start of the attempt (D-5)."""
    label = task.label(world)
    if task.is_driver:
        result = driver.drive(task.promise_id, now_ms=world.clock.now_ms)
        return result["status"], f"{label} -> {result['status']}"
    group = group_of_cluster(task.cluster)
    assert group is not None
    process = world.rng.choice(world.processes[group])
    step = worker.start(world, process, task.promise_id)
    return step.status, step.describe(f"{label}@{process.name}")


def deliver_next(world: World, *, driver: bool) -> Result:
    """Deliver a queued driver task (`driver`) or execute task of a cluster that is up."""
    cluster, index = _pick_task(world, driver_only=driver, up=True)
    return deliver(world, world.broker.take(cluster, index))


def lose_delivery(world: World) -> Result:
    cluster, index = _pick_task(world, driver_only=None, up=False)
    task = world.broker.take(cluster, index)
    return ("lost_driver" if task.is_driver else "lost_execute"), f"{task.label(world)} dropped"


def duplicate_delivery(world: World) -> Result:
    cluster, index = _pick_task(world, driver_only=None, up=False)
    task = world.broker.queues[cluster][index]
    world.broker.duplicate(task)
    return (
        "duplicated_driver" if task.is_driver else "duplicated_execute",
        f"{task.label(world)} duplicated",
    )


def _driver_tasks(world: World) -> bool:
    return bool(world.broker.nonempty(driver=True, up=True))


def _execute_tasks(world: World) -> bool:
    return bool(world.broker.nonempty(driver=False, up=True))


def _any_task(world: World) -> bool:
    return world.broker.pending() > 0


# ---- workers -------------------------------------------------------------------------------


def _pick_attempt(world: World) -> Attempt:
    return world.rng.choice(world.attempts())


def _has_attempt(world: World) -> bool:
    return bool(world.attempts())


def _worker_step(step: worker.Step, attempt: Attempt) -> Result:
    return step.status, step.describe(attempt.label())


def heartbeat(world: World) -> Result:
    attempt = _pick_attempt(world)
    return _worker_step(worker.beat(world, attempt), attempt)


def progress(world: World) -> Result:
    attempt = _pick_attempt(world)
    step = worker.report(world, attempt, pull_first=world.rng.random() < 0.5)
    return _worker_step(step, attempt)


def handler_ok(world: World) -> Result:
    attempt = _pick_attempt(world)
    return _worker_step(worker.finish(world, attempt, "ok"), attempt)


def handler_fails(world: World) -> Result:
    attempt = _pick_attempt(world)
    no_retry = world.rng.random() < 0.3
    return _worker_step(worker.finish(world, attempt, "fail", no_retry=no_retry), attempt)


def handler_raises(world: World) -> Result:
    attempt = _pick_attempt(world)
    return _worker_step(worker.finish(world, attempt, "raise"), attempt)


def storage_error(world: World) -> Result:
    """Transient storage errors while settling: mostly recovered by the retry (D-5), now
    and then all five tries fail and the attempt is left to lease expiry."""
    attempt = _pick_attempt(world)
    transient = 5 if world.rng.random() < 0.1 else world.rng.randint(1, 4)
    how = "ok" if world.rng.random() < 0.7 else "fail"
    step = worker.finish(world, attempt, how, transient=transient)
    return _worker_step(step, attempt)


def crash(world: World) -> Result:
    """A worker process dies (SIGKILL): whatever it was running is abandoned silently."""
    busy = [p for p in world.all_processes() if p.running]
    process = world.rng.choice(busy or world.all_processes())
    lost = world.crash(process)
    labels = ", ".join(a.label() for a in lost) or "idle"
    return "crashed", f"{process.name} killed ({labels})"


def outage(world: World) -> Result:
    """Every process of one role is gone for a while (D-12: no live process for the
    group): its tasks wait in the broker, its running attempts are abandoned."""
    cluster = world.rng.choice(sorted(world.broker.queues))
    ms = world.rng.randint(10_000, 600_000)
    world.down[cluster] = max(world.down.get(cluster, 0), world.clock.now_ms + ms)
    lost = []
    group = group_of_cluster(cluster)
    if group is not None:
        for process in list(world.processes[group]):
            lost += world.crash(process)
    labels = ", ".join(a.label() for a in lost)
    return "outage", f"{cluster} down for {ms} ms" + (f" ({labels} abandoned)" if labels else "")


def crash_after_settle(world: World) -> Result:
    """The process dies right after its settlement committed (the job's receipt and the
    promise, one transaction), before the callback."""
    attempt = _pick_attempt(world)
    step = worker.finish(world, attempt, "ok", crash_after=True)
    return _worker_step(step, attempt)


# ---- time and recovery ---------------------------------------------------------------------


def advance_clock(world: World) -> Result:
    rng = world.rng
    roll = rng.random()
    if roll < 0.55:
        ms = rng.randint(1, 500)
    elif roll < 0.85:
        ms = rng.randint(500, 4_000)
    elif roll < 0.97:
        ms = rng.randint(4_000, 15_000)
    else:  # past a driver promise's timeout (K-7 floor: 120 s)
        ms = rng.randint(30_000, 130_000)
    world.clock.advance(ms)
    return "advanced", f"+{ms} ms"


def report_pass(report: loops.Report) -> Result:
    errors = f" errors={len(report.errors)}" if report.errors else ""
    outcome = "acted" if report.acted else "idle"
    if report.errors:
        outcome = "errors"
    return outcome, f"examined={report.examined} acted={report.acted}{errors}"


def redrive(world: World) -> Result:
    return report_pass(recovery.redrive_queued(now_ms=world.clock.now_ms))


def expire(world: World) -> Result:
    return report_pass(recovery.expire_leases(now_ms=world.clock.now_ms))


def sweep(world: World) -> Result:
    return report_pass(recovery.sweep_promises(now_ms=world.clock.now_ms))


ESSENTIAL = frozenset(
    {
        "enqueue",
        "deliver_driver",
        "deliver_execute",
        "heartbeat",
        "handler_ok",
        "advance_clock",
        "redrive",
        "expire",
    }
)
ACTIONS: tuple[Action, ...] = (
    Action("enqueue", 6, partial(enqueue, dispatched=True), _room),
    Action("abort", 1, abort, _has_active),
    Action("steer", 1.5, steer, _has_active),
    Action("deliver_driver", 10, partial(deliver_next, driver=True), _driver_tasks),
    Action("deliver_execute", 10, partial(deliver_next, driver=False), _execute_tasks),
    Action("heartbeat", 8, heartbeat, _has_attempt),
    Action("progress", 3, progress, _has_attempt),
    Action("handler_ok", 5, handler_ok, _has_attempt),
    Action("handler_fails", 2, handler_fails, _has_attempt),
    Action("handler_raises", 1.5, handler_raises, _has_attempt),
    Action("advance_clock", 8, advance_clock),
    Action("redrive", 3, redrive),
    Action("expire", 3, expire),
    Action("sweep", 1, sweep),
    # faults
    Action("enqueue_undispatched", 1, partial(enqueue, dispatched=False), _room, fault=True),
    Action("lose_delivery", 1.5, lose_delivery, _any_task, fault=True),
    Action("duplicate_delivery", 1.5, duplicate_delivery, _any_task, fault=True),
    Action("crash", 1, crash, fault=True),
    Action("outage", 0.3, outage, fault=True),
    Action("crash_after_settle", 0.7, crash_after_settle, _has_attempt, fault=True),
    Action("storage_error", 1.5, storage_error, _has_attempt, fault=True),
    # last: the seeded draws of the actions above it come out as before it was added
    Action("retry", 1, retry, _has_settled),
)
