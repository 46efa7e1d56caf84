"""The HTTP enqueue path under load (T-2): concurrent clients against one API server.

    .venv/bin/python bench/http_load.py [--database-url URL] [--n 2000] [--clients 1,8,64]
                                        [--workers 1] [--reps 1] [--server granian|uvicorn]
                                        [--uvicorn-args "..."]
    .venv/bin/python bench/http_load.py --smoke    # 20 requests at 1 and 2 clients

One server (`--workers N`: N worker processes behind one socket) is started with the
production flags of the README (no access log, warning level): granian on
receipt_site.wsgi by default, uvicorn on receipt_site.asgi, or gunicorn. `--uvicorn-args`
adds flags to any of them. For each
client count C, C asyncio keep-alive HTTP/1.1 connections send N
`POST /agents/bench-noop/jobs` in all, one request in flight per connection, after 20
untimed warm-up requests per connection. Each level starts from empty tables (TRUNCATE +
CHECKPOINT; the server's own sessions stay connected through it). The client writes pre-built request bytes on raw asyncio streams rather than
using httpx.AsyncClient: httpx costs ~2 ms of client CPU per request on this 2-core machine
(the server's competitor for CPU) and its pool failed with ReadError at 64 connections.

Reported per level: jobs/s (wall clock), p50 / p95 latency (nearest rank), the server's
CPU seconds per request (user + system of the server process and its children, read with
psutil before and after the timed loop; PostgreSQL's backends are not included) and the
rate that implies per server core (1 / CPU-s per request), the client's own CPU seconds
(it shares the machine), and the foreign CPU (other work on the machine, bench/noise.py).
Compare `per_core_per_s` with the in-process `queue.enqueue()` rate (bench/enqueue.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke
from delivery import ROOT, reset, server_roots, setup_django
from noise import Noise

PAYLOAD = {
    "kind": "factory.dispatch",
    "authContext": {"userId": "bench", "organizationId": "bench"},
}
PATH = "/agents/bench-noop/jobs"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def uvicorn_command(port: int, workers: int) -> list[str]:
    command = [sys.executable, "-m", "uvicorn", "receipt_site.asgi:application"]
    command += ["--port", str(port), "--no-access-log", "--log-level", "warning"]
    return command + (["--workers", str(workers)] if workers > 1 else [])


def gunicorn_command(port: int, workers: int) -> list[str]:
    """The API under WSGI (no live events there: those need the ASGI server)."""
    command = [sys.executable, "-m", "gunicorn", "receipt_site.wsgi:application"]
    command += ["--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--threads", "8"]
    return [*command, "--worker-class", "gthread", "--log-level", "warning"]


def granian_command(port: int, workers: int) -> list[str]:
    """The API under WSGI on granian (HTTP parsed in Rust, the app on two blocking threads,
    as the README's production layout runs it)."""
    command = [sys.executable, "-m", "granian", "--interface", "wsgi", "--no-ws"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    command += ["--blocking-threads", "2", "--log-level", "warning", "--no-access-log"]
    return [*command, "receipt_site.wsgi:application"]


SERVERS = {"uvicorn": uvicorn_command, "gunicorn": gunicorn_command, "granian": granian_command}


@contextlib.contextmanager
def uvicorn_server(*, workers: int, args: tuple[str, ...] = (), kind: str = "uvicorn"):
    """-> (base_url, psutil.Process of the server) for a server on a free port."""
    import httpx
    import psutil

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = SERVERS[kind](port, workers) + list(args)
    server = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "RECEIPT_LOG_LEVEL": "WARNING"},
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base_url}/healthz", timeout=10)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield base_url, psutil.Process(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)


def cpu_seconds(process) -> float:
    """User + system CPU of `process` and its live children (uvicorn --workers)."""
    total = 0.0
    for proc in [process, *process.children(recursive=True)]:
        with contextlib.suppress(Exception):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


async def _connection(
    host: str, port: int, request: bytes, jobs: list[int], latencies: list[float]
) -> None:
    """One keep-alive HTTP/1.1 connection sending `request` until `jobs` is empty."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while jobs:
            jobs.pop()
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            assert status == 202, (status, body[:300])
    finally:
        writer.close()


async def _load(base_url: str, secret: str, n: int, clients: int) -> list[float]:
    """N requests in all over `clients` concurrent keep-alive connections -> latencies."""
    host, port = base_url.removeprefix("http://").split(":")
    body = json.dumps(PAYLOAD).encode()
    request = (
        f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {secret}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    latencies: list[float] = []
    jobs = list(range(n))
    await asyncio.gather(
        *(_connection(host, int(port), request, jobs, latencies) for _ in range(clients))
    )
    return latencies


def level(base_url: str, server, secret: str, *, n: int, clients: int, workers: int) -> dict:
    import psutil

    reset(servers=[server.pid])
    me = psutil.Process()
    asyncio.run(_load(base_url, secret, 20 * clients, clients))  # warm-up, untimed
    noise = Noise(roots={server.pid, *server_roots()})
    server_cpu0, client_cpu0 = cpu_seconds(server), sum(me.cpu_times()[:2])
    started = time.perf_counter()
    latencies = asyncio.run(_load(base_url, secret, n, clients))
    elapsed = time.perf_counter() - started
    server_cpu = cpu_seconds(server) - server_cpu0
    client_cpu = sum(me.cpu_times()[:2]) - client_cpu0
    foreign = noise.done()
    return {
        "test": "enqueue_http_load",
        "workers": workers,
        "clients": clients,
        "n": n,
        "per_s": n / elapsed,
        "p50_ms": 1000 * percentile(latencies, 0.50),
        "p95_ms": 1000 * percentile(latencies, 0.95),
        "server_cpu_ms_per_req": 1000 * server_cpu / n,
        "per_core_per_s": n / server_cpu if server_cpu else None,
        "client_cpu_ms_per_req": 1000 * client_cpu / n,
        **foreign,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument(
        "--server",
        choices=sorted(SERVERS),
        default="granian",
        help="granian (WSGI, the production layout's API server), uvicorn (ASGI), or "
        "gunicorn (WSGI, gthread; not installed with Receipt: pip install gunicorn)",
    )
    parser.add_argument(
        "--uvicorn-args", default="", help='more server flags, e.g. "--loop asyncio --http h11"'
    )
    args = smoke.parse(parser, {"n": 20, "clients": "1,2"})
    setup_django(args.database_url, "orm")
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one log line per request
    from access.models import ApiToken

    _, secret = ApiToken.issue(name="bench-load")
    extra = tuple(args.uvicorn_args.split())
    with uvicorn_server(workers=args.workers, args=extra, kind=args.server) as (base_url, server):
        for rep in range(args.reps):
            for clients in (int(c) for c in args.clients.split(",")):
                record = level(
                    base_url, server, secret, n=args.n, clients=clients, workers=args.workers
                )
                record["rep"] = rep
                record["server"] = args.server
                record["uvicorn_args"] = args.uvicorn_args
                print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
