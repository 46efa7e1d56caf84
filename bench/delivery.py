"""Delivery benchmarks (T-3 drain, T-4 latency) measured like ../shared/bench/peers.

    .venv/bin/python bench/delivery.py [--database-url URL] [--n 3000] [--latency-n 100]
                                       [--reps 1] [--tests drain,latency] [--broker orm|redis://...]

drain:   N no-op jobs enqueued and dispatched first (untimed), CHECKPOINT, then a driver and
         a chat runworker are launched with 2 workers each; the clock runs from launching
         them until every job's read-model row says completed (both hops, every receipt
         written). Reported: jobs/s launch->all done, and 1st body->all done.
latency: an idle stack, 5 warm-up jobs, then N jobs one at a time; latency = task body's
         time.monotonic() - monotonic() just before queue.enqueue(); 20-120 ms random pause
         between jobs. Reported: p50 / p95 (nearest rank).
Run the peers harness in the same sitting against the same PostgreSQL to get ratios
(bench/run_delivery does both).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
LINE = 31


def setup_django(url: str, broker: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["RECEIPT_BROKER"] = broker
    os.environ.setdefault("RECEIPT_DATA_DIR", "/tmp/receipt-bench")
    os.environ["RECEIPT_HANDLER_MODULES"] = "bench.handlers"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receipt_site.settings")
    sys.path.insert(0, str(ROOT))
    from urllib.parse import urlsplit

    import psycopg

    parts = urlsplit(url)
    admin = psycopg.connect(host=parts.hostname, port=parts.port or 5432,
                            user=parts.username or None, dbname="postgres", autocommit=True)
    name = parts.path.lstrip("/")
    if not admin.execute("SELECT 1 FROM pg_database WHERE datname=%s", [name]).fetchone():
        admin.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def reset() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE receipt_receipt, receipt_stream, jobs_job, jobs_delivery_promise, "
                       "jobs_worker_process, jobs_loop_run, django_q_ormq RESTART IDENTITY")
        cursor.execute("CHECKPOINT")


def marker_count(path: Path) -> int:
    try:
        return path.stat().st_size // LINE
    except FileNotFoundError:
        return 0


def marker_times(path: Path) -> list[tuple[int, float]]:
    data = path.read_bytes()
    return [(int(data[i:i + 9]), float(data[i + 10:i + 30])) for i in range(0, len(data), LINE)]


def payload(i: int) -> dict:
    return {"kind": "factory.run", "authContext": {"userId": "bench", "organizationId": "bench"},
            "i": i}


def launch(marker: Path, logs: Path) -> list[subprocess.Popen]:
    env = {**os.environ, "BENCH_MARKER": str(marker), "RECEIPT_RESONATE_EXECUTE_CONCURRENCY": "2",
           "RECEIPT_LOG_LEVEL": "WARNING"}
    procs = []
    for role in ("driver", "chat"):
        with open(logs / f"{role}.log", "ab") as log:
            procs.append(subprocess.Popen([sys.executable, "manage.py", "runworker", "--role", role],
                                          cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def drain(n: int, logs: Path) -> dict:
    from jobs import queue
    from jobs.models import Job

    reset()
    marker = logs / "drain-marker.log"
    marker.unlink(missing_ok=True)
    for start in range(0, n, 500):
        queue.enqueue_many([queue.build_request("bench-noop", payload(i))
                            for i in range(start, min(n, start + 500))])
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")
    launched = time.monotonic()
    procs = launch(marker, logs)
    try:
        while marker_count(marker) < n:
            time.sleep(0.005)
        while Job.objects.filter(status="completed").count() < n:
            time.sleep(0.005)
        done = time.monotonic()
    finally:
        stop(procs)
    times = marker_times(marker)
    ids = [i for i, _ in times]
    assert len(ids) == n and len(set(ids)) == n, "every job ran exactly once"
    first = min(t for _, t in times)
    return {"test": "drain", "n": n, "launch_to_done_per_s": n / (done - launched),
            "first_body_to_done_per_s": n / (done - first), "start_to_first_s": first - launched}


def latency(n: int, logs: Path) -> dict:
    from jobs import queue

    reset()
    marker = logs / "latency-marker.log"
    marker.unlink(missing_ok=True)
    procs = launch(marker, logs)
    samples = []
    try:
        for i in range(n + 5):
            seen = marker_count(marker)
            t0 = time.monotonic()
            queue.enqueue("bench-noop", payload(i))
            deadline = time.monotonic() + (60 if i == 0 else 10)
            while marker_count(marker) == seen:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"job {i} did not start")
                time.sleep(0.0005)
            if i >= 5:
                samples.append((marker_times(marker)[-1][1] - t0) * 1000)
            time.sleep(random.uniform(0.02, 0.12))
    finally:
        stop(procs)
    samples.sort()

    def rank(p: float) -> float:
        return samples[max(0, round(p * len(samples) + 0.5) - 1)]

    return {"test": "latency", "n": n, "p50_ms": rank(0.50), "p95_ms": rank(0.95),
            "max_ms": samples[-1]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--broker", default="orm")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--latency-n", type=int, default=100)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--tests", default="drain,latency")
    args = parser.parse_args()
    setup_django(args.database_url, args.broker)
    RESULTS.mkdir(parents=True, exist_ok=True)
    logs = Path("/tmp/receipt-bench-logs")
    logs.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"delivery-{stamp}.jsonl"
    for rep in range(args.reps):
        for test in args.tests.split(","):
            record = drain(args.n, logs) if test == "drain" else latency(args.latency_n, logs)
            record.update(rep=rep, broker=args.broker)
            print(json.dumps(record), flush=True)
            with out.open("a") as handle:
                handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
