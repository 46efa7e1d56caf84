"""T-6 / E-3: many SSE clients on one process share one feed and, on PostgreSQL, one
LISTEN connection; one append reaches all of them. Memory is printed, never asserted."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psutil
import pytest
from django.conf import settings
from django.db import connection, connections

from jobs import queue
from receipts import store
from receipts.live.config import CONFIG
from tests.conftest import wait_for
from tests.integration.live.conftest import enqueue
from tests.integration.live.sse_client import Frame, aparse
from tests.support import present

pytestmark = pytest.mark.django_db(transaction=True)
CLIENTS = 200


def listener_pids(server_pid: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
            "AND query ILIKE 'LISTEN%%'",
            [f"receipt-live-listener:{server_pid}"],
        )
        return [row[0] for row in cursor.fetchall()]


def database_sockets(server_pid: int) -> int:
    port = int(settings.DATABASES["default"].get("PORT") or 5432)
    return sum(
        1
        for c in psutil.Process(server_pid).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port
    )


def in_thread(fn, *args):
    """Django from inside asyncio.run: on a worker thread that closes its connection."""

    def call():
        try:
            return fn(*args)
        finally:
            connections.close_all()

    return asyncio.to_thread(call)


async def follow(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    connected: list[int],
    everyone: asyncio.Event,
) -> Frame:
    """One client: counts itself once it has the job, returns the first job-refresh with an id."""
    async with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        counted = False
        async for frame in aparse(response.aiter_lines()):
            if frame.event == "job" and not counted:
                counted = True
                connected.append(1)
                if len(connected) == CLIENTS:
                    everyone.set()
            if frame.event == "job-refresh" and frame.data != "init":
                return frame
    raise AssertionError("stream ended without a job-refresh")


async def fan_out(server, reader: str, job_id: str, report: dict[str, object]) -> list[Frame]:
    server_process = psutil.Process(server.proc.pid)
    url = f"{server.url}/jobs/{job_id}/events"
    headers = {"Authorization": f"Bearer {reader}"}
    limits = httpx.Limits(max_connections=CLIENTS + 10, max_keepalive_connections=CLIENTS + 10)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60.0)) as client:
        for _ in range(3):  # warm the server (imports, first feed probe) before measuring
            async with client.stream("GET", url, headers=headers) as response:
                assert response.status_code == 200
        report["rss_before"] = server_process.memory_info().rss
        connected: list[int] = []
        everyone = asyncio.Event()
        tasks = [
            asyncio.create_task(follow(client, url, headers, connected, everyone))
            for _ in range(CLIENTS)
        ]
        waiter = asyncio.create_task(everyone.wait())
        try:
            async with asyncio.timeout(60):
                done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
            assert waiter in done, [t.result() for t in done]  # a client failed early
            report["rss_connected"] = server_process.memory_info().rss
            report["threads"] = server_process.num_threads()
            if connection.vendor == "postgresql":
                report["listeners"] = await in_thread(listener_pids, server.proc.pid)
                report["db_sockets"] = database_sockets(server.proc.pid)
            seq = await in_thread(lease_and_seq, job_id)
            report["seq"] = seq
            async with asyncio.timeout(60):
                return await asyncio.gather(*tasks)
        finally:
            for task in [waiter, *tasks]:
                task.cancel()
            await asyncio.gather(waiter, *tasks, return_exceptions=True)


def lease_and_seq(job_id: str) -> int:
    queue.lease(job_id, worker_id="w-fanout")
    return present(store.read(f"jobs/{job_id}")[-1].seq)


def test_two_hundred_clients_share_one_feed_and_all_get_the_broadcast(server, reader):
    job = enqueue()
    report: dict[str, Any] = {}
    frames = asyncio.run(fan_out(server, reader, job.job_id, report))
    assert [(f.id, f.data) for f in frames] == [(report["seq"], "job.leased")] * CLIENTS
    before, after = report["rss_before"], report["rss_connected"]
    print(
        f"\n{CLIENTS} SSE clients ({connection.vendor}): server RSS "
        f"{before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB "
        f"(+{(after - before) / CLIENTS / 1024:.1f} KiB per client), "
        f"{report['threads']} threads, db sockets {report.get('db_sockets', 'n/a')}"
    )
    # E-3: no thread per client, and idle clients hold no database connection.
    assert report["threads"] < 40
    if connection.vendor == "postgresql":
        assert len(report["listeners"]) == 1  # T-6: one listener for the whole process
        assert report["db_sockets"] <= CONFIG.db_threads + 1


@pytest.mark.postgres_only
def test_the_listener_reconnects_and_nothing_is_lost(server, http, reader):
    prefix = "live-test/reconnect/"
    with server.stream(http, f"/receipt/stream?prefix={prefix}", reader) as sse:
        sse.next()
        (old,) = wait_for(lambda: listener_pids(server.proc.pid), message="the listener")
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [old])
        appended = store.append(f"{prefix}a", {"type": "t"})[0]  # maybe while it is down
        new = wait_for(
            lambda: (pids := listener_pids(server.proc.pid)) and old not in pids and pids,
            message="a new listener",
        )
        assert len(new) == 1
        frames = sse.until(lambda f: f.id == appended.seq, message="the receipt")
    assert [f.data for f in frames if f.event == "receipt-refresh"] == [appended.stream]
