"""A small process supervisor for development (P-3): every role as a child process,
a crashed child restarted with backoff 1 s doubling to 30 s.

A child that fails at startup the same way every time (it exits within
STARTUP_WINDOW_S of starting, FAILING_AFTER times in a row, with the same last error line
on its stderr) will not be cured by restarting: the supervisor says so once as an error
naming that line, keeps retrying (the cause may go away, a port be freed), and writes the
failing children to a status file that `/healthz` reads (`failing_children`), so the
stack shows degraded instead of retrying in silence. Recovery is logged and cleared.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from observability.logs import log_event

logger = logging.getLogger("receipt.supervisor")
BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0  # a child that ran this long is healthy again: backoff starts over
STARTUP_WINDOW_S = 10.0  # a child that exits sooner than this after starting failed to start
FAILING_AFTER = 3  # startup failures in a row with the same cause before it is reported
STATUS_FILE = "runstack-status.json"  # in the data directory: the supervisor's report
_KEPT_LINES = 40  # of each child's stderr, to find the cause of an exit


def next_backoff(previous_s: float | None) -> float:
    """1, 2, 4, ... capped at 30 seconds."""
    if previous_s is None:
        return BACKOFF_START_S
    return min(BACKOFF_MAX_S, previous_s * 2)


def cause_of(lines: list[str], code: int) -> str:
    """The line that says why a child exited: the last one naming an error, else its last
    line, else its exit code."""
    said = [line.strip() for line in lines if line.strip()]
    for line in reversed(said):
        if "error" in line.lower() or "exception" in line.lower():
            return line[:500]
    return said[-1][:500] if said else f"exited with {code}"


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff_s: float | None = None
    restart_at: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    # why it failed to start, and how many times in a row the same way
    last_cause: str | None = None
    startup_failures: int = 0
    failing_since_ms: int | None = None  # set while reported as failing at startup
    _output: deque[str] = field(default_factory=lambda: deque(maxlen=_KEPT_LINES))
    _reader: threading.Thread | None = None

    def start(self, now: float) -> None:
        env = {**os.environ, **self.env}
        # Each child leads its own process group so a stop reaches its whole tree. Its
        # stderr passes through the supervisor, which keeps the last lines for the cause.
        self.process = subprocess.Popen(
            self.argv, env=env, start_new_session=True, stderr=subprocess.PIPE
        )
        self._output.clear()
        assert self.process.stderr is not None
        self._reader = threading.Thread(
            target=self._relay, args=(self.process.stderr,), daemon=True, name=f"relay-{self.name}"
        )
        self._reader.start()
        self.started_at = now
        self.restart_at = None
        log_event(
            logger,
            "supervisor.started",
            f"started {self.name} (pid {self.process.pid})",
            child=self.name,
            pid=self.process.pid,
        )

    def _relay(self, stream: IO[bytes]) -> None:
        out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
        for raw in stream:
            if out is not None:
                with contextlib.suppress(OSError, ValueError):
                    out.write(raw)
                    out.flush()
            self._output.append(raw.decode(errors="replace").rstrip("\n"))
        stream.close()

    def output(self) -> list[str]:
        """Its last stderr lines, once the child's stream ended (or after a second: a
        grandchild may keep it open)."""
        if self._reader is not None:
            self._reader.join(timeout=1.0)
        return list(self._output)


class Supervisor:
    def __init__(
        self,
        children: list[Child],
        *,
        stop_grace_s: float = 20.0,
        status_path: Path | None = None,
    ) -> None:
        self.children = children
        self.stop_grace_s = stop_grace_s
        self.status_path = status_path
        self.stopping = False

    def request_stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        self.start_all(time.monotonic())
        while not self.stopping:
            self.step(time.monotonic())
            time.sleep(0.2)
        self.stop_all()
        return 0

    def start_all(self, now: float) -> None:
        self._write_status()  # a status left by an earlier supervisor is stale
        for child in self.children:
            child.start(now)

    def step(self, now: float) -> None:
        for child in self.children:
            self._watch(child, now)

    def _watch(self, child: Child, now: float) -> None:
        if child.process is not None:
            code = child.process.poll()
            if code is None:
                if (
                    child.failing_since_ms is not None
                    and now - child.started_at >= STARTUP_WINDOW_S
                ):
                    self._recovered(child)
                return
            ran_for = now - child.started_at
            if ran_for >= STABLE_AFTER_S:
                child.backoff_s = None
            child.backoff_s = next_backoff(child.backoff_s)
            child.restart_at = now + child.backoff_s
            child.process = None
            cause = cause_of(child.output(), code)
            log_event(
                logger,
                "supervisor.child_exited",
                f"{child.name} exited with {code}; restarting in {child.backoff_s:.0f}s",
                level=logging.WARNING,
                child=child.name,
                code=code,
                backoff_s=child.backoff_s,
                cause=cause,
            )
            self._note_exit(child, cause, failed_at_startup=ran_for < STARTUP_WINDOW_S)
            return
        if child.restart_at is not None and now >= child.restart_at:
            child.start(now)

    def _note_exit(self, child: Child, cause: str, *, failed_at_startup: bool) -> None:
        if not failed_at_startup:
            if child.failing_since_ms is not None:
                self._recovered(child)  # it ran past its startup before it exited
            child.startup_failures, child.last_cause = 0, None
            return
        same = cause == child.last_cause
        child.startup_failures = child.startup_failures + 1 if same else 1
        child.last_cause = cause
        if child.startup_failures < FAILING_AFTER or (child.failing_since_ms is not None and same):
            return  # not yet the same way every time, or already said
        child.failing_since_ms = int(time.time() * 1000)
        log_event(
            logger,
            "supervisor.child_failing",
            f"{child.name} fails at startup the same way every time "
            f"({child.startup_failures} tries): {cause}. Restarting it will not help until "
            f"that is fixed; still retrying every {child.backoff_s:.0f}s",
            level=logging.ERROR,
            child=child.name,
            cause=cause,
            failures=child.startup_failures,
        )
        self._write_status()

    def _recovered(self, child: Child) -> None:
        child.failing_since_ms = None
        child.startup_failures, child.last_cause = 0, None
        log_event(
            logger,
            "supervisor.child_recovered",
            f"{child.name} got past its startup again",
            child=child.name,
        )
        self._write_status()

    def _write_status(self) -> None:
        """The children failing at startup, for /healthz: written whole, then renamed."""
        if self.status_path is None:
            return
        failing = [
            {
                "child": c.name,
                "cause": c.last_cause,
                "failures": c.startup_failures,
                "since": c.failing_since_ms,
            }
            for c in self.children
            if c.failing_since_ms is not None
        ]
        body = json.dumps({"pid": os.getpid(), "failing": failing})
        partial = self.status_path.with_name(self.status_path.name + ".partial")
        with contextlib.suppress(OSError):  # a report, never a reason to stop supervising
            partial.write_text(body)
            partial.replace(self.status_path)

    def stop_all(self) -> None:
        # SIGTERM the main process of each child only (not its group): django-q2 clusters
        # drain gracefully on that, and hang on a group-wide SIGTERM (django-q2#346).
        live = [c for c in self.children if c.process and c.process.poll() is None]
        for child in live:
            assert child.process is not None
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        for child in live:
            assert child.process is not None
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.process.pid, signal.SIGKILL)
        if self.status_path is not None:
            with contextlib.suppress(OSError):
                self.status_path.unlink()


def failing_children(status_path: Path) -> list[dict[str, Any]]:
    """The children a running supervisor reports failing at startup; [] when there is no
    report, or its supervisor is gone (a report outlives a supervisor killed hard)."""
    try:
        report = json.loads(status_path.read_text())
        pid = int(report["pid"])
        failing = list(report["failing"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass  # alive, under another user
    return failing
