"""The no-op handler the delivery benchmark runs (RECEIPT_HANDLER_MODULES=bench.handlers),
and the same no-op as a `@task` of Django's task framework for the task figures.

Its body does what every peer's task body does in ../shared/bench/peers: one 31-byte
O_APPEND write "<job index:09d> <time.monotonic():020.6f>\\n" to $BENCH_MARKER. The task
lives here because a task payload may only name a module the worker has loaded (or one
inside an installed app), and the workers load this one.

BENCH_PROFILE_DIR=<dir> profiles every process a runworker forks (cProfile on CPU time,
from the fork on) and writes `<dir>/<pid>.prof` every 500 bodies a process runs: where a
worker's CPU per job goes, read with pstats.
"""

from __future__ import annotations

import cProfile
import os
import time

from jobs.handler_contract import JobResult
from jobs.handlers import register_handler
from jobs.tasks.framework import task

_fd: dict[int, int] = {}
_PROFILE_DIR = os.environ.get("BENCH_PROFILE_DIR")
_profile: list[cProfile.Profile] = []  # this process's profiler, when profiling
_bodies = [0]


def _profile_forked() -> None:
    _profile[:] = [cProfile.Profile(time.process_time)]
    _bodies[0] = 0
    _profile[0].enable()


if _PROFILE_DIR:
    os.register_at_fork(after_in_child=_profile_forked)


def mark(index: int) -> None:
    fd = _fd.get(os.getpid())
    if fd is None:
        fd = _fd[os.getpid()] = os.open(
            os.environ["BENCH_MARKER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666
        )
    os.write(fd, b"%09d %020.6f\n" % (index, time.monotonic()))
    if _profile:
        _bodies[0] += 1
        if _bodies[0] % 500 == 0:  # cumulative: dump_stats stops the profiler, enable resumes
            _profile[0].dump_stats(f"{_PROFILE_DIR}/{os.getpid()}.prof")
            _profile[0].enable()


@register_handler("bench-noop")
def noop(job, ctx):
    mark(int(job.payload["i"]))
    return JobResult.success()


@task
def noop_task(i: int) -> None:
    mark(i)
