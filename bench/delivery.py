"""Delivery benchmarks (T-3 drain, T-4 latency) measured like ../shared/bench/peers.

    .venv/bin/python bench/delivery.py [--database-url URL] [--n 3000] [--latency-n 100]
                                       [--reps 1] [--tests drain,latency] [--broker orm|redis://...]
                                       [--path native|task]
    .venv/bin/python bench/delivery.py --smoke     # a drain of 20 jobs, 3 latency samples

drain:   N no-op jobs enqueued and dispatched first (untimed: every job has its driver
         promise), CHECKPOINT, then a driver and a chat runworker are launched with 2
         workers each; the clock runs from launching them until every job's read-model
         row says completed (both hops, every receipt written). Reported: jobs/s
         launch->all done, and 1st body->all done.
latency: an idle stack, 5 warm-up jobs, then N jobs one at a time; latency = task body's
         time.monotonic() - monotonic() just before queue.enqueue(); 20-120 ms random pause
         between jobs. Reported: p50 / p95 (nearest rank, as the peers' runner.py).
Both run on one of two paths: native (`jobs.queue.enqueue` of the `bench-noop` agent) or
task (`.enqueue(i)` of the bench's `@task`, bench/handlers.py, through Receipt's backend of
Django's task framework); the workers, the marker and the clocks are the same.
Run the peers harness in the same sitting against the same PostgreSQL to get ratios:
bench/run_delivery does both (and the enqueue figures) in one command.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("BENCH_RESULTS") or ROOT / "bench" / "results")
LOGS = Path(
    os.environ.get("BENCH_LOGS", "/tmp/receipt-bench-logs")
)  # the runworkers' logs and the bodies' marker files
DRAIN_MARKER = "drain-marker.log"  # in the logs directory: one line per body the drain ran
LINE = 31
sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke  # noqa: E402
from noise import Noise, parent_of  # noqa: E402

# Tables wiped before every measurement (those that exist: the schema is moving).
RESET_PREFIXES = ("receipt_", "jobs_", "objectives_")
RESET_EXTRA = ("django_q_ormq", "django_q_task")


def _admin(url: str):  # -> psycopg.Connection to the server's `postgres` database
    from urllib.parse import urlsplit

    import psycopg

    parts = urlsplit(url)
    return psycopg.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=parts.username or None,
        password=parts.password or None,
        dbname="postgres",
        autocommit=True,
    )


def ensure_database(url: str, *, fresh: bool = False) -> None:
    """Create the database of `url` if missing; with fresh, drop it first (a bench database)."""
    from urllib.parse import urlsplit

    name = urlsplit(url).path.lstrip("/")
    admin = _admin(url)
    try:
        if fresh:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname=%s", [name]).fetchone():
            admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        admin.close()


def setup_django(url: str, broker: str) -> None:
    """Django on `url` with the bench handler, migrated. If migrate fails (a migration that
    was applied here has since been rewritten in the working tree), the database, which
    only ever holds benchmark data, is dropped, created and migrated again."""
    os.environ["DATABASE_URL"] = url
    os.environ["RECEIPT_BROKER"] = broker
    os.environ.setdefault("RECEIPT_DATA_DIR", "/tmp/receipt-bench")
    os.environ["RECEIPT_HANDLER_MODULES"] = "bench.handlers"  # the agent and the @task
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receipt_site.settings")
    sys.path.insert(0, str(ROOT))
    ensure_database(url)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    try:
        call_command("migrate", verbosity=0)
    except Exception as error:
        print(
            f"migrate failed ({type(error).__name__}: {error}); recreating the bench database",
            file=sys.stderr,
            flush=True,
        )
        connections.close_all()
        ensure_database(url, fresh=True)
        call_command("migrate", verbosity=0)


def sql(statement: str, params: list | None = None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def reset(*, servers: Collection[int] = ()) -> None:
    """Empty the app's tables. `servers`: pids of processes this bench started that stay
    connected across the reset (the uvicorn server a load runs against); their sessions,
    like this process's own, are not foreign."""
    refuse_foreign_sessions(servers)
    rows = sql("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    names = sorted(n for (n,) in rows if n.startswith(RESET_PREFIXES) or n in RESET_EXTRA)
    sql("TRUNCATE " + ", ".join(f'"{n}"' for n in names) + " RESTART IDENTITY")
    sql("CHECKPOINT")


def refuse_foreign_sessions(servers: Collection[int] = ()) -> None:
    """Before a figure starts nothing else may be connected to the bench database: a
    runworker left over from an earlier run or experiment takes the figure's jobs (and,
    started without BENCH_MARKER, fails them), so the figure would measure both. The
    sessions of this process (a raw connection beside Django's, the dispatch thread's) and
    of `servers` and their children are the bench's own: told apart by their client ports."""
    deadline = time.monotonic() + 10  # the previous figure's sessions may still be closing
    while True:
        (others,) = sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
            "AND coalesce(client_port, -1) <> ALL(%s)",
            [client_ports([os.getpid(), *servers])],
        )[0]
        if not others or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if others:
        raise RuntimeError(
            f"{others} other session(s) are connected to the bench database "
            "(a runworker left running?): stop them first, e.g. pkill -f 'runworker --role'"
        )


def client_ports(pids: Collection[int]) -> list[int]:
    """The local ports of the TCP connections of processes `pids` and their children."""
    import psutil

    ports = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                ports += [c.laddr.port for c in proc.net_connections(kind="tcp") if c.raddr]
    return ports


def server_roots() -> set[int]:
    """The postmaster's pid when the server runs on this machine (its backends count as ours)."""
    (backend,) = sql("SELECT pg_backend_pid()")[0]
    parent = parent_of(backend)
    return {parent} if parent else set()


def dispatched() -> int:
    """Jobs whose delivery has started: they have a driver promise (D-1, D-2)."""
    return sql(
        "SELECT count(DISTINCT job_id) FROM jobs_delivery_promise WHERE function = 'driver'"
    )[0][0]


def wait_dispatched(expected: int, timeout_s: float) -> float:
    """Block until `expected` jobs are dispatched; return monotonic() at that moment.
    Waits for this process's dispatch pass first (no polling while it runs), then counts."""
    from jobs.runtime import dispatch

    deadline = time.monotonic() + timeout_s
    outbox = getattr(dispatch, "OUTBOX", None)
    if outbox is not None:
        outbox.drain(timeout_s)
    while True:
        count = dispatched()
        if count >= expected:
            return time.monotonic()
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {count} of {expected} jobs dispatched after {timeout_s:.0f} s"
            )
        time.sleep(0.005)


def marker_count(path: Path) -> int:
    try:
        return path.stat().st_size // LINE
    except FileNotFoundError:
        return 0


def marker_times(path: Path) -> list[tuple[int, float]]:
    data = path.read_bytes()
    return [(int(data[i : i + 9]), float(data[i + 10 : i + 30])) for i in range(0, len(data), LINE)]


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest rank, as the peers' runner.py (p in percent)."""
    return sorted_values[max(1, math.ceil(p / 100 * len(sorted_values))) - 1]


KIND = os.environ.get("BENCH_JOB_KIND", "factory.dispatch")
PATHS = ("native", "task")


def payload(i: int, kind: str = KIND) -> dict:
    # The agent routes to the chat group: the driver hop, then the chat worker hop. The
    # kind is one without Factory's durable ledger (factory.run adds a ledger upsert
    # after each of the job's writes): a plain job, as the peers' no-op tasks are.
    return {"kind": kind, "authContext": {"userId": "bench", "organizationId": "bench"}, "i": i}


def enqueuer(path: str, kind: str = KIND) -> Callable[[int], object]:
    """One enqueue of job i, in its own transaction: native, `jobs.queue.enqueue` of the
    `bench-noop` agent; task, `noop_task.enqueue(i)` (a `django.task` job of agent
    `django-task`, also on the chat group)."""
    if path == "task":  # by name: the task's module path must be bench.handlers
        return importlib.import_module("bench.handlers").noop_task.enqueue
    from jobs import queue

    return lambda i: queue.enqueue("bench-noop", payload(i, kind))


CONCURRENCY = [2]  # chat worker processes: 2, as every peer's workers (--concurrency)


def launch(marker: Path, logs: Path) -> list[subprocess.Popen]:
    env = {
        **os.environ,
        "BENCH_MARKER": str(marker),
        "RECEIPT_RESONATE_EXECUTE_CONCURRENCY": str(CONCURRENCY[0]),
        "RECEIPT_LOG_LEVEL": "WARNING",
    }
    procs = []
    for role in ("driver", "chat"):
        with open(logs / f"{role}.log", "ab") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "manage.py", "runworker", "--role", role],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    pids = os.environ.get("BENCH_WORKER_PIDS")  # so a supervisor can stop what survives us
    if pids:
        with open(pids, "a") as handle:
            handle.writelines(
                f"{proc.pid} receipt-{role}\n"
                for proc, role in zip(procs, ("driver", "chat"), strict=True)
            )
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def fill(n: int, path: str = "native") -> float:
    """Enqueue n drain jobs, 500 per transaction, and wait until all are dispatched. Native:
    one enqueue_many per 500; task: the task API has no bulk enqueue, so 500 `.enqueue()`
    calls inside one `transaction.atomic()` (untimed either way)."""
    from django.db import transaction

    from jobs import queue

    enqueue = enqueuer(path)
    started = time.monotonic()
    for start in range(0, n, 500):
        ids = range(start, min(n, start + 500))
        if path == "task":
            with transaction.atomic():
                for i in ids:
                    enqueue(i)
        else:
            queue.enqueue_many([queue.build_request("bench-noop", payload(i)) for i in ids])
    wait_dispatched(n, 300)
    return time.monotonic() - started


def drain(n: int, logs: Path, timeout_s: float = 600.0, path: str = "native") -> dict:
    from jobs.models import Job

    reset()
    marker = logs / DRAIN_MARKER
    marker.unlink(missing_ok=True)
    fill_s = fill(n, path)
    sql("CHECKPOINT")
    noise = Noise(server_roots())
    launched = time.monotonic()
    procs = launch(marker, logs)
    deadline = launched + timeout_s
    try:
        while marker_count(marker) < n:  # stat() only while bodies run, as the peers' watcher
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(
                    f"drain: {marker_count(marker)} of {n} bodies ran "
                    f"(workers alive: {[p.poll() is None for p in procs]})"
                )
            time.sleep(0.005)
        bodies_seen = time.monotonic()
        while Job.objects.filter(status="completed").count() < n:
            if time.monotonic() > deadline:
                raise RuntimeError("drain: bodies ran but not every job is completed")
            time.sleep(0.005)
        done = time.monotonic()
        fields = noise.done()
    finally:
        stop(procs)
    times = marker_times(marker)
    ids = [i for i, _ in times]
    if len(ids) != n or len(set(ids)) != n:
        raise RuntimeError(
            f"drain: {len(ids)} bodies for {len(set(ids))} jobs, expected {n} once each"
        )
    first, last = min(t for _, t in times), max(t for _, t in times)
    return {
        "test": "drain",
        "path": path,
        "n": n,
        "concurrency": CONCURRENCY[0],
        "fill_s": round(fill_s, 3),
        "jobs_per_s_from_launch": n / (done - launched),
        "jobs_per_s_steady": (n - 1) / (done - first),
        "jobs_per_s_bodies_steady": (n - 1) / (last - first) if last > first else None,
        "first_start_s": first - launched,
        "all_done_s": done - launched,
        "bookkeeping_lag_s": done - last,
        "detect_lag_s": bodies_seen - last,
        "complete": True,
        **fields,
    }


def latency(n: int, logs: Path, seed: int = 1001, warmup: int = 5, path: str = "native") -> dict:
    enqueue = enqueuer(path)
    reset()
    marker = logs / "latency-marker.log"
    marker.unlink(missing_ok=True)
    rnd = random.Random(seed)
    procs = launch(marker, logs)
    noise = Noise(server_roots())
    samples: list[float] = []
    warm: list[float] = []
    try:
        for i in range(n + warmup):
            seen = marker_count(marker)
            t0 = time.monotonic()
            enqueue(i)
            deadline = time.monotonic() + (60 if i == 0 else 10)
            while marker_count(marker) == seen:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"latency: job {i} did not start")
                time.sleep(0.0005)
            job, started = marker_times(marker)[-1]
            if job != i:
                raise RuntimeError(f"latency: job {job} ran while waiting for job {i}")
            (warm if i < warmup else samples).append((started - t0) * 1000)
            time.sleep(rnd.uniform(0.02, 0.12))
        fields = noise.done()
    finally:
        stop(procs)
    samples.sort()
    return {
        "test": "latency",
        "path": path,
        "n": n,
        "p50_ms": percentile(samples, 50),
        "p95_ms": percentile(samples, 95),
        "max_ms": samples[-1],
        "mean_ms": sum(samples) / len(samples),
        "lat_ms": [round(x, 3) for x in samples],
        "warmup_ms": [round(x, 3) for x in warm],
        **fields,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--broker", default="orm")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--latency-n", type=int, default=100)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--tests", default="drain,latency")
    parser.add_argument("--path", choices=PATHS, default="native")
    parser.add_argument(
        "--concurrency", type=int, default=2, help="chat worker processes (the peers run 2)"
    )
    args = smoke.parse(parser, {"n": 20, "latency_n": 3})
    CONCURRENCY[0] = args.concurrency
    setup_django(args.database_url, args.broker)
    RESULTS.mkdir(parents=True, exist_ok=True)
    logs = LOGS
    logs.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"delivery-{stamp}.jsonl"
    for rep in range(args.reps):
        for test in args.tests.split(","):
            record = (
                drain(args.n, logs, path=args.path)
                if test == "drain"
                else latency(args.latency_n, logs, seed=1001 + rep, path=args.path)
            )
            record.update(rep=rep, broker=args.broker)
            print(
                json.dumps({k: v for k, v in record.items() if k not in ("lat_ms", "warmup_ms")}),
                flush=True,
            )
            with out.open("a") as handle:
                handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
