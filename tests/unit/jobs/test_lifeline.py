"""No orphans, piece by piece (jobs.runtime.lifeline): the reaper above every task command
and the parent-death signal django-q2's processes get. Real processes, no database."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from jobs.runtime import lifeline
from objectives import processes
from tests.conftest import wait_for

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.skipif(
        not sys.platform.startswith("linux"),
        reason="parent-death signals and subreapers are Linux's",
    ),
]

ROOT = Path(__file__).resolve().parents[3]
GONE_WITHIN_S = 5.0
# a child shell with a grandchild sleep, a sleep in a session of its own, a double-forked one
TREE = (
    "echo $$ >> {pids}; "
    "sh -c 'echo $$ >> {pids}; sleep 180 & echo $! >> {pids}; wait' & "
    "setsid sleep 180 & echo $! >> {pids}; "
    "sh -c 'sleep 180 & echo $! >> {pids}'; "
    "wait"
)
TREE_SIZE = 5
# a stand-in for a django-q2 worker: runs the command from a handler thread, then idles
WORKER = """
import sys, threading, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from objectives import processes
tmp = Path(sys.argv[2])
threading.Thread(target=processes.run, args=(sys.argv[3],), daemon=True, kwargs=dict(
    cwd=tmp, env=processes.scrubbed_env({}), stdout_path=tmp / "out", stderr_path=tmp / "err",
)).start()
time.sleep(600)
"""
# main -> child -> grandchild through multiprocessing, as django-q2 forks its sentinel/workers
FORKS = """
import multiprocessing, os, sys, time
sys.path.insert(0, sys.argv[1])
from jobs.runtime import lifeline
lifeline.forks_die_with_parents()
fork = multiprocessing.get_context("fork")

def grandchild():
    time.sleep(600)

def child(path):
    g = fork.Process(target=grandchild)
    g.start()
    with open(path, "w") as out:
        out.write(f"{os.getpid()} {g.pid}")
    time.sleep(600)

fork.Process(target=child, args=(sys.argv[2],)).start()
time.sleep(600)
"""


@pytest.fixture
def started():
    """Processes a test started; whatever is still alive at the end is killed."""
    procs: list[psutil.Process] = []
    yield procs
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def alive_pid(pid: int) -> bool:
    try:
        return alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def pids_in(path: Path, count: int) -> list[psutil.Process]:
    wait_for(
        lambda: path.exists() and len(path.read_text().split()) >= count,
        timeout=30,
        message=f"{count} pids in {path.name}",
    )
    return [psutil.Process(int(pid)) for pid in path.read_text().split()]


def assert_gone(procs: list[psutil.Process], within: float = GONE_WITHIN_S) -> None:
    try:
        wait_for(lambda: not any(alive(p) for p in procs), timeout=within)
    except AssertionError:
        raise AssertionError(f"still alive: {[p.pid for p in procs if alive(p)]}") from None


def spawn(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *argv], start_new_session=True)


def test_the_command_tree_dies_with_the_worker_that_ran_it(tmp_path, started):
    pids = tmp_path / "pids"
    worker = spawn("-c", WORKER, str(ROOT), str(tmp_path), TREE.format(pids=pids))
    started.append(psutil.Process(worker.pid))
    tree = pids_in(pids, TREE_SIZE)
    reaper = psutil.Process(worker.pid).children()
    started.extend([*tree, *reaper])
    assert len(reaper) == 1 and all(alive(p) for p in tree)
    worker.kill()  # SIGKILL: nothing in the worker runs; the kernel tells the reaper
    worker.wait(timeout=10)
    assert_gone([*tree, *reaper])


def test_a_stopped_reaper_terms_then_kills_everything_then_dies_of_the_commands_signal(
    tmp_path, started
):
    pids = tmp_path / "pids"
    command = "trap '' TERM; " + TREE.format(pids=pids)  # TERM is ignored all the way down
    reaper = subprocess.Popen(
        lifeline.reaper_argv(["/bin/sh", "-c", command]), start_new_session=True
    )
    started.append(psutil.Process(reaper.pid))
    tree = pids_in(pids, TREE_SIZE)
    started.extend(tree)
    stopped = time.monotonic()
    reaper.send_signal(signal.SIGTERM)
    assert reaper.wait(timeout=lifeline.KILL_GRACE_S + 10) == -signal.SIGKILL
    assert time.monotonic() - stopped >= lifeline.KILL_GRACE_S  # the grace was given
    assert_gone(tree, within=1.0)


def test_what_a_command_leaves_behind_dies_when_it_exits(tmp_path):
    pids = tmp_path / "pids"
    leave = (
        f"setsid sleep 180 & echo $! >> {pids}; "
        f"sh -c 'sleep 180 & echo $! >> {pids}'; exit 3"
    )  # an escapee and an orphan
    result = processes.run(
        leave,
        cwd=tmp_path,
        env=processes.scrubbed_env({}),
        stdout_path=tmp_path / "out",
        stderr_path=tmp_path / "err",
    )
    assert result.exit_code == 3
    left = [int(pid) for pid in pids.read_text().split()]
    assert len(left) == 2
    assert not [pid for pid in left if alive_pid(pid)]  # gone by the time run() returned


def test_the_exit_status_is_the_commands():
    for command, status in (
        ("exit 0", 0),
        ("exit 7", 7),
        ("kill -TERM $$", -signal.SIGTERM),
        ("kill -KILL $$", -signal.SIGKILL),
    ):
        ran = subprocess.run(lifeline.reaper_argv(["/bin/sh", "-c", command]), timeout=30)
        assert ran.returncode == status, command


def test_a_reaper_whose_parent_is_already_gone_starts_nothing(tmp_path):
    marker = tmp_path / "ran"
    argv = lifeline.reaper_argv(["/bin/sh", "-c", f"touch {marker}"])
    argv[argv.index("reap") + 1] = "1"  # as if its parent had died before it could arm
    assert subprocess.run(argv, timeout=30).returncode == 1
    assert not marker.exists()


def test_die_with_parent_takes_the_signal_at_once_when_orphaned_already():
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from jobs.runtime import lifeline; "
        "lifeline.die_with_parent(9, parent=1); print('survived')"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert ran.returncode == -signal.SIGKILL and b"survived" not in ran.stdout


def test_forked_processes_die_with_the_process_that_forked_them(tmp_path, started):
    pids = tmp_path / "pids"
    main = spawn("-c", FORKS, str(ROOT), str(pids))
    started.append(psutil.Process(main.pid))
    wait_for(
        lambda: pids.exists() and len(pids.read_text().split()) == 2,
        timeout=30,
        message="the fork chain",
    )
    chain = [psutil.Process(int(pid)) for pid in pids.read_text().split()]
    started.extend(chain)
    os.kill(main.pid, signal.SIGKILL)
    main.wait(timeout=10)
    assert_gone(chain)
