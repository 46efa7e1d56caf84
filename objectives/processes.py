"""Running one shell command for Factory (O-6, Q-4): tasks, checks, publication, planners.

`/bin/sh -c <command>` with a scrubbed environment, a timeout and an abort event, stdout/
stderr kept in full in files and as tails reported at most once a second. No orphans: the
command runs under a small reaper (`jobs.runtime.lifeline`: its own session, a child
subreaper) that dies with the worker thread that started it, and whenever it stops (the
command's exit, a timeout or abort: SIGTERM from here, the worker's death: its
parent-death signal) kills the command's process group and every descendant (children,
grandchildren, whatever double-forked or `setsid` away) before it exits with the
command's status. A retry after a crash never runs beside an orphan, and whatever the
command leaves behind when it exits dies too. What the reaper starts is
`jobs.runtime.sandbox`'s to say (Q-5): given a `jail`, the command runs in its sandbox.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from jobs.runtime import lifeline, sandbox, spawned
from observability.logs import log_event
from receipts.core.storable import storable_text

logger = logging.getLogger("receipt.processes")

TAIL_CHARS = 4000
REPORT_EVERY_S = 1.0  # output tails reach job.progress at most this often
ALIVE_EVERY_S = 30.0  # a quiet command still reports progress (its output tails stay fresh)
KILL_GRACE_S = lifeline.KILL_GRACE_S  # the reaper's SIGTERM -> SIGKILL of the command's tree
REAPER_MARGIN_S = 5.0  # a reaper still there this long after its grace is SIGKILLed
SAFE_ENV = ("PATH", "HOME", "LANG")


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
            del self.data[: -TAIL_CHARS * 4]
            self.version += 1

    def text(self, limit: int = TAIL_CHARS) -> str:
        """The tail as text a receipt can hold: invalid UTF-8 and NUL become U+FFFD."""
        with self.lock:
            return storable_text(bytes(self.data).decode("utf-8", errors="replace")[-limit:])


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


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a command started by `run`: SIGTERM its reaper, which TERMs the command's tree,
    KILLs what is left after KILL_GRACE_S and exits. SIGKILL the reaper only if it does not
    (then the command's shell still dies of its parent-death signal)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S + REAPER_MARGIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdout_path: Path,
    stderr_path: Path,
    stdin: bytes | None = None,
    timeout_s: float | None = None,
    aborted: threading.Event | None = None,
    on_start: Callable[[int], object] | None = None,
    on_output: Callable[[str, str], None] | None = None,
    jail: sandbox.Jail | None = None,
) -> ProcessResult:
    """Run `command` to its end, its timeout or an abort; see the module docstring. With a
    `jail` it runs in the sandbox (raises `sandbox.Unavailable` when commands cannot run)."""
    launch = sandbox.launch(command, cwd=cwd, env=env, jail=jail)
    stdout_path.parent.mkdir(parents=True, exist_ok=True)
    stderr_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # The reaper gets a session of its own: a signal to our group (a group SIGKILL) must not
    # reach it before it has killed the command. No preexec_fn (unsafe in a threaded
    # worker): the reaper arms its own parent-death signal. `pid` is the reaper's from here.
    proc = subprocess.Popen(
        lifeline.reaper_argv(launch.argv),
        cwd=launch.cwd,
        env=launch.env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    with spawned.command(proc.pid):  # a handler that started it is never run again (C-9)
        return _follow(
            proc, started, stdout_path, stderr_path, stdin, timeout_s, aborted, on_start, on_output
        )


def _follow(
    proc: subprocess.Popen[bytes],
    started: float,
    stdout_path: Path,
    stderr_path: Path,
    stdin: bytes | None,
    timeout_s: float | None,
    aborted: threading.Event | None,
    on_start: Callable[[int], object] | None,
    on_output: Callable[[str, str], None] | None,
) -> ProcessResult:
    """Pump the output, report it, and wait for the end, a timeout or an abort. Whatever
    goes wrong here stops the command before it propagates: nothing outlives the call."""
    out_tail, err_tail = _Tail(), _Tail()
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, stdout_path, out_tail), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, stderr_path, err_tail), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc, stdin), daemon=True).start()
    timed_out = was_aborted = False
    try:
        if on_start is not None:
            _report(on_start, proc.pid)
        last_report, seen = time.monotonic(), (0, 0)
        while proc.poll() is None:
            if aborted is not None and aborted.wait(0.1):
                was_aborted = True
            elif aborted is None:
                time.sleep(0.1)
            if not was_aborted and timeout_s is not None and time.monotonic() - started > timeout_s:
                timed_out = True
            if was_aborted or timed_out:
                stop(proc)
                break
            now = time.monotonic()
            versions = (out_tail.version, err_tail.version)
            due = now - last_report >= (REPORT_EVERY_S if versions != seen else ALIVE_EVERY_S)
            if on_output is not None and due:
                _report(on_output, out_tail.text(), err_tail.text())
                last_report, seen = now, versions
    except BaseException:
        stop(proc)
        raise
    code = proc.wait()  # the reaper exits once the command and all it left behind are gone
    for pump in pumps:
        pump.join(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    return ProcessResult(
        exit_code=None if (timed_out or was_aborted) else code,
        pid=proc.pid,
        timed_out=timed_out,
        aborted=was_aborted,
        stdout_tail=out_tail.text(),
        stderr_tail=err_tail.text(),
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def _report(callback: Callable[..., object], *args: object) -> None:
    """A report that fails (its progress write met the database down, say) is dropped and
    logged: the command runs on and the next report replaces it. Leaving the loop here
    would leave the command running unwatched while the handler is run again (C-9)."""
    try:
        callback(*args)
    except Exception as error:
        log_event(
            logger,
            "process.report_dropped",
            f"a progress report of a running command failed and was dropped: {error}",
            level=logging.WARNING,
            error=type(error).__name__,
        )


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write(data)
    with contextlib.suppress(OSError):
        proc.stdin.close()
