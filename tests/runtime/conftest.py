"""Real runworker processes against this run's test database (C-3).

Short leases and loop intervals come from the environment, the same values patched into
this process's config, so enqueues here and workers there agree on timing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from jobs.models import WorkerProcess
from tests.conftest import subprocess_env, wait_for

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_ENV = {
    "JOB_LEASE_MS": "4000",
    "RECEIPT_RESONATE_QUEUED_REDRIVE_INTERVAL_MS": "300",
    "RECEIPT_RESONATE_QUEUED_REDRIVE_MIN_AGE_MS": "600",
    "RECEIPT_RESONATE_QUEUED_REDRIVE_COOLDOWN_MS": "600",
    "RECEIPT_RESONATE_QUEUED_REDRIVE_STARTUP_DELAY_MS": "100",
    "RESONATE_STARTUP_SETTLE_MS": "100",
    "RECEIPT_BROKER_POLL_MS": "20",
    "RECEIPT_HANDLER_MODULES": "tests.runtime.handlers,tests.integration.tasks.defs",
    "RUNWORKER_STOP_GRACE_S": "8",
    # These tests watch task commands through files outside their workspaces; the sandbox
    # has its own runtime test (test_sandbox.py), which asks for bwrap.
    "RECEIPT_COMMAND_SANDBOX": "host",
}
PATCHED = {
    "job_lease_ms": 4000,
    "queued_redrive_interval_ms": 300,
    "queued_redrive_min_age_ms": 600,
    "queued_redrive_cooldown_ms": 600,
    "queued_redrive_startup_delay_ms": 100,
    "startup_settle_ms": 100,
}


class Stack:
    """Started runworker processes of one test; stopped (or killed) at teardown."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp = tmp
        self.env = env
        self.marker = Path(env["RECEIPT_TEST_MARKER"])
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.counter = 0

    def start(
        self, role: str, *, name: str | None = None, wait: bool = True, **extra_env: str
    ) -> subprocess.Popen[bytes]:
        self.counter += 1
        name = name or f"{role}-{self.counter}"
        with open(self.tmp / f"{name}.log", "ab") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "runworker", "--role", role],
                cwd=ROOT,
                env={**self.env, **extra_env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[name] = proc
        if wait:
            wait_for(
                lambda: WorkerProcess.objects.filter(pid=proc.pid, stopped_at__isnull=True).exists()
                or proc.poll() is not None,
                timeout=30,
                message=f"runworker {role} to register",
            )
            assert proc.poll() is None, self.log(name)
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")[-4000:]

    def kill(self, name: str) -> None:
        """SIGKILL the whole runworker tree (main, sentinel, workers)."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the tree, if any

    def halt(self) -> None:
        """The end of a test: SIGKILL every runworker tree at once (what they leave behind
        is the test database's, which the next test starts without). A graceful stop costs
        each test about 2.5 s; the tests of stopping call `stop_all` themselves."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait(timeout=10)

    def marks(self, event: str | None = None, job_id: str | None = None) -> list[dict]:
        if not self.marker.exists():
            return []
        lines = [json.loads(line) for line in self.marker.read_text().splitlines() if line]
        return [
            m
            for m in lines
            if (event is None or m["event"] == event)
            and (job_id is None or m.get("jobId") == job_id)
        ]


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Path:
    """The wheel built from this tree, installed into a directory of its own (wheel.py)."""
    from tests.runtime import wheel

    return wheel.build_and_install(tmp_path_factory.mktemp("packaging"))


@pytest.fixture
def stack(transactional_db, tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, **PATCHED))
    env = subprocess_env(
        **RUNTIME_ENV,
        RECEIPT_TEST_MARKER=str(tmp_path / "marker.jsonl"),
        RECEIPT_DATA_DIR=str(settings.DATA_DIR),
    )
    running = Stack(tmp_path, env)
    yield running
    running.halt()


REDIS_URL = os.environ.get("RECEIPT_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")


def _redis_reachable() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping())
    except redis.RedisError:
        return False


@pytest.fixture(params=["database", "redis"])
def each_broker(request, stack, monkeypatch):
    """The stack with the database broker, then with `RECEIPT_BROKER=redis://...` (needs a
    Redis server: RECEIPT_TEST_REDIS_URL, default redis://127.0.0.1:6379/11; required when
    CI=true, skipped elsewhere without one)."""
    if request.param == "database":
        yield stack
        return
    if not _redis_reachable():
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis is not reachable at {REDIS_URL}; CI runs the Redis broker leg")
        pytest.skip(f"Redis is not reachable at {REDIS_URL}")
    import redis

    from jobs.runtime import transport

    redis.Redis.from_url(REDIS_URL).flushdb()
    yield use_redis(stack, monkeypatch, REDIS_URL)
    transport._broker.cache_clear()


def use_redis(stack: Stack, monkeypatch: pytest.MonkeyPatch, url: str) -> Stack:
    """`stack` with `RECEIPT_BROKER=url`, in its runworkers and in this process, which
    sends tasks too (the dispatch after an enqueue). Clear `transport._broker` at teardown."""
    from django_q.conf import Conf

    from jobs.runtime import transport

    cluster = {k: v for k, v in settings.Q_CLUSTER.items() if k not in ("orm", "broker_class")}
    monkeypatch.setattr(settings, "Q_CLUSTER", {**cluster, "redis": url})
    monkeypatch.setattr(Conf, "REDIS", url)
    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "BROKER_CLASS", None)
    transport._broker.cache_clear()
    stack.env["RECEIPT_BROKER"] = url
    return stack
