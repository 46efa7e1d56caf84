"""Live events at 1,000 clients (T-6): many SSE clients on one uvicorn process under load.

    .venv/bin/python bench/sse_load.py [--database-url URL] [--clients 100,500,1000]
                                       [--duration 30] [--rate 100] [--job-rate 20]
                                       [--stream-share 0.5] [--reps 1] [--py-spy PREFIX]
    .venv/bin/python bench/sse_load.py --smoke     # 4 clients, a 1-second drive

For each client count N, from empty tables: one job is enqueued per job client, then one
uvicorn process is started on receipt_site.asgi (bench/http_load.py's `uvicorn_server`,
fresh per level) and N SSE clients connect in batches of 50: `--stream-share` of them on
`GET /receipt/stream` (every receipt), the rest on `GET /jobs/<id>/events`, one per job.
Once every client has its first frame, a separate driver process (this file, `--drive`,
4 threads on one absolute schedule) enqueues `--rate` jobs/s and steers the followed jobs
round-robin at `--job-rate`/s (a `queue.command` receipt each) for `--duration` s. Then
the bench waits until every client has seen the final position (a receipt or a ping id)
and closes them. No worker runs: the jobs stay queued, their receipts come from the
driver only.

Reported per level (one JSON line):
- latency over every (client, receipt) pair written during the drive, p50 / p95 / p99 /
  max: the client's wall clock when the bytes arrived minus the receipt's recorded `ts`
  (same machine, same clock; it includes the writer's own transaction, the stable
  horizon, the server's fan-out and the client's loop lag); `commit_p50/p95_ms`: the same
  from the moment the driver's write returned (its commit) instead of `ts`;
  `client_lag_p95/max_ms`: how late the client's own loop ran a 10 ms timer (its share);
- missed, duplicated and out-of-order deliveries: each client must get every receipt it
  subscribed to after its first id, exactly once, ascending;
- server RSS idle (after warm-up), with the clients connected, peak and at the end;
  KiB per client = growth / N; the server's threads;
- the server's PostgreSQL connections (pg_stat_activity rows whose client port is one of
  its sockets, by application_name: `receipt-live-listener` is the one LISTEN connection,
  `?` the live read pool) and `listen_connections` by the listener's name;
- CPU cores (CPU-s / wall-s over the drive) of the server, the client (this process) and
  the driver; the client's reads per second (about one per client per wake-up); loadavg
  and foreign CPU (bench/noise.py): the machine is shared.
`--py-spy PREFIX` records the server (`py-spy --gil`, raw) over the drive to PREFIX-N.txt.

The client is cheap on purpose (it shares the machine with the server): raw asyncio
protocols, one pre-built request each, a minimal chunked decoder and one regex pass per
read over the SSE text; frames are never fully parsed (the `job` JSON is skipped).
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import functools
import itertools
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke
from delivery import reset, server_roots, setup_django, sql
from http_load import cpu_seconds, percentile, uvicorn_server
from noise import Noise

AGENT = "bench-noop"
PAYLOAD = {
    "kind": "factory.dispatch",
    "authContext": {"userId": "bench", "organizationId": "bench"},
}
# One regex over the decoded SSE text per read: every frame that carries an id.
_IDS = re.compile(rb"event: (receipt-refresh|job-refresh|ping)\nid: (\d+)\ndata: ([^\n]*)\n\n")
CONNECT_BATCH = 50  # clients opened at once while ramping up
SETTLE_TIMEOUT_S = 30.0
DRIVER_THREADS = 4


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# ---- the client ---------------------------------------------------------------------------


class Client(asyncio.Protocol):
    """One SSE connection: records (seq, arrival wall time) of every receipt frame."""

    def __init__(self, request: bytes, *, job: str | None) -> None:
        self.request = request
        self.job = job  # None: a /receipt/stream client
        self.raw = b""  # undecoded chunked bytes
        self.text = b""  # decoded SSE text not yet ending in a blank line
        self.need = -1  # bytes left in the current chunk (+2 for its CRLF); -1: at a size line
        self.head = True
        self.status = 0
        self.start: int | None = None  # first id: the ping (stream) or init (job)
        self.position = 0  # highest id seen in any frame
        self.seqs = array.array("q")
        self.times = array.array("d")
        self.ready = asyncio.get_running_loop().create_future()
        self.lost = False
        self.reads = 0
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        cast(asyncio.Transport, transport).write(self.request)  # a TCP connection's

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"closed before the first frame: {exc}"))

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self.reads += 1
        raw = self.raw + data
        if self.head:
            end = raw.find(b"\r\n\r\n")
            if end < 0:
                self.raw = raw
                return
            self.status = int(raw[9:12])
            self.head = False
            raw = raw[end + 4 :]
            if self.status != 200 and not self.ready.done():
                self.ready.set_exception(RuntimeError(f"status {self.status}: {raw[:200]!r}"))
        text = self.text
        pos = 0
        while True:  # chunked transfer coding, just enough of it
            if self.need < 0:
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    break
                self.need = int(raw[pos:eol], 16) + 2
                pos = eol + 2
            take = min(self.need, len(raw) - pos)
            text += raw[pos : pos + take]
            pos += take
            self.need -= take
            if self.need:
                break
            text = text[:-2]  # the chunk's trailing CRLF
            self.need = -1
        self.raw = raw[pos:]
        cut = text.rfind(b"\n\n")
        if cut < 0:
            self.text = text
            return
        self.text = text[cut + 2 :]
        for event, ident, data_ in _IDS.findall(text, 0, cut + 2):
            seq = int(ident)
            if event == b"ping" or data_ == b"init":
                if self.start is None:
                    self.start = seq
            else:
                self.seqs.append(seq)
                self.times.append(now)
            if seq > self.position:
                self.position = seq
        if self.start is not None and not self.ready.done():
            self.ready.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def loop_lag(lags: list[float], stop: asyncio.Event, every_s: float = 0.01) -> None:
    """How late this (client) process's loop runs a timer: its own share of the latency."""
    while not stop.is_set():
        due = time.monotonic() + every_s
        await asyncio.sleep(every_s)
        lags.append(time.monotonic() - due)


def request_bytes(host: str, port: int, path: str, secret: str) -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {secret}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()


async def open_clients(
    host: str, port: int, secret: str, *, streams: int, jobs: list[str]
) -> list[Client]:
    loop = asyncio.get_running_loop()
    plan = [("/receipt/stream", None)] * streams + [(f"/jobs/{j}/events", j) for j in jobs]
    clients: list[Client] = []
    for i in range(0, len(plan), CONNECT_BATCH):
        batch = []
        for path, job in plan[i : i + CONNECT_BATCH]:
            request = request_bytes(host, port, path, secret)
            _, client = await loop.create_connection(
                functools.partial(Client, request, job=job), host, port
            )
            batch.append(client)
        async with asyncio.timeout(60):
            await asyncio.gather(*(c.ready for c in batch))
        clients += batch
    return clients


# ---- the driver (a separate process) ---------------------------------------------------------


def drive(rate: float, job_rate: float, duration: float, jobs: list[str], out: Path) -> dict:
    """Enqueue `rate`/s and steer `jobs` round-robin at `job_rate`/s for `duration` s, on
    an absolute schedule shared by DRIVER_THREADS threads (one commit at a time would not
    keep up: each write waits for its commit's fsync)."""
    import threading

    from django.db import connections

    from jobs import queue

    schedule: list[tuple[float, str, int]] = [
        (i / rate, "enqueue", i) for i in range(int(rate * duration))
    ]
    if job_rate and jobs:
        schedule += [(i / job_rate, "steer", i) for i in range(int(job_rate * duration))]
    schedule.sort()
    late: list[float] = []
    errors: list[str] = []
    committed: list[tuple[str, int, float]] = []  # (stream, stream_seq, wall time after commit)
    started = time.monotonic() + 0.5

    def worker(mine: list[tuple[float, str, int]]) -> None:
        try:
            for at, action, i in mine:
                delay = started + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    late.append(-delay)
                if action == "enqueue":
                    job = queue.enqueue(AGENT, {**PAYLOAD, "i": i}).job
                else:
                    job = queue.steer(jobs[i % len(jobs)], {"n": i}, by="bench").job
                committed.append((f"jobs/{job.job_id}", job.receipt_count, time.time()))
        except Exception as error:  # reported, not raised: the bench reports what it got
            errors.append(repr(error))
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=worker, args=(schedule[k::DRIVER_THREADS],))
        for k in range(DRIVER_THREADS)
    ]
    print("driving", flush=True)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    late.sort()
    out.write_text(json.dumps(committed))
    return {
        "enqueued": sum(1 for _, a, _ in schedule if a == "enqueue"),
        "steered": sum(1 for _, a, _ in schedule if a == "steer"),
        "drive_elapsed_s": round(time.monotonic() - started, 2),
        "late_p95_ms": round(1000 * percentile(late, 0.95), 1) if late else 0.0,
        "late_max_ms": round(1000 * max(late, default=0.0), 1),
        "driver_errors": errors[:3],
    }


def run_driver(args: argparse.Namespace, jobs: list[str]) -> subprocess.Popen:
    jobs_file = Path(os.environ["RECEIPT_DATA_DIR"]) / "sse-load-jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    return subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--drive",
            str(jobs_file),
            "--database-url",
            args.database_url,
            "--rate",
            str(args.rate),
            "--job-rate",
            str(args.job_rate),
            "--duration",
            str(args.duration),
        ],
        stdout=subprocess.PIPE,
        env={**os.environ, "RECEIPT_LOG_LEVEL": "WARNING"},
    )


# ---- server-side figures -----------------------------------------------------------------------


def pg_connections(server: psutil.Process) -> dict[str, int]:
    """The server's PostgreSQL connections by application_name (its sockets' client ports)."""
    ports = [
        c.laddr.port for c in server.net_connections(kind="tcp") if c.raddr and c.raddr.port == 5432
    ]
    rows = sql(
        "SELECT coalesce(nullif(application_name, ''), '?'), count(*) FROM pg_stat_activity "
        "WHERE client_port = ANY(%s) GROUP BY 1",
        [ports],
    )
    return {name.split(":")[0]: count for name, count in rows}


def listen_connections(server_pid: int) -> int:
    return sql(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
        [f"receipt-live-listener:{server_pid}"],
    )[0][0]


def receipts_after(first: int, last: int) -> dict[int, tuple[str, int, int]]:
    """seq -> (stream, stream_seq, ts) of every receipt written in (first, last]."""
    rows = sql(
        "SELECT seq, stream, stream_seq, ts FROM receipt_receipt WHERE seq > %s AND seq <= %s",
        [first, last],
    )
    return {seq: (stream, stream_seq, ts) for seq, stream, stream_seq, ts in rows}


def max_seq() -> int:
    return sql("SELECT coalesce(max(seq), 0) FROM receipt_receipt")[0][0]


# ---- one level ---------------------------------------------------------------------------------


def followed_jobs(n: int) -> list[str]:
    """The jobs the job clients follow, one each (enqueued before the server starts)."""
    from jobs import queue

    return [queue.enqueue(AGENT, {**PAYLOAD, "i": -1 - i}).job.job_id for i in range(n)]


async def _level(
    args: argparse.Namespace, secret: str, n: int, jobs: list[str], roots: set[int]
) -> dict:
    """One level; Django is only called through asyncio.to_thread (never on the loop)."""
    import psutil

    streams = n - len(jobs)
    me = psutil.Process()
    with uvicorn_server(workers=1, args=("--timeout-graceful-shutdown", "2")) as (base, server):
        host, port = base.removeprefix("http://").split(":")
        # warm-up: imports, the feed's first probe, the token cache
        warm = await open_clients(host, int(port), secret, streams=2, jobs=jobs[:2])
        for client in warm:
            client.close()
        await asyncio.sleep(1.0)
        rss_idle = server.memory_info().rss
        connect_started = time.monotonic()
        clients = await open_clients(host, int(port), secret, streams=streams, jobs=jobs)
        connect_s = time.monotonic() - connect_started
        await asyncio.sleep(1.0)
        rss_connected = server.memory_info().rss
        threads = server.num_threads()
        pg_before = await asyncio.to_thread(pg_connections, server)
        first = await asyncio.to_thread(max_seq)

        driver = run_driver(args, jobs)
        driver_ps = psutil.Process(driver.pid)
        # the window starts when the driver has set Django up and starts writing
        assert driver.stdout is not None
        await asyncio.to_thread(driver.stdout.readline)
        started = time.monotonic()
        noise = Noise(roots={os.getpid(), server.pid, driver.pid, *roots})
        reads0 = sum(c.reads for c in clients)
        lags: list[float] = []
        stop_lag = asyncio.Event()
        lag_task = asyncio.create_task(loop_lag(lags, stop_lag))
        load0 = os.getloadavg()
        server_cpu0, client_cpu0 = cpu_seconds(server), sum(me.cpu_times()[:2])
        driver_cpu0 = sum(driver_ps.cpu_times()[:2])
        spy = None
        if args.py_spy:  # where the server's time goes, over the drive window
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--pid",
                    str(server.pid),
                    "--duration",
                    str(int(args.duration)),
                    "--gil",
                    "--format",
                    "raw",
                    "--rate",
                    "50",
                    "--output",
                    f"{args.py_spy}-{n}.txt",
                ],
                stdout=subprocess.DEVNULL,
            )
        rss_peak, pg_during, driver_cpu = rss_connected, pg_before, 0.0
        while driver.poll() is None:
            await asyncio.sleep(1.0)
            rss_peak = max(rss_peak, server.memory_info().rss)
            with contextlib.suppress(psutil.Error):
                driver_cpu = sum(driver_ps.cpu_times()[:2]) - driver_cpu0
            if time.monotonic() - started > args.duration / 2 and pg_during is pg_before:
                pg_during = await asyncio.to_thread(pg_connections, server)
        drive_s = time.monotonic() - started
        stop_lag.set()
        await lag_task
        reads = sum(c.reads for c in clients) - reads0
        if spy is not None:
            await asyncio.to_thread(spy.wait)
        server_cpu = cpu_seconds(server) - server_cpu0
        client_cpu = sum(me.cpu_times()[:2]) - client_cpu0
        driven = json.loads(driver.stdout.read().decode().strip().splitlines()[-1])
        foreign = noise.done()
        load1 = os.getloadavg()

        last = await asyncio.to_thread(max_seq)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while any(c.position < last and not c.lost for c in clients):
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        settled = sum(1 for c in clients if c.position >= last)
        rss_end = server.memory_info().rss
        listeners = await asyncio.to_thread(listen_connections, server.pid)
        written = await asyncio.to_thread(receipts_after, first, last)
        for client in clients:
            client.close()
        await asyncio.sleep(0.5)

    committed_at = {
        (stream, stream_seq): at
        for stream, stream_seq, at in json.loads(
            (Path(os.environ["RECEIPT_DATA_DIR"]) / "sse-load-jobs.committed.json").read_text()
        )
    }
    latencies: list[float] = []  # client arrival - the receipt's recorded ts
    after_commit: list[float] = []  # client arrival - the driver's return from its commit
    missed = duplicated = disordered = 0
    by_stream: dict[str, list[int]] = {}
    for seq in sorted(written):
        by_stream.setdefault(written[seq][0], []).append(seq)
    everything = sorted(written)
    for client in clients:
        start = client.start or 0
        got = list(client.seqs)
        disordered += sum(1 for a, b in itertools.pairwise(got) if b <= a)
        expected = everything if client.job is None else by_stream.get(f"jobs/{client.job}", [])
        expected_set = {s for s in expected if s > start}
        got_set = set(got)
        missed += len(expected_set - got_set)
        duplicated += len(got) - len(got_set)
        for seq, at in zip(got, client.times, strict=True):
            if seq in expected_set:
                stream, stream_seq, ts = written[seq]
                latencies.append(at * 1000 - ts)
                commit = committed_at.get((stream, stream_seq))
                if commit is not None:
                    after_commit.append((at - commit) * 1000)
    stream_deliveries = sum(len(c.seqs) for c in clients if c.job is None)
    job_deliveries = sum(len(c.seqs) for c in clients if c.job is not None)
    return {
        "test": "sse_load",
        "clients": n,
        "stream_clients": streams,
        "job_clients": n - streams,
        "connect_s": round(connect_s, 2),
        "drive_s": round(drive_s, 1),
        **driven,
        "receipts": len(written),
        "deliveries": len(latencies),
        "stream_deliveries": stream_deliveries,
        "job_deliveries": job_deliveries,
        "p50_ms": round(percentile(latencies, 0.50), 1) if latencies else None,
        "p95_ms": round(percentile(latencies, 0.95), 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99), 1) if latencies else None,
        "max_ms": round(max(latencies), 1) if latencies else None,
        "commit_p50_ms": round(percentile(after_commit, 0.50), 1) if after_commit else None,
        "commit_p95_ms": round(percentile(after_commit, 0.95), 1) if after_commit else None,
        "client_lag_p95_ms": round(1000 * percentile(lags, 0.95), 1) if lags else None,
        "client_lag_max_ms": round(1000 * max(lags), 1) if lags else None,
        "receipts_per_s_window": round(len(written) / drive_s, 1),
        "client_reads_per_s": round(reads / drive_s),
        "missed": missed,
        "duplicated": duplicated,
        "out_of_order": disordered,
        "settled_clients": settled,
        "lost_clients": sum(1 for c in clients if c.lost and c.position < last),
        "rss_idle_mib": round(rss_idle / 2**20, 1),
        "rss_connected_mib": round(rss_connected / 2**20, 1),
        "rss_peak_mib": round(rss_peak / 2**20, 1),
        "rss_end_mib": round(rss_end / 2**20, 1),
        "kib_per_client": round((rss_connected - rss_idle) / n / 1024, 1),
        "kib_per_client_end": round((rss_end - rss_idle) / n / 1024, 1),
        "server_threads": threads,
        "pg_connections_connected": pg_before,
        "pg_connections_during": pg_during,
        "listen_connections": listeners,
        "server_cpu_cores": round(server_cpu / drive_s, 2),
        "client_cpu_cores": round(client_cpu / drive_s, 2),
        "driver_cpu_cores": round(driver_cpu / drive_s, 2),
        "loadavg_before": [round(x, 2) for x in load0],
        "loadavg_after": [round(x, 2) for x in load1],
        **foreign,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_sse")
    parser.add_argument("--clients", default="100,500,1000")
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=100.0, help="enqueues per second")
    parser.add_argument("--job-rate", type=float, default=20.0, help="steers per second")
    parser.add_argument("--stream-share", type=float, default=0.5)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--py-spy", help="record the server with py-spy to <this>-<N>.txt")
    parser.add_argument("--drive", help=argparse.SUPPRESS)  # internal: the driver process
    args = smoke.parse(parser, {"clients": "4", "duration": 1.0, "rate": 20.0, "job_rate": 4.0})
    if args.smoke:  # a ping a second: the job clients learn the final position sooner
        os.environ.setdefault("RECEIPT_SSE_KEEPALIVE_MS", "1000")
    os.environ.setdefault("RECEIPT_DATA_DIR", "/tmp/sse-data")
    Path(os.environ["RECEIPT_DATA_DIR"]).mkdir(parents=True, exist_ok=True)
    raise_fd_limit()  # the server inherits it
    setup_django(args.database_url, "orm")
    if args.drive:
        jobs = json.loads(Path(args.drive).read_text())
        out = Path(args.drive).with_suffix(".committed.json")
        print(json.dumps(drive(args.rate, args.job_rate, args.duration, jobs, out)), flush=True)
        return
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    from access.models import ApiToken

    _, secret = ApiToken.issue(name="bench-sse")
    for rep in range(args.reps):
        for n in (int(c) for c in args.clients.split(",")):
            reset()
            jobs = followed_jobs(n - round(n * args.stream_share))
            record = asyncio.run(_level(args, secret, n, jobs, server_roots()))
            record["rep"] = rep
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
