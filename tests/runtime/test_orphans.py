"""No orphans: killing a `runworker` kills every process a task command started.

A codex worker runs a shell command (through `objectives.processes`, as a Factory task
does) whose tree has a child shell, a grandchild `sleep`, a `setsid sleep` that left the
command's process group, and a loop that keeps starting more (so some are born while the
runworker is being killed). After SIGTERM of the runworker's main pid, SIGKILL of the
main pid alone, or SIGKILL of its whole process group, none of them, nor any of
django-q2's processes, is alive 5 s later.
Leases are the defaults (5 minutes): nothing here is ended by an execution timeout or a
lease expiry, only by the death of the processes above it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from django.conf import settings

from tests.conftest import BACKEND, wait_for
from tests.runtime.helpers import enqueue, wait_status

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.django_db(transaction=True),
    # process trees and signals, not the database: once is enough
    pytest.mark.skipif(BACKEND != "sqlite", reason="runs once, in the SQLite leg"),
]

DEFAULT_LEASE_MS = 300_000
AFTER_DEATH_S = 5.0  # the requirement: nothing of the command alive 5 s after its worker died
# the command's shell, a child shell, its grandchild sleep, a sleep in its own session,
# then one more sleep every half second for as long as the shell lives
TREE = (
    "echo $$ >> {pids}; "
    "sh -c 'echo $$ >> {pids}; sleep 180 & echo $! >> {pids}; wait' & "
    "setsid sleep 180 & echo $! >> {pids}; "
    "while :; do sleep 180 & echo $! >> {spawned}; sleep 0.5; done"
)
TREE_SIZE = 4


@pytest.fixture
def orphans(stack, monkeypatch):
    """The stack with default leases, and a last-resort cleanup of whatever a failed test
    left running (so one failure does not leave `sleep 180` behind)."""
    monkeypatch.setattr(
        settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, job_lease_ms=DEFAULT_LEASE_MS)
    )
    stack.env["JOB_LEASE_MS"] = str(DEFAULT_LEASE_MS)
    stack.trees = []
    yield stack
    for tree in stack.trees:
        for proc in [*tree.procs, *tree.added()]:
            with contextlib.suppress(psutil.Error):
                proc.kill()


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (is_running compares create times: a reused pid is not it)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@dataclasses.dataclass
class Tree:
    procs: list[psutil.Process]  # seen once the command was up: its own and django-q2's
    spawned: Path  # where the loop records each sleep it adds
    since: float  # before the command started (tells a loop's sleep from a reused pid)

    def added(self) -> list[psutil.Process]:
        """The loop's sleeps so far (read at every look: some start during the kill)."""
        found = []
        for pid in self.spawned.read_text().split() if self.spawned.exists() else ():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(int(pid))
                if proc.create_time() >= self.since and proc.cmdline() == ["sleep", "180"]:
                    found.append(proc)
        return found

    def alive(self) -> list[psutil.Process]:
        return [p for p in [*self.procs, *self.added()] if _alive(p)]


def start_tree(stack, tmp_path, **worker_env: str) -> tuple[subprocess.Popen[bytes], Tree]:
    """Start driver and codex and run TREE in a codex task; return the codex runworker and
    the tree under it once the command is up."""
    stack.start("driver", name="driver")
    codex = stack.start("codex", name="codex", **worker_env)
    pids, spawned = tmp_path / "pids", tmp_path / "spawned"
    since = time.time() - 1
    # a `factory.integration.*` kind routes the job to the codex group, as Factory's own do
    job = enqueue(
        "test-command",
        kind="factory.integration.validate",
        command=TREE.format(pids=pids, spawned=spawned),
        dir=str(tmp_path),
    )
    wait_status(job.job_id, "running", timeout=60)
    wait_for(
        lambda: pids.exists() and len(pids.read_text().split()) >= TREE_SIZE and spawned.exists(),
        timeout=60,
        message="the task command to start its tree",
    )
    listed = [int(pid) for pid in pids.read_text().split()]
    leader = psutil.Process(listed[0])
    assert codex.pid in [a.pid for a in leader.parents()], "the command runs under codex"
    command = {p.pid: p for p in [leader, *leader.children(recursive=True)]}
    command.update({pid: psutil.Process(pid) for pid in listed if pid not in command})
    # and the rest of the runworker's tree: sentinel, workers, pusher, monitor, reaper
    rest = [p for p in psutil.Process(codex.pid).children(recursive=True) if p.pid not in command]
    tree = Tree([*command.values(), *rest], spawned, since)
    stack.trees.append(tree)
    assert len(command) >= TREE_SIZE and not [p for p in tree.procs if not _alive(p)]
    return codex, tree


def assert_all_gone(tree: Tree) -> None:
    """Nothing of `tree` alive within AFTER_DEATH_S of now (the runworker just died)."""
    try:
        wait_for(
            lambda: not tree.alive(), timeout=AFTER_DEATH_S, message="the runworker's tree to die"
        )
    except AssertionError:
        left = {p.pid: _describe(p) for p in tree.alive()}
        raise AssertionError(f"alive {AFTER_DEATH_S}s after the runworker died: {left}") from None


def _describe(proc: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return f"{' '.join(proc.cmdline())[:80]} (ppid {proc.ppid()})"
    return "?"


def test_sigterm_of_the_main_pid_leaves_no_task_process(orphans, tmp_path):
    # SIGTERM drains first: the task outlasts a short grace, then the cluster is killed and
    # the runworker exits; 5 s after that nothing of the command may be left
    codex, tree = start_tree(orphans, tmp_path, RUNWORKER_STOP_GRACE_S="2")
    codex.send_signal(signal.SIGTERM)
    codex.wait(timeout=60)
    assert_all_gone(tree)


def test_sigkill_of_the_main_pid_alone_leaves_no_task_process(orphans, tmp_path):
    codex, tree = start_tree(orphans, tmp_path)
    os.kill(codex.pid, signal.SIGKILL)  # the main process only: nothing of ours runs there
    codex.wait(timeout=30)
    assert_all_gone(tree)


def test_sigkill_of_the_process_group_leaves_no_task_process(orphans, tmp_path):
    _, tree = start_tree(orphans, tmp_path)
    orphans.kill("codex")  # main, sentinel, workers; the reaper and command have own sessions
    assert_all_gone(tree)
