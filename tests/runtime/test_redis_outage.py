"""The Redis broker survives Redis (D-2, L-1): restarted, and down for 20 s, while jobs run.

The test starts its own `redis-server` (no persistence, as a cache-only Redis runs: a
restart forgets every queued task) on a free port, never the machine's shared one. The
runworkers use it through `RECEIPT_BROKER=redis://...`, and so does this process, which
enqueues. Leases are the production default: nothing here may be recovered by a short
lease or promise timeout running out.

- A restart while tasks wait in Redis: they are gone with it, and the jobs still run.
- Down for 20 s: enqueues keep answering (the job is written; its delivery waits), the
  same runworker processes serve again once Redis is back, nothing is lost.
- Nothing is doubled: every job settles once, on its first attempt, its handler started
  once; chains verify and the read model equals the fold.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db.models import Sum

from jobs.models import Counter, Job
from tests.conftest import wait_for
from tests.runtime.conftest import use_redis
from tests.runtime.helpers import assert_settled_once, enqueue

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.postgres_only,  # the Redis broker is a PostgreSQL deployment's (P-2)
    pytest.mark.django_db(transaction=True),
]

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
OUTAGE_S = 20.0  # the outage itself: waiting on the wall clock is the point
DEFAULT_LEASE_MS = 300_000
CHAT_QUEUE = "django_q:worker-chat:q"


class RedisServer:
    """A redis-server of this test's own, on a fixed port across restarts."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.directory / "redis.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_for(self.answers, timeout=20, message=f"redis-server on port {self.port}")

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)

    def answers(self) -> bool:
        import redis

        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def client(self):
        import redis

        return redis.Redis.from_url(self.url, socket_connect_timeout=1, socket_timeout=2)

    def waiting(self, key: str) -> int:
        return int(self.client().llen(key))


@pytest.fixture
def own_redis(stack, tmp_path, monkeypatch):
    if not os.path.exists(REDIS_SERVER):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{REDIS_SERVER} is missing; CI runs the Redis outage test")
        pytest.skip(f"{REDIS_SERVER} is missing")
    from jobs.runtime import transport

    server = RedisServer(tmp_path)
    server.start()
    monkeypatch.setattr(
        settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, job_lease_ms=DEFAULT_LEASE_MS)
    )
    stack.env["JOB_LEASE_MS"] = str(DEFAULT_LEASE_MS)
    use_redis(stack, monkeypatch, server.url)
    yield stack, server
    stack.stop_all()
    server.stop()
    transport._broker.cache_clear()


def _burst(count: int, sleep_ms: int) -> list[str]:
    return [enqueue("test-sleep", sleepMs=sleep_ms).job_id for _ in range(count)]


def _all_completed(stack, job_ids: list[str], timeout: float, what: str) -> None:
    def done() -> bool:
        return Job.objects.filter(pk__in=job_ids, status="completed").count() == len(job_ids)

    try:
        wait_for(done, timeout=timeout, interval=0.2, message=what)
    except AssertionError:
        left = dict(
            Job.objects.filter(pk__in=job_ids)
            .exclude(status="completed")
            .values_list("id", "status")
        )
        raise AssertionError(
            f"{what}: not completed {left}\n{stack.log('driver')}\n{stack.log('chat')}"
        ) from None


def test_jobs_survive_a_redis_restart_and_a_20s_outage(own_redis):
    stack, server = own_redis
    driver = stack.start("driver", name="driver")
    chat = stack.start("chat", name="chat")
    jobs: list[str] = []

    # A restart: tasks waiting in Redis when it stops are forgotten by the new server.
    jobs += _burst(12, 1500)  # more than chat's concurrency: some wait in Redis
    wait_for(lambda: stack.marks("start"), timeout=30, message="chat to run the first")
    wait_for(lambda: server.waiting(CHAT_QUEUE) > 0, timeout=30, message="tasks in Redis")
    server.stop(signal.SIGTERM)
    server.start()
    assert server.waiting(CHAT_QUEUE) == 0  # what waited is gone
    _all_completed(stack, jobs, 90, "the jobs of the restart")

    # An outage of 20 s, entered with tasks waiting in Redis, with enqueues during it.
    jobs += _burst(8, 1500)
    wait_for(lambda: server.waiting(CHAT_QUEUE) > 0, timeout=30, message="tasks in Redis")
    server.stop(signal.SIGKILL)
    down_at = time.monotonic()
    jobs += _burst(6, 200)  # enqueues keep answering (the API's path): each job is written
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
    server.start()
    _all_completed(stack, jobs, 120, "the jobs of the outage")

    # The same processes reconnected by themselves and serve new work at once.
    assert driver.poll() is None and chat.poll() is None
    after = _burst(3, 10)
    _all_completed(stack, after, 30, "jobs enqueued after the outage")
    jobs += after

    # what Redis forgot came back from the promises (no timeout ran out at these leases)
    repushed = Counter.objects.filter(name="receipt_redis_repushed_total")
    assert (repushed.aggregate(total=Sum("value"))["total"] or 0) > 0
    for job_id in jobs:
        assert_settled_once(job_id)
        starts = stack.marks("start", job_id)
        assert [m["attempt"] for m in starts] == [1], (job_id, starts)
