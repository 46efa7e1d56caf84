"""No orphans: nothing a `runworker` starts outlives it (requirement "No orphans").

Standard library only and no Django at import, for two users:

- `Cluster` (runworker): django-q2's cluster whose every forked process dies with the
  process that forked it. runworker's main pid may be SIGKILLed (OOM killer, an operator,
  a supervisor that signals only the main pid); then none of its code runs, so the
  kernel must do it: the sentinel gets PR_SET_PDEATHSIG=SIGKILL towards the main process,
  the workers, pusher and monitor (and their reincarnations) towards the sentinel.
- the reaper (`objectives.processes`): every task command runs as
  `python -I -S lifeline.py reap <parent pid> -- /bin/sh -c <command>`. A parent-death
  signal alone only reaches the direct child (`sh`), never what it started, so the reaper
  runs the command in a session of its own, is a child subreaper (descendants that
  double-fork or `setsid` away are still re-parented to it), and on the death of its
  parent (its own parent-death signal), SIGTERM, or the command's exit, kills the command's
  group and every descendant before it exits with the command's status.

Parent-death signals and subreapers are Linux's: elsewhere they are no-ops, django-q2's
processes are on their own, and the reaper still notices its parent's death (it polls
every POLL_S) and kills the command's process group.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time
from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
KILL_GRACE_S = 2.0  # SIGTERM -> SIGKILL for a stop or a command's leftovers; none once orphaned
POLL_S = 0.5  # the reaper re-checks its parent this often, whatever the signals say
SWEEP_POLL_S = 0.05
UNKILLABLE_AFTER_S = 10.0  # SIGKILLed this long and still there (uninterruptible I/O): give up
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})

_libc: Any = None
if sys.platform.startswith("linux"):
    try:  # the running program's symbols include libc's prctl (no find_library subprocess)
        _libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover
        _libc = None


ARMED = _libc is not None  # parent-death signals and subreapers work here
REAPER_SCRIPT = os.path.abspath(__file__)


def _prctl(option: int, value: int) -> bool:
    return _libc is not None and _libc.prctl(option, value, 0, 0, 0) == 0


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Have the kernel send `sig` to this process when its parent dies (Linux; a no-op
    returning False elsewhere). Strictly: when the parent *thread* that forked us exits, so
    fork from a thread that lives as long as the child should.

    `parent` is the pid that forked us: if it is no longer our parent it died before the
    signal was armed, and we take `sig` now rather than live on as an orphan."""
    if not _prctl(PR_SET_PDEATHSIG, int(sig)):
        return False
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return True


# --- django-q2 -------------------------------------------------------------------------


class _Registered:
    """The after-fork registry keeps weak references: this module-level one lives on."""


_AFTER_FORK = _Registered()
_registered = False


def _die_with_forker(_: object) -> None:
    # multiprocessing runs this in every child it forks (Process._bootstrap ->
    # util._run_after_forkers), before the target: the sentinel, and -- the registry being
    # inherited -- every worker, pusher and monitor the sentinel forks, reincarnations too.
    import multiprocessing

    forker = multiprocessing.parent_process()
    die_with_parent(signal.SIGKILL, forker.pid if forker is not None else None)


def forks_die_with_parents() -> None:
    """From now on every process multiprocessing forks from this one, and from those, gets
    SIGKILL when the process that forked it dies (idempotent)."""
    global _registered
    if not _registered:
        import multiprocessing.util

        multiprocessing.util.register_after_fork(_AFTER_FORK, _die_with_forker)
        _registered = True


def _cluster_class() -> type:
    import threading

    from django_q.cluster import Cluster as QCluster

    class Cluster(QCluster):
        """django_q.cluster.Cluster whose processes die with their parents (see module)."""

        def start(self) -> int:
            # the parent-death signal follows the forking *thread*: a sentinel forked by a
            # thread that then ends would be killed at once
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError(
                    "start the cluster from the main thread (parent-death "
                    "signals follow the thread that forks the sentinel)"
                )
            forks_die_with_parents()
            from jobs.runtime import pusher

            pusher.install()  # tasks the promise broker built are not signed to be unsigned
            return int(super().start())

    return Cluster


_cluster: type | None = None


def __getattr__(name: str) -> Any:
    """`lifeline.Cluster`, built on first use: django_q.cluster needs configured Django."""
    global _cluster
    if name == "Cluster":
        if _cluster is None:
            _cluster = _cluster_class()
        return _cluster
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- the reaper --------------------------------------------------------------------------


def reaper_argv(argv: list[str]) -> list[str]:
    """The argv that runs `argv` under the reaper, as a child of this process. Start it in a
    session of its own (start_new_session=True) so a signal to our process group (a group
    SIGKILL) cannot kill it before it has killed the command."""
    return [sys.executable, "-I", "-S", REAPER_SCRIPT, "reap", str(os.getpid()), "--", *argv]


def is_reaper(cmdline: list[str]) -> bool:
    """Whether a process with this argv is a reaper (see `reaper_argv`)."""
    return cmdline[1:5] == ["-I", "-S", REAPER_SCRIPT, "reap"]


def _descendants(root: int) -> list[int]:
    """Live (non-zombie) descendants of `root`, from /proc; [] where there is no /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    children: dict[int, list[int]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # the command name may hold spaces
        if len(fields) > 1 and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(group: int, sig: int) -> bool:
    """`sig` to the command's process group and to every descendant of this reaper (those
    that left the group included); True if anything was left to signal."""
    hit = False
    try:
        os.killpg(group, sig)
        hit = True
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, sig)
            hit = True
        except (ProcessLookupError, PermissionError):
            pass
    return hit


class _Reaper:
    def __init__(self, parent: int, argv: list[str]) -> None:
        self.parent = parent
        self.argv = argv
        self.command = 0
        self.status: int | None = None
        self.wakeup = -1

    def orphaned(self) -> bool:
        return os.getppid() != self.parent

    def listen(self) -> None:
        """Signals become bytes on a pipe (portable, unlike sigtimedwait); until this runs a
        SIGTERM simply kills the reaper, which has started nothing yet."""
        self.wakeup, write = os.pipe()  # close-on-exec: the command never holds them
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)  # bytes lost: we poll too
        for sig in (*STOP_SIGNALS, signal.SIGCHLD):
            signal.signal(sig, lambda signum, frame: None)

    def next_signals(self, timeout: float) -> set[int]:
        """Signal numbers received within `timeout` (an empty set when none)."""
        try:
            ready, _, _ = select.select([self.wakeup], [], [], timeout)
            return set(os.read(self.wakeup, 65536)) if ready else set()
        except InterruptedError:  # pragma: no cover - PEP 475 retries; belt and braces
            return set()

    def reap(self) -> None:
        """Collect exited children: the command (keeping its status) and adopted orphans."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.command:
                self.status = status

    def spawn(self) -> None:
        me = os.getpid()
        pid = os.fork()
        if pid:
            self.command = pid
            return
        try:  # the command: its own session and group, killed if the reaper is SIGKILLed
            signal.set_wakeup_fd(-1)
            os.setsid()
            die_with_parent(signal.SIGKILL, me)
            for ignored in (signal.SIGPIPE, signal.SIGXFSZ):  # Python's, not the command's
                signal.signal(ignored, signal.SIG_DFL)
            os.execv(self.argv[0], self.argv)
        except BaseException as error:  # never return into the reaper's code
            os.write(2, f"reaper: cannot run {self.argv[0]}: {error}\n".encode())
        os._exit(127)

    def sweep(self, grace: float) -> None:
        """TERM the command's tree, KILL what is left after `grace` (at once when orphaned or
        stopped again); return when nothing of it is left (or only the unkillable is)."""
        deadline = time.monotonic() + grace
        killing = grace <= 0
        alive = _signal_all(self.command, signal.SIGKILL if killing else signal.SIGTERM)
        while alive and time.monotonic() < deadline + UNKILLABLE_AFTER_S:
            got = self.next_signals(SWEEP_POLL_S)
            self.reap()
            if (got & STOP_SIGNALS or self.orphaned()) and not killing:
                deadline = time.monotonic()
            if not killing and time.monotonic() >= deadline:
                killing = True
            alive = _signal_all(self.command, signal.SIGKILL if killing else 0)
        self.reap()

    def run(self) -> NoReturn:
        self.listen()
        # armed before anything starts; a parent already gone means nothing is started
        die_with_parent(signal.SIGTERM, self.parent)
        if self.orphaned():
            os._exit(1)
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        self.spawn()
        stopped = False
        while self.status is None and not stopped:
            stopped = bool(self.next_signals(POLL_S) & STOP_SIGNALS) or self.orphaned()
            self.reap()
        # nobody waits for an orphan's command: kill it at once (a retry may start beside it)
        self.sweep(0.0 if self.orphaned() else KILL_GRACE_S)
        self.exit()

    def exit(self) -> NoReturn:
        status = self.status
        if status is None or not os.WIFSIGNALED(status):
            os._exit(os.WEXITSTATUS(status) if status is not None else 128 + signal.SIGKILL)
        sig = os.WTERMSIG(status)  # die of the command's signal, so the caller sees it
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the command's core, not ours
            signal.set_wakeup_fd(-1)
            if sig != signal.SIGKILL:
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass
        os._exit(128 + sig)  # a signal whose default is not to terminate


def _main(args: list[str]) -> NoReturn:
    if len(args) < 4 or args[0] != "reap" or args[2] != "--":
        sys.stderr.write("usage: lifeline.py reap <parent pid> -- <argv...>\n")
        os._exit(2)
    _Reaper(int(args[1]), args[3:]).run()


if __name__ == "__main__":
    _main(sys.argv[1:])
