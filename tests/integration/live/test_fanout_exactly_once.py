"""T-6 / E-1 / E-2: under concurrent writers, every client of one process gets every receipt
it subscribed to exactly once and in order, whatever batches the feed coalesces them into,
and the process holds one LISTEN connection on PostgreSQL. (Latency and memory at 1,000
clients are measured in bench/sse_load.py, never asserted here.)"""

from __future__ import annotations

import asyncio
import threading
import uuid

import httpx
import pytest
from django.db import connection, connections

from jobs import queue
from receipts import store
from tests.integration.live.conftest import enqueue
from tests.integration.live.sse_client import Frame, aparse
from tests.integration.live.test_fanout import in_thread, listener_pids

pytestmark = pytest.mark.django_db(transaction=True)
STREAM_CLIENTS = 30
JOB_CLIENTS = 20
JOBS = 5
WRITERS = 3
WRITES_PER_WRITER = 12


async def collect(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    ready: asyncio.Event,
    counter: list[int],
    final: asyncio.Future[int],
) -> tuple[int, list[Frame]]:
    """One client: (its first id, every frame with an id after it) until an id reaches the
    final sequence number (a receipt or a ping carrying the position)."""
    async with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        start: int | None = None
        frames: list[Frame] = []
        async for frame in aparse(response.aiter_lines()):
            if start is None:
                if frame.id is None:
                    continue  # the init's `job` frame follows its job-refresh
                start = frame.id  # the stream's ping, or the job's init
                counter.append(1)
                if len(counter) == STREAM_CLIENTS + JOB_CLIENTS:
                    ready.set()
                continue
            if frame.id is not None:
                frames.append(frame)
                if final.done() and frame.id >= final.result():
                    return start, frames
    raise AssertionError(f"{url} ended early after {frames[-5:]}")


def write_concurrently(prefix: str, job_ids: list[str]) -> int:
    """WRITERS threads at once, each appending to its own streams under `prefix` and
    steering the jobs: transactions overlap, so the feed's horizon has open writers."""
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(WRITES_PER_WRITER):
                store.append(f"{prefix}{n}-{i % 3}", {"type": "fanout.t", "i": i})
                queue.steer(job_ids[(n + i) % len(job_ids)], {"i": i}, by="test")
        except BaseException as error:  # re-raised in the test's thread
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT max(seq) FROM receipt_receipt")
        return cursor.fetchone()[0]


def receipts_after(
    start: int, *, prefix: str | None = None, stream: str | None = None
) -> list[int]:
    """Global sequence numbers after `start` of the streams under `prefix` or of `stream`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq, stream FROM receipt_receipt WHERE seq > %s ORDER BY seq", [start]
        )
        found = cursor.fetchall()
    return [
        seq
        for seq, name in found
        if (prefix is None or name.startswith(prefix)) and (stream is None or name == stream)
    ]


async def fan_out(server, reader: str, prefix: str, job_ids: list[str]):
    headers = {"Authorization": f"Bearer {reader}"}
    plan = [f"{server.url}/receipt/stream?prefix={prefix}"] * STREAM_CLIENTS + [
        f"{server.url}/jobs/{job_ids[i % len(job_ids)]}/events" for i in range(JOB_CLIENTS)
    ]
    total = len(plan)
    limits = httpx.Limits(max_connections=total + 10, max_keepalive_connections=total + 10)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60.0)) as client:
        ready, counter = asyncio.Event(), list[int]()
        final: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        tasks = [
            asyncio.create_task(collect(client, url, headers, ready, counter, final))
            for url in plan
        ]
        try:
            async with asyncio.timeout(60):
                waiter = asyncio.create_task(ready.wait())
                done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
                assert waiter in done, [t.result() for t in done]
            listeners = None
            if connection.vendor == "postgresql":
                listeners = await in_thread(listener_pids, server.proc.pid)
            last = await in_thread(write_concurrently, prefix, job_ids)
            final.set_result(last)
            async with asyncio.timeout(60):
                results = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return plan, results, last, listeners


def test_fifty_clients_get_every_receipt_exactly_once_in_order_under_concurrent_writers(
    server, reader
):
    prefix = f"live-test/fanout-{uuid.uuid4().hex[:8]}/"
    job_ids = [enqueue().job_id for _ in range(JOBS)]
    plan, results, last, listeners = asyncio.run(fan_out(server, reader, prefix, job_ids))
    for url, (start, frames) in zip(plan, results, strict=True):
        if "/receipt/stream" in url:
            got = [f.id for f in frames if f.event == "receipt-refresh" and f.id <= last]
            expected = receipts_after(start, prefix=prefix)
        else:
            job_id = url.rsplit("/", 2)[-2]
            got = [f.id for f in frames if f.event == "job-refresh" and f.id <= last]
            expected = receipts_after(start, stream=f"jobs/{job_id}")
        expected = [seq for seq in expected if seq <= last]
        assert got == expected, url  # every one, once, ascending
        assert expected, url  # and the writes did reach every client's subscription
    if listeners is not None:
        assert len(listeners) == 1  # one LISTEN connection for every client of the process
