"""Enqueue throughput (T-1, T-2), measured like ../shared/bench/peers' enqueue figures.

    .venv/bin/python bench/enqueue.py [--database-url URL] [--n 5000] [--reps 3] [--http]
    .venv/bin/python bench/enqueue.py --smoke      # every figure, --http too, on 20 jobs

one-by-one: 10 warm-up enqueues, then N `queue.enqueue()` calls, perf_counter around the
            loop. Two figures: the caller's rate, and the rate until the background
            dispatch pass (D-2) has also opened every job's driver promise and broker task.
batch:      N jobs handed to `queue.enqueue_many()` in one call (one transaction).
http:       (--http) N sequential POST /agents/bench-noop/jobs to one uvicorn process over
            one keep-alive connection (T-2: compare with one-by-one per core), and N jobs in
            sequential requests of 1,000 (--batch) to /agents/bench-noop/jobs/batch (T-9).
Each rep starts from empty tables (TRUNCATE + CHECKPOINT). The payload kind is
factory.dispatch (no durable-ledger rows), the agent `bench-noop`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke
from delivery import ROOT, reset, setup_django

PAYLOAD = {
    "kind": "factory.dispatch",
    "authContext": {"userId": "bench", "organizationId": "bench"},
}


def one_by_one(n: int) -> dict:
    from jobs import queue
    from jobs.runtime import dispatch

    reset()
    for _ in range(10):
        queue.enqueue("bench-noop", PAYLOAD)
    dispatch.OUTBOX.drain(60)
    started = time.perf_counter()
    for _ in range(n):
        queue.enqueue("bench-noop", PAYLOAD)
    caller = time.perf_counter() - started
    dispatch.OUTBOX.drain(120)
    total = time.perf_counter() - started
    return {
        "test": "enqueue_one_by_one",
        "n": n,
        "caller_per_s": n / caller,
        "dispatched_per_s": n / total,
    }


def batch(n: int) -> dict:
    from jobs import queue
    from jobs.runtime import dispatch

    reset()
    requests = [queue.build_request("bench-noop", PAYLOAD) for _ in range(n)]
    started = time.perf_counter()
    queue.enqueue_many(requests)
    caller = time.perf_counter() - started
    dispatch.OUTBOX.drain(300)
    total = time.perf_counter() - started
    return {
        "test": "enqueue_batch",
        "n": n,
        "caller_per_s": n / caller,
        "dispatched_per_s": n / total,
    }


@contextlib.contextmanager
def _api_server():  # -> an httpx.Client with a token, on one uvicorn process
    import httpx

    from access.models import ApiToken

    _, secret = ApiToken.issue(name="bench")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "receipt_site.asgi:application",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env={**os.environ, "RECEIPT_LOG_LEVEL": "WARNING"},
    )
    try:
        client = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {secret}"},
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                client.get("/healthz")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        for _ in range(10):
            client.post("/agents/bench-noop/jobs", json=PAYLOAD)
        yield client
    finally:
        server.terminate()
        server.wait(timeout=30)


def http(n: int) -> dict:
    reset()
    with _api_server() as client:
        started = time.perf_counter()
        for _ in range(n):
            response = client.post("/agents/bench-noop/jobs", json=PAYLOAD)
            assert response.status_code == 202, response.text
        elapsed = time.perf_counter() - started
    return {"test": "enqueue_http", "n": n, "per_s": n / elapsed}


def http_batch(n: int, size: int = 1000) -> dict:
    """N jobs in requests of `size` to the batch endpoint, sequentially (T-2 batch)."""
    reset()
    body = {"jobs": [PAYLOAD] * size}
    with _api_server() as client:
        started = time.perf_counter()
        for _ in range(max(1, n // size)):
            response = client.post("/agents/bench-noop/jobs/batch", json=body)
            assert response.status_code == 202 and response.json()["enqueued"] == size
        elapsed = time.perf_counter() - started
    return {
        "test": "enqueue_http_batch",
        "n": max(1, n // size) * size,
        "batch": size,
        "per_s": max(1, n // size) * size / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per request (http batch)")
    args = smoke.parse(parser, {"n": 20, "reps": 1, "http": True, "batch": 10})
    setup_django(args.database_url, "orm")

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one log line per request
    records = []
    for rep in range(args.reps):
        tests = [one_by_one, batch] + ([http, http_batch] if args.http else [])
        for test in tests:
            if test is http_batch:
                record = http_batch(args.n, args.batch)
            else:
                record = test(args.n if test is not http else min(args.n, 2000))
            record["rep"] = rep
            print(json.dumps(record), flush=True)
            records.append(record)
    for name in sorted({r["test"] for r in records}):
        rows = [r for r in records if r["test"] == name]
        for key in ("caller_per_s", "dispatched_per_s", "per_s"):
            values = sorted(r[key] for r in rows if key in r)
            if values:
                print(
                    f"{name} {key}: {values[0]:.0f} / {statistics.median(values):.0f} / "
                    f"{values[-1]:.0f}"
                )


if __name__ == "__main__":
    main()
