"""A small process supervisor for development (P-3): every role as a child process,
a crashed child restarted with backoff 1 s doubling to 30 s."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

from observability.logs import log_event

logger = logging.getLogger("receipt.supervisor")
BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0  # a child that ran this long is healthy again: backoff starts over


def next_backoff(previous_s: float | None) -> float:
    """1, 2, 4, ... capped at 30 seconds."""
    if previous_s is None:
        return BACKOFF_START_S
    return min(BACKOFF_MAX_S, previous_s * 2)


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff_s: float | None = None
    restart_at: float | None = None
    restarts: int = 0
    env: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        env = {**os.environ, **self.env}
        # Each child leads its own process group so a stop reaches its whole tree.
        self.process = subprocess.Popen(self.argv, env=env, start_new_session=True)
        self.started_at = time.monotonic()
        self.restart_at = None
        log_event(
            logger,
            "supervisor.started",
            f"started {self.name} (pid {self.process.pid})",
            child=self.name,
            pid=self.process.pid,
        )


class Supervisor:
    def __init__(self, children: list[Child], *, stop_grace_s: float = 20.0) -> None:
        self.children = children
        self.stop_grace_s = stop_grace_s
        self.stopping = False

    def request_stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        for child in self.children:
            child.start()
        while not self.stopping:
            now = time.monotonic()
            for child in self.children:
                self._watch(child, now)
            time.sleep(0.2)
        self._stop_all()
        return 0

    def _watch(self, child: Child, now: float) -> None:
        if child.process is not None:
            code = child.process.poll()
            if code is None:
                return
            ran_for = now - child.started_at
            if ran_for >= STABLE_AFTER_S:
                child.backoff_s = None
            child.backoff_s = next_backoff(child.backoff_s)
            child.restart_at = now + child.backoff_s
            child.process = None
            log_event(
                logger,
                "supervisor.child_exited",
                f"{child.name} exited with {code}; restarting in {child.backoff_s:.0f}s",
                level=logging.WARNING,
                child=child.name,
                code=code,
                backoff_s=child.backoff_s,
            )
            return
        if child.restart_at is not None and now >= child.restart_at:
            child.restarts += 1
            child.start()

    def _stop_all(self) -> None:
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
