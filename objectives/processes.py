"""Running one shell command for Factory (O-6, Q-4): tasks, checks, publication, planners.

`/bin/sh -c <command>` in its own process group (its own session), with a scrubbed
environment, a parent-death signal so it dies with the worker that started it (a retry
after a crash never runs beside an orphan), a timeout and an abort event that kill the
whole group, stdout/stderr kept in full in files and as tails reported at most once a
second. Whatever the command leaves behind in its group is killed when it exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

PR_SET_PDEATHSIG = 1
TAIL_CHARS = 4000
REPORT_EVERY_S = 1.0  # output tails reach job.progress at most this often
ALIVE_EVERY_S = 30.0  # a quiet command still reports progress (L-4 staleness is 90 s)
KILL_GRACE_S = 2.0
SAFE_ENV = ("PATH", "HOME", "LANG")

_libc: Any = None
try:  # Linux: the parent-death signal; elsewhere the process group kill still applies
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:  # pragma: no cover
    _libc = None


def scrubbed_env(extra: Mapping[str, str]) -> dict[str, str]:
    """PATH, HOME and LANG from this process plus `extra`: never the server's secrets (Q-4)."""
    env = {key: os.environ[key] for key in SAFE_ENV if key in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env.update(extra)
    return env


@dataclass(frozen=True)
class ProcessResult:
    exit_code: int | None
    pid: int
    timed_out: bool
    aborted: bool
    stdout_tail: str
    stderr_tail: str
    duration_ms: int


class _Tail:
    def __init__(self) -> None:
        self.data = bytearray()
        self.version = 0
        self.lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self.lock:
            self.data += chunk
            del self.data[:-TAIL_CHARS * 4]
            self.version += 1

    def text(self, limit: int = TAIL_CHARS) -> str:
        with self.lock:
            return bytes(self.data).decode("utf-8", errors="replace")[-limit:]


def _pump(source: IO[bytes], sink: Path, tail: _Tail) -> None:
    with open(sink, "ab") as out, contextlib.suppress(OSError, ValueError):
        fd = source.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            out.write(chunk)
            out.flush()
            tail.add(chunk)


def _preexec(parent: int) -> Callable[[], None]:
    def setup() -> None:
        if _libc is not None:
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
    return setup


def kill_group(pid: int, reap: Callable[[], Any] | None = None) -> None:
    """SIGTERM the group, SIGKILL whatever is left after KILL_GRACE_S. `reap` collects the
    leader (a zombie leader would keep the group alive to `killpg(pid, 0)`)."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if reap is not None:
                reap()
            try:
                os.killpg(pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


def run(command: str, *, cwd: Path, env: Mapping[str, str], stdout_path: Path,
        stderr_path: Path, stdin: bytes | None = None, timeout_s: float | None = None,
        aborted: threading.Event | None = None,
        on_start: Callable[[int], None] | None = None,
        on_output: Callable[[str, str], None] | None = None) -> ProcessResult:
    """Run `command` to its end, its timeout or an abort; see the module docstring."""
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    stderr_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command], cwd=cwd, env=dict(env),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=_preexec(os.getpid()), close_fds=True)
    out_tail, err_tail = _Tail(), _Tail()
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, stdout_path, out_tail), daemon=True),
             threading.Thread(target=_pump, args=(proc.stderr, stderr_path, err_tail), daemon=True)]
    for pump in pumps:
        pump.start()
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc, stdin), daemon=True).start()
    if on_start is not None:
        on_start(proc.pid)
    timed_out = was_aborted = False
    last_report, seen = time.monotonic(), (0, 0)
    while proc.poll() is None:
        if aborted is not None and aborted.wait(0.1):
            was_aborted = True
        elif aborted is None:
            time.sleep(0.1)
        if not was_aborted and timeout_s is not None and time.monotonic() - started > timeout_s:
            timed_out = True
        if was_aborted or timed_out:
            kill_group(proc.pid, proc.poll)
            break
        now = time.monotonic()
        versions = (out_tail.version, err_tail.version)
        due = now - last_report >= (REPORT_EVERY_S if versions != seen else ALIVE_EVERY_S)
        if on_output is not None and due:
            on_output(out_tail.text(), err_tail.text())
            last_report, seen = now, versions
    code = proc.wait()
    kill_group(proc.pid, proc.poll)  # leftovers of the group (background children) die too
    for pump in pumps:
        pump.join(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    return ProcessResult(exit_code=None if (timed_out or was_aborted) else code, pid=proc.pid,
                         timed_out=timed_out, aborted=was_aborted, stdout_tail=out_tail.text(),
                         stderr_tail=err_tail.text(),
                         duration_ms=int((time.monotonic() - started) * 1000))


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write(data)
    with contextlib.suppress(OSError):
        proc.stdin.close()
