"""`manage.py runworker --role driver|chat|control|codex|<declared group>` (D-9): one
role's django-q2 cluster plus its maintenance loops and registry beat.

django-q2 reads its cluster name once at import (Q_CLUSTER_NAME), so the command
re-executes itself with it set (same pid: a supervisor keeps signalling the right
process). Our own signal handlers only record the signal: stopping from inside a
signal handler deadlocks django-q2 (django-q2#346). SIGTERM drains in-flight attempts
for up to RUNWORKER_STOP_GRACE_S seconds; past that the tree is killed and this
process releases the leases its attempts held before it exits.

Database connections (the budget is concurrency + 3): one per worker process (its
handler's), the pusher's (takes promises and listens), the maintenance loops' thread,
and the lease keeper's thread (heartbeats, aborts, the registry beat, and the
time-critical loops: never queued behind a slow maintenance pass). django-q2's
sentinel and monitor never touch the database: the promise broker has nothing to
acknowledge, and schedules run in the loops thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobs import handlers, retention
from jobs.core.groups import TO_DECLARE
from jobs.core.names import group_of_cluster
from jobs.core.timing import TimingSettings, concurrency_for
from jobs.runtime import callbacks, due, keeper, loops, processes, recovery, sandbox
from jobs.runtime.loops import each_pass
from jobs.runtime.roles import UnknownRole, normalize_role
from observability.logs import log_event
from receipts.clock import now_ms as wall_clock_ms

logger = logging.getLogger("receipt.runtime")
ALL = "all"
COMMAND_GROUPS = ("codex", "control")  # tasks, checks, publication; planner commands
HOLDER_RELEASE_INTERVAL_MS = 5_000  # gone after 3 beats (15 s) + this: released within 30 s


def resolve_role(
    cli_role: str | None, env_role: str | None, groups: tuple[str, ...] | None = None
) -> tuple[str, str | None]:
    """(cluster name or 'all', warning). --role must be valid; the env falls back to all.
    `groups`: the worker groups that exist (built-in and declared)."""
    if cli_role:
        try:
            return normalize_role(cli_role, groups), None
        except UnknownRole as error:
            raise CommandError(f"{error}; {TO_DECLARE}") from None
    if env_role:
        try:
            return normalize_role(env_role, groups), None
        except UnknownRole:
            return ALL, (
                f"RECEIPT_PROCESS_ROLE={env_role!r} is not a role; running only the "
                "maintenance loops (no worker function is registered): jobs for its "
                "group will stay queued"
            )
    raise CommandError(
        f"--role is required ({', '.join(['driver', *(groups or ('chat', 'control', 'codex'))])})"
    )


def maintenance_loops(config: Any, role: str = ALL) -> list[loops.Loop]:
    """The recovery loops every role runs, plus those apps provide for `role` (a cluster
    name such as `worker-control`, or `all`)."""
    redrive_every, delay = config.queued_redrive_interval_ms, config.queued_redrive_startup_delay_ms
    return [
        loops.Loop("queued_redrive", redrive_every, delay, each_pass(recovery.redrive_queued)),
        loops.Loop(
            "lease_expiry",
            redrive_every,
            delay,
            each_pass(recovery.expire_leases),
            time_critical=True,
        ),
        loops.Loop(  # G-3: delayed jobs start within a keeper pass of their time
            "due", due.INTERVAL_MS, 0, each_pass(due.release_due), time_critical=True
        ),
        loops.Loop("limits", 10_000, delay, each_pass(due.keep_limits)),  # raised caps
        loops.Loop("promise_sweep", 60_000, delay, each_pass(recovery.sweep_promises)),
        loops.Loop(
            "holder_release",
            HOLDER_RELEASE_INTERVAL_MS,
            delay,
            each_pass(recovery.release_gone_holders),
            time_critical=True,
        ),
        loops.Loop(
            "startup_resume",
            0,
            config.startup_settle_ms,
            each_pass(recovery.redrive_queued),
            once=True,
        ),
        loops.Loop(
            "callbacks",
            callbacks.PUMP_INTERVAL_MS if config.callback_url else callbacks.DELIVER_INTERVAL_MS,
            delay,
            each_pass(callbacks.pump),
            time_critical=True,  # a pass never waits on a receiver, and its answers are due
        ),
        loops.Loop("callback_prune", 60_000, delay, each_pass(callbacks.prune)),
        loops.Loop("retention", retention.INTERVAL_MS, delay, each_pass(retention.prune_pass)),
        *[loop for provide in loops.providers for loop in provide(config, role)],
    ]


def _kill_tree(pid: int) -> None:
    """SIGKILL the sentinel and everything under it, except, where parent-death signals
    work, task commands' reapers and what they run (jobs.runtime.lifeline): a reaper kills
    its command's whole tree once its worker is dead, including what the command starts
    while this runs, which SIGKILLing the reaper from here would leave behind."""
    import psutil

    from jobs.runtime import lifeline

    try:
        parent = psutil.Process(pid)
        spared: set[int] = set()
        for child in parent.children(recursive=True):  # parents come before their children
            try:
                if child.pid in spared:
                    continue
                if lifeline.ARMED and lifeline.is_reaper(child.cmdline()):
                    spared.update(p.pid for p in child.children(recursive=True))
                    continue
                child.kill()
            except psutil.Error:
                continue
        parent.kill()
    except psutil.NoSuchProcess:
        pass


class Command(BaseCommand):
    help = "Run one role's django-q2 cluster and its recovery loops."
    # The system checks import every URLconf, admin and API module (0.4 s of a worker's
    # start-up) and check what a worker never serves; `manage.py check --deploy` and the
    # API server run them.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument(
            "--role",
            help="driver, chat, control, codex or a declared worker group (or worker-<group>)",
        )

    def handle(self, *args, role: str | None, **options):
        config = settings.RECEIPT
        timing = TimingSettings.from_config(config)
        cluster, warning = resolve_role(role, config.process_role, timing.group_names())
        if cluster != ALL:
            self._reexec_for(cluster)
        handlers.load()
        received: dict[str, int | None] = {"signal": None}

        def on_signal(signum: int, frame: Any) -> None:  # record only (django-q2#346)
            received["signal"] = signum

        group = group_of_cluster(cluster) if cluster != ALL else None
        concurrency = 0 if cluster == ALL else concurrency_for(group or "driver", timing)
        now = wall_clock_ms()
        role_name = cluster
        runs_commands = cluster == ALL or group in COMMAND_GROUPS
        disabled = sandbox.problem() if runs_commands else None  # Q-5: /healthz shows it
        commands = sandbox.NO_SANDBOX if disabled else None
        if runs_commands and (disabled or sandbox.warning()):  # no sandbox, or host chosen
            why = disabled or sandbox.warning()
            log_event(logger, "runtime.commands_sandbox", str(why), level=logging.WARNING)
        pid = processes.register(
            role=role_name,
            group=group,
            concurrency=concurrency,
            now_ms=now,
            info={
                "broker": "orm" if config.broker == "orm" else "redis",
                "warning": "; ".join(w for w in (warning, commands) if w) or None,
            },
        )
        if warning:
            log_event(
                logger,
                "runtime.unknown_role",
                warning,
                level=logging.WARNING,
                role=config.process_role,
            )
        log_event(
            logger,
            "runtime.configured",
            f"{role_name} starting",
            role=role_name,
            group=group,
            concurrency=concurrency,
            processId=pid,
        )
        from django.db import connections

        # What the cluster's tasks import on their first call (jobs.runtime.tasks), imported
        # once here instead: every fork inherits it, and the first job does not wait for it.
        from jobs.runtime import driver, worker  # noqa: F401

        self._prepare_children(config)
        connections.close_all()  # never hand a live socket to django-q2's forks
        cluster_obj = None
        if cluster != ALL:
            from jobs.runtime.lifeline import Cluster  # dies with us: no orphans

            cluster_obj = Cluster()
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        if cluster_obj is not None:
            cluster_obj.start()
            log_event(
                logger,
                "runtime.worker_connected",
                f"{role_name} cluster started",
                role=role_name,
                sentinelPid=cluster_obj.sentinel.pid,
            )
        stop, keeper_stop = threading.Event(), threading.Event()
        maintenance, time_critical = loops.split(maintenance_loops(config, cluster))
        threads = loops.start(maintenance, pid, stop)
        lease_keeper = keeper.Keeper(
            Path(os.environ[keeper.DIR_ENV]),
            on_pass=self._registry_beat(pid),
            schedule=loops.Schedule(time_critical, pid),
        )
        keeper_thread = threading.Thread(
            target=lease_keeper.run, args=(keeper_stop,), name="lease-keeper", daemon=True
        )
        keeper_thread.start()
        while received["signal"] is None:
            if cluster_obj is not None:
                cluster_obj.sentinel.join(0.5)
                if not cluster_obj.sentinel.is_alive():
                    break
            else:
                stop.wait(0.5)
        log_event(
            logger,
            "runtime.shutting_down",
            f"{role_name} stopping",
            role=role_name,
            signal=received["signal"],
        )
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        exit_code = self._stop_cluster(cluster_obj)  # the keeper beats through the drain
        keeper_stop.set()
        keeper_thread.join(timeout=10)
        self._release_own_leases(pid)
        processes.stopped(pid, now_ms=wall_clock_ms())
        shutil.rmtree(os.environ[keeper.DIR_ENV], ignore_errors=True)
        if exit_code:
            sys.exit(exit_code)

    @staticmethod
    def _prepare_children(config: Any) -> None:
        """What django-q2's forks inherit: worker ids name this process, attempts are
        handed to this process's keeper, and an enqueue from a handler dispatches in its
        own thread (no extra thread, no extra connection)."""
        os.environ[processes.RUNWORKER_PID_ENV] = str(os.getpid())
        os.environ[keeper.DIR_ENV] = str(keeper.new_directory(f"receipt-keeper-{os.getpid()}-"))
        settings.RECEIPT = dataclasses.replace(config, dispatch_mode="inline")

    @staticmethod
    def _registry_beat(pid: str) -> Any:
        last = [0.0]

        def on_pass(held: list[keeper.Held]) -> None:
            now = time.monotonic()
            if now - last[0] < processes.BEAT_MS / 1000:
                return
            last[0] = now
            processes.beat(pid, now_ms=wall_clock_ms(), attempts=[h.to_wire() for h in held])

        return on_pass

    @staticmethod
    def _release_own_leases(pid: str) -> None:
        """Whatever this runworker still holds (a drain that ran out of grace) is given
        back now instead of when the leases run out."""
        from jobs.models import WorkerProcess

        row = WorkerProcess.objects.filter(pk=pid).first()
        if row is None:
            return
        now = wall_clock_ms()
        for job_id, fence in processes.attempts_held_by(row):
            try:
                recovery.release_holder(
                    job_id, fence, now_ms=now, reason=f"{processes.worker_prefix(row)} stopped"
                )
            except Exception as error:
                log_event(
                    logger,
                    "runtime.release_failed",
                    f"release of {job_id} failed: {error}",
                    level=logging.WARNING,
                    jobId=job_id,
                )
        processes.mark_released(row, now_ms=now)

    def _reexec_for(self, cluster: str) -> None:
        from django_q.conf import Conf

        if cluster == Conf.CLUSTER_NAME:
            return
        if os.environ.get("Q_CLUSTER_NAME") == cluster:
            raise CommandError("Q_CLUSTER_NAME is set but django-q2 did not apply it")
        sys.stdout.flush()
        sys.stderr.flush()
        # The command line as it was typed (`-m receipt_site.cli`, `manage.py`, the `receipt`
        # script): sys.argv would turn `-m` into a script path and lose the working directory
        # from the import path (handler modules live there).
        argv = [sys.executable, *sys.orig_argv[1:]]
        if "--role" not in argv and not any(a.startswith("--role=") for a in argv):
            argv += ["--role", cluster]
        os.execve(sys.executable, argv, {**os.environ, "Q_CLUSTER_NAME": cluster})

    def _stop_cluster(self, cluster_obj: Any) -> int:
        if cluster_obj is None:
            return 0
        grace = settings.RECEIPT.runworker_stop_grace_s
        if cluster_obj.sentinel.is_alive():
            stopper = threading.Thread(target=cluster_obj.stop, daemon=True)
            stopper.start()
            stopper.join(grace)
            if stopper.is_alive():
                log_event(
                    logger,
                    "runtime.stop_grace_exceeded",
                    f"graceful stop exceeded {grace}s; killing the cluster",
                    level=logging.ERROR,
                )
                _kill_tree(cluster_obj.sentinel.pid)
                return 1
        return 0 if (cluster_obj.sentinel.exitcode or 0) == 0 else 1
