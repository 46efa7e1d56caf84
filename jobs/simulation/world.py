"""The simulated world around the real runtime (C-2): the broker, the worker processes,
the attempts in flight and the jobs the run created.

It owns only what django-q2 and the operating system own in production: which task
sits in which cluster's queue, which process runs which attempt, which process died.
Everything durable (receipts, job rows, delivery promises) stays in the database and
is written by the real runtime modules. Nothing here decides a job's fate.

Determinism: the runtime generates random ids (job ids, command ids, worker-id hashes),
so nothing here orders by an id. Jobs are known by their index in creation order
(`j0`, `j1`, ...); broker tasks are ordered by (step sent, job index, send order), so
the order in which one recovery pass happened to visit several jobs cannot change which
task a seeded choice picks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from random import Random
from typing import Any

from jobs.core.state import Fence, JobState
from jobs.runtime import attempt as attempts
from jobs.runtime import promises
from jobs.runtime.dispatch import DRIVE_TASK
from jobs.runtime.driver import EXECUTE_TASK
from jobs.runtime.roles import GROUPS, cluster_for_group, is_cluster
from jobs.simulation.clock import VirtualClock

DRIVER_CLUSTER = "driver"
PROCESSES_PER_GROUP = 2


@dataclass
class Task:
    """One django-q2 task as the simulated broker holds it."""

    cluster: str
    func: str
    promise_id: str
    job: int  # the job's index in the world
    order: tuple[int, int, int]
    duplicate: bool = False

    @property
    def is_driver(self) -> bool:
        return self.func == DRIVE_TASK

    def label(self, world: World) -> str:
        return f"{'drive' if self.is_driver else 'execute'}({world.promise_label(self.promise_id)})"


class Broker:
    """Per-cluster task queues standing in for `jobs.runtime.transport.send` (django-q2)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.queues: dict[str, list[Task]] = {DRIVER_CLUSTER: []}
        for group in GROUPS:
            self.queues[cluster_for_group(group)] = []
        self.sent = 0

    def send(self, cluster: str, func: str, *args: Any, **known: Any) -> None:
        """Drop-in for `transport.send`: same validation, delivery into a simulated queue
        (the worker reads the promise itself, so what the sender `known` is not kept)."""
        if not is_cluster(cluster):
            raise ValueError(f"unknown cluster {cluster!r}")
        if func not in (DRIVE_TASK, EXECUTE_TASK) or len(args) != 1:
            raise ValueError(f"the simulation does not deliver {func}{args!r}")
        promise_id = str(args[0])
        promise = promises.get(promise_id, now_ms=self.world.clock.now_ms)
        if promise is None:
            raise ValueError(f"task for a promise that does not exist: {promise_id}")
        self.sent += 1
        job = self.world.index_of(promise.job_id)
        self._put(Task(cluster, func, promise_id, job, (self.world.step, job, self.sent)))

    def _put(self, task: Task) -> None:
        queue = self.queues[task.cluster]
        queue.append(task)
        queue.sort(key=lambda t: t.order)

    def duplicate(self, task: Task) -> Task:
        """django-q2 delivering a task twice (ORM broker retry, a redelivered Redis pop)."""
        self.sent += 1
        copy = Task(
            task.cluster,
            task.func,
            task.promise_id,
            task.job,
            (self.world.step, task.job, self.sent),
            duplicate=True,
        )
        self._put(copy)
        return copy

    def take(self, cluster: str, index: int) -> Task:
        return self.queues[cluster].pop(index)

    def nonempty(self, *, driver: bool | None = None, up: bool = False) -> list[str]:
        """Clusters holding tasks (driver only, workers only, or all); with `up`, only
        clusters that have a live process to take them."""
        return [
            c
            for c, q in self.queues.items()
            if q
            and (driver is None or (c == DRIVER_CLUSTER) == driver)
            and (not up or self.world.is_up(c))
        ]

    def pending(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def first(self) -> Task | None:
        """The oldest task across every cluster (the healthy drain of the liveness phase)."""
        heads = [q[0] for q in self.queues.values() if q]
        return min(heads, key=lambda t: t.order) if heads else None


@dataclass
class Attempt:
    """An attempt whose handler is running in a simulated worker process (D-5): what
    `attempt.begin` returned, and where and since when it runs."""

    process: Process
    running: attempts.Running  # the promise id, the job as begin left it, the fence
    job_index: int
    started_ms: int
    timeout_ms: int  # the execution timeout (K-7)
    stopped: str | None = None  # ctx.stop(reason): the handler was told to stop

    @property
    def job(self) -> JobState:
        return self.running.job

    @property
    def fence(self) -> Fence:
        return self.running.fence

    @property
    def promise_id(self) -> str:
        return self.running.promise_id

    @property
    def deadline_ms(self) -> int:
        return self.started_ms + self.timeout_ms

    @property
    def key(self) -> tuple[str, int]:
        return (self.job.job_id, self.fence.attempt)

    def label(self) -> str:
        return f"j{self.job_index}#{self.fence.attempt}@{self.process.name}"


@dataclass
class Process:
    """One `runworker` process of a worker group. A crash replaces it with a new pid."""

    group: str
    slot: int
    pid: int
    # worker._running: attempts this process is executing; a duplicate delivery of one of
    # them to the same process is refused before `attempt.begin` (stale_attempt).
    running: dict[tuple[str, int], Attempt] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.group}-{self.slot}.{self.pid}"

    def worker_id(self, dispatch_key: str, job_id: str) -> str:
        """D-10 (`worker.worker_id_for`) with this simulated process as host and pid."""
        base = f"{self.group}:sim-{self.slot}:{self.pid}"
        if dispatch_key == job_id:
            return base
        return f"{base}:delivery:{hashlib.sha256(dispatch_key.encode()).hexdigest()[:16]}"


class World:
    def __init__(self, rng: Random, clock: VirtualClock, *, max_jobs: int) -> None:
        self.rng = rng
        self.clock = clock
        self.max_jobs = max_jobs  # at most this many active jobs at once
        self.step = 0
        self.job_ids: list[str] = []  # index -> job id, in creation order
        self.active: list[int] = []  # indexes of jobs not yet terminal, ascending
        self._index: dict[str, int] = {}
        self.broker = Broker(self)
        self.down: dict[str, int] = {}  # cluster -> virtual ms when its outage ends
        self._next_pid = 100
        self.processes: dict[str, list[Process]] = {
            group: [self._spawn(group, slot) for slot in range(PROCESSES_PER_GROUP)]
            for group in GROUPS
        }

    def _spawn(self, group: str, slot: int) -> Process:
        self._next_pid += 1
        return Process(group, slot, self._next_pid)

    def is_up(self, cluster: str) -> bool:
        return self.clock.now_ms >= self.down.get(cluster, 0)

    # ---- jobs -----------------------------------------------------------------------------

    def add_job(self, job_id: str) -> int:
        if job_id not in self._index:
            self._index[job_id] = len(self.job_ids)
            self.job_ids.append(job_id)
        return self._index[job_id]

    def index_of(self, job_id: str) -> int:
        """The job's index; a job the simulation did not create gets one too (and is then
        checked like the others), so a stray write cannot hide."""
        return self.add_job(job_id)

    def job_label(self, job_id: str) -> str:
        return f"j{self.index_of(job_id)}"

    def promise_label(self, promise_id: str) -> str:
        """A promise id with the (random) job id replaced by the job's index."""
        job_id = promise_id.split(":", 1)[0]  # generated job ids never contain ':'
        if job_id not in self._index:
            return promise_id
        return promise_id.replace(job_id, f"j{self._index[job_id]}")

    # ---- processes and attempts -------------------------------------------------------------

    def all_processes(self) -> list[Process]:
        return [p for group in GROUPS for p in self.processes[group]]

    def attempts(self) -> list[Attempt]:
        """Every running attempt, in a stable order (process, then start order)."""
        return [a for p in self.all_processes() for a in p.running.values()]

    def crash(self, process: Process) -> list[Attempt]:
        """The process dies (SIGKILL): its attempts are abandoned, nothing is settled; a
        supervisor starts a replacement with a new pid."""
        lost = list(process.running.values())
        replacement = self._spawn(process.group, process.slot)
        group = self.processes[process.group]
        group[group.index(process)] = replacement
        return lost
