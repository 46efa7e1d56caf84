"""Enqueue during a prune (retention under load, issue 12 section 2) on PostgreSQL.

    .venv/bin/python bench/prune_load.py --n 100000          # ~3-4 minutes (+2 to build)
    .venv/bin/python bench/prune_load.py --quick             # N=10k, 10 s windows: a quick look
    .venv/bin/python bench/prune_load.py --smoke             # N=300, 1 s windows (the tests run it)
    .venv/bin/python bench/prune_load.py --n 100000 --prune-nice 19
    .venv/bin/python bench/prune_load.py --report bench/results/prune_load-<stamp>.jsonl
    .venv/bin/python bench/prune_load.py --n 100000 --duration 30 --rebuild

Store: N jobs built by bench/scale.py's builder (bench/scale_data.py, scenario `mixed`:
~88 % settled over the last 28 days, ~12 % active; real sealing, real fold, COPY) into
`receipt_prune_<size>_src` on --server (--database-prefix receipt_prune), reused while it
holds N jobs and N streams. Every run works on a fresh copy, `receipt_prune_<size>`
(CREATE DATABASE ... TEMPLATE, FILE_COPY),
since the prune consumes it. The prune runs with every retention window at --window-days
(default 1: RECEIPT_RETENTION_DAYS / _WATCHDOG_DAYS / _CONTROL_DAYS), so the settled jobs
older than a day, ~85 % of the store, are past it; the active ones never are.

Protocol, in one process bound to the copy (Django, broker `orm`, dispatch by the outbox
thread, as bench/delivery_figures.py enqueue_single), after 10 warm-up enqueues and
--warmup (3) seconds of the loop below, untimed:
1. baseline: `jobs.queue.enqueue("bench-noop", {kind factory.dispatch})` one by one for
   --duration seconds; each call timed (perf_counter); then the clock runs on until every
   job enqueued has its driver promise (dispatched rate = jobs / loop start -> all
   dispatched).
2. during prune: `manage.py receipts prune --json` (the production command and batch
   settings) starts in a separate process; once it is up, the same loop runs for
   --duration seconds or until the prune exits, whichever is first; then the prune is
   waited for. The prune process wraps `jobs.retention._prune_batch` (one transaction:
   lock, verify, delete, tombstones, retention receipt) and `_candidates` (the keyset
   scan) with timers, and times every SQL statement (Django execute_wrapper).
2b. alternating (--ab-window 4 s, 0 for none): if the prune is still running after that
   window, the loop goes on in windows of 4 s, the prune running and held (before its
   next batch, no transaction open: a flag file it checks) in turns, until it ends. Each
   window is counted after its first 0.6 s. Both states share the same minutes of a
   shared machine, so their ratio is the figure least disturbed by other load; the
   held time is left out of the prune's wall time and streams/s.
3. after: the loop again for --duration seconds on the pruned store.
A CHECKPOINT precedes each phase. Throughout, a thread samples pg_stat_activity every
--sample-ms (50) ms on its own connection: per phase and per role (by application_name
and backend pid: `prune`; `enqueue`, the enqueuing thread's connection; `dispatch`, the
outbox thread's; `autovacuum`), the oldest open transaction, heavyweight lock waits (how
long, on what, blocked by whom) and wait events. Beside them: CPU cores used by the
enqueuer and by the prune (process and its PostgreSQL backend, from /proc: the server
must run on this machine) and the server's WAL rate. `--prune-nice N` runs the prune
under nice(1), to see whether a lower CPU priority shields enqueue.
4. verify: `manage.py receipts verify retention/ --strict --json` (the retention chain:
   every batch's tombstones against its receipt), `receipts.retention.verify("")` (the
   whole-store checks: tombstones no receipt commits to, receipts without their stream,
   read-model or delivery rows of a removed stream), every job enqueued present with its
   driver promise and a chain that verifies, the pruned count equal to the tombstones
   and no settled job past the window left.

Output: the markdown on stdout, JSON lines in bench/results/prune_load-<stamp>.jsonl
($BENCH_RESULTS instead of bench/results),
progress on stderr. Figures from one run on a shared machine: read the load average and
foreign-CPU columns beside them. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("BENCH_RESULTS") or ROOT / "bench" / "results")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke  # noqa: E402

DATA_DIR = "/tmp/prune-data"
APP = "prune-load"  # application_name prefix of every connection of this bench
KIND = "factory.dispatch"
AGENT = "bench-noop"
WARMUP = 10
SETTLE = 0.6  # s at the start of an alternating window left out of its count
DAY = 86_400_000
SETTLED = ("completed", "failed", "canceled")


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def size_label(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def db_url(server: str, name: str) -> str:
    return server.rstrip("/") + "/" + name


def loadavg() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def pct(values: list[float], p: float) -> float | None:
    from delivery import percentile

    return percentile(sorted(values), p) if values else None


def rnd(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _env(url: str, role: str, window_days: int | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "RECEIPT_DATA_DIR": DATA_DIR,
        "RECEIPT_LOG_LEVEL": "WARNING",
        "PGAPPNAME": f"{APP}:{role}",
    }
    if window_days is not None:
        for name in ("DAYS", "WATCHDOG_DAYS", "CONTROL_DAYS"):
            env[f"RECEIPT_RETENTION_{name}"] = str(window_days)
    return env


def _result(stdout: str) -> dict[str, Any]:
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"no RESULT line in the child's output: {stdout[-2000:]!r}")


# ---- the store: scale.py's builder into a source database, copied for every run -----------


def build_child(url: str, n: int, workers: int, rebuild: bool) -> None:
    """Child process: the source store of N jobs, built unless it is there already."""
    import scale
    from delivery import setup_django, sql

    setup_django(url, "orm")
    import jobs.projector  # noqa: F401 (families registered by the app)

    jobs_count, streams = scale._counts()
    if rebuild or jobs_count != n or streams != n:
        log(f"building {n:,} jobs in {url} (found {jobs_count:,} jobs, {streams:,} streams)")
        record = scale.build(n, "mixed", workers)
    else:
        log(f"reusing {url} ({n:,} jobs)")
        record = {"record": "build", "scenario": "mixed", "n": n, "reused": True}
    record["newest_job_ms"] = sql("SELECT coalesce(max(created_at), 0) FROM jobs_job")[0][0]
    sys.stdout.write("RESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()


def clone(server: str, source: str, target: str) -> float:
    """A fresh copy of the source store (dropping the previous run's copy)."""
    from delivery import _admin

    started = time.perf_counter()
    admin = _admin(db_url(server, "postgres"))
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{target}"')
        admin.execute(f'CREATE DATABASE "{target}" TEMPLATE "{source}" STRATEGY FILE_COPY')
    finally:
        admin.close()
    return time.perf_counter() - started


def _backend_pid() -> int:
    from delivery import sql

    return sql("SELECT pg_backend_pid()")[0][0]


def _proc_cpu(pid: int) -> float:
    """CPU seconds of a local process (a PostgreSQL backend): -1 when not readable."""
    from noise import CLK_TCK

    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, ValueError, IndexError):
        return -1.0


def _wal_lsn() -> str:
    from delivery import sql

    return sql("SELECT pg_current_wal_lsn()::text")[0][0]


def _wal_since(lsn: str) -> int:
    """WAL bytes the whole server wrote since `lsn`."""
    from delivery import sql

    return int(sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", [lsn])[0][0])


# ---- the prune process ----------------------------------------------------------------------


_LIST = re.compile(r"(?:%s, )+%s")
_ROWS = re.compile(r"(\([^()]*\))(?:, \([^()]*\))+")


def _shape(statement: str) -> str:
    """One label per statement shape (IN lists and VALUES rows collapsed)."""
    return _ROWS.sub(r"\1, ...", _LIST.sub("%s, ...", statement))[:220]


def prune_child(url: str, batches_path: Path, pause_path: Path) -> None:
    """Child process: `receipts prune --json`, its batches and statements timed; while
    `pause_path` exists it waits before its next batch (no transaction open)."""
    from delivery import setup_django

    setup_django(url, "orm")
    from django.core.management import call_command
    from django.core.management.base import CommandError
    from django.db import connection

    import jobs.projector  # noqa: F401
    from jobs import retention

    batches: list[dict[str, Any]] = []
    paused = [0.0]
    scan: dict[str, Any] = {}
    statements: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    real_batch, real_candidates = retention._prune_batch, retention._candidates

    def candidates(lane: Any, after: Any, limit: int) -> Any:
        t0 = time.perf_counter()
        rows = real_candidates(lane, after, limit)
        scan.update(ms=(time.perf_counter() - t0) * 1000, rows=len(rows))
        return rows

    def batch(rows: Any, lane: Any, report: Any, **options: Any) -> int:
        if pause_path.exists():
            p0 = time.perf_counter()
            while pause_path.exists():
                time.sleep(0.01)
            paused[0] += time.perf_counter() - p0
        before = (report.acted, report.receipts, report.skipped, len(report.errors))
        wall = time.time()
        t0 = time.perf_counter()
        taken = real_batch(rows, lane, report, **options)
        txn_ms = (time.perf_counter() - t0) * 1000
        batches.append(
            {
                "at": round(wall, 3),
                "family": lane.family,
                "status": lane.status,
                "candidates": scan.get("rows"),
                "scan_ms": round(scan.get("ms", 0.0), 3),
                "txn_ms": round(txn_ms, 3),
                "taken": taken,
                "pruned": report.acted - before[0],
                "receipts": report.receipts - before[1],
                "skipped": report.skipped - before[2],
                "errors": len(report.errors) - before[3],
            }
        )
        return taken

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            ms = (time.perf_counter() - t0) * 1000
            entry = statements[_shape(sql)]
            entry[0] += 1
            entry[1] += ms
            entry[2] = max(entry[2], ms)

    retention._prune_batch = batch
    retention._candidates = candidates
    backend = _backend_pid()
    print("READY", flush=True)
    out = io.StringIO()
    error = None
    server0, cpu0 = _proc_cpu(backend), time.process_time()
    t0 = time.perf_counter()
    with connection.execute_wrapper(timed):
        try:
            call_command("receipts", "prune", "--json", "--by", f"bench:{APP}", stdout=out)
        except CommandError as failure:
            error = str(failure)
    wall = time.perf_counter() - t0
    cpu, server = time.process_time() - cpu0, _proc_cpu(backend) - server0
    batches_path.write_text("".join(json.dumps(b) + "\n" for b in batches))
    top = sorted(statements.items(), key=lambda kv: -kv[1][1])[:12]
    record = {
        "wall_s": wall,
        "paused_s": paused[0],
        "client_cpu_cores": round(cpu / (wall - paused[0]), 2),
        "server_cpu_cores": round(server / (wall - paused[0]), 2) if server >= 0 else None,
        "command": json.loads(out.getvalue() or "{}"),
        "error": error,
        "statements": [
            {"sql": s, "calls": c, "total_ms": round(t, 1), "max_ms": round(m, 2)}
            for s, (c, t, m) in top
        ],
    }
    sys.stdout.write("RESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()


# ---- pg_stat_activity sampling ---------------------------------------------------------------

SAMPLE = """
SELECT a.pid, a.application_name, a.backend_type, a.state,
       extract(epoch FROM clock_timestamp() - a.xact_start) * 1000,
       extract(epoch FROM clock_timestamp() - a.query_start) * 1000,
       a.wait_event_type, a.wait_event,
       CASE WHEN a.wait_event_type = 'Lock' THEN pg_blocking_pids(a.pid) END,
       CASE WHEN a.wait_event_type = 'Lock' THEN (
           SELECT string_agg(l.locktype || ' ' || l.mode
                             || coalesce(' on ' || l.relation::regclass::text, ''), ', ')
           FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted) END,
       left(a.query, 160)
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
"""


def _role(app: str, backend_type: str) -> str:
    if app.startswith(f"{APP}:"):
        return app.split(":", 1)[1]
    return "autovacuum" if backend_type.startswith("autovacuum") else "other"


class Sampler(threading.Thread):
    """pg_stat_activity every `interval` s, summarised per (phase, role)."""

    def __init__(self, url: str, interval: float) -> None:
        super().__init__(name="pg-sampler", daemon=True)
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True, application_name=f"{APP}:sampler")
        self.interval = interval
        self.phase = "setup"
        self.halt = threading.Event()
        self.stats: dict[tuple[str, str], dict[str, Any]] = {}
        self.ticks: collections.Counter[str] = collections.Counter()
        self.gaps: list[float] = []
        self.callers: set[int] = set()  # the enqueuing thread's backends; others: dispatch

    def _entry(self, phase: str, role: str) -> dict[str, Any]:
        key = (phase, role)
        if key not in self.stats:
            self.stats[key] = {
                "phase": phase,
                "role": role,
                "seen": 0,
                "max_xact_ms": 0.0,
                "max_xact_query": None,
                "lock_wait_samples": 0,
                "max_lock_wait_ms": 0.0,
                "lock_waits": [],
                "locks": collections.Counter(),
                "blocked_by": collections.Counter(),
                "waits": collections.Counter(),
            }
        return self.stats[key]

    def run(self) -> None:
        last = None
        while not self.halt.is_set():
            started = time.perf_counter()
            if last is not None:
                self.gaps.append(started - last)
            last = started
            rows = self.conn.execute(SAMPLE).fetchall()
            phase = self.phase
            self.ticks[phase] += 1
            roles = {r[0]: _role(r[1] or "", r[2] or "") for r in rows}
            for pid, role in roles.items():
                if role == "enqueue" and pid not in self.callers:
                    roles[pid] = "dispatch"
            for pid, _, _, state, xact_ms, query_ms, wtype, wevent, blockers, want, query in rows:
                entry = self._entry(phase, roles[pid])
                entry["seen"] += 1
                if xact_ms is not None and state != "idle" and xact_ms > entry["max_xact_ms"]:
                    entry["max_xact_ms"] = float(xact_ms)
                    entry["max_xact_query"] = query
                if wtype:
                    entry["waits"][f"{wtype}:{wevent}"] += 1
                if wtype == "Lock":
                    entry["lock_wait_samples"] += 1
                    waited = float(query_ms or 0.0)
                    entry["max_lock_wait_ms"] = max(entry["max_lock_wait_ms"], waited)
                    entry["locks"][want or "(granted meanwhile)"] += 1
                    for blocker in blockers or []:
                        entry["blocked_by"][roles.get(blocker, "another database")] += 1
                    if len(entry["lock_waits"]) < 50:
                        entry["lock_waits"].append(
                            {
                                "ms": round(waited, 1),
                                "lock": want,
                                "blocked_by": [
                                    roles.get(b, "another database") for b in blockers or []
                                ],
                                "query": query,
                            }
                        )
            self.halt.wait(max(0.0, self.interval - (time.perf_counter() - started)))
        self.conn.close()

    def records(self) -> list[dict[str, Any]]:
        out = []
        for entry in self.stats.values():
            record = dict(entry)
            record["max_xact_ms"] = round(record["max_xact_ms"], 1)
            record["max_lock_wait_ms"] = round(record["max_lock_wait_ms"], 1)
            record["waits"] = dict(record["waits"].most_common(12))
            record["locks"] = dict(record["locks"].most_common(6))
            record["blocked_by"] = dict(record["blocked_by"])
            record["samples"] = self.ticks[entry["phase"]]
            out.append({"record": "activity", **record})
        return out


# ---- the enqueuer ------------------------------------------------------------------------------


def wait_ids_dispatched(ids: list[str], timeout_s: float) -> float:
    """perf_counter() once every job of `ids` has its driver promise (the outbox's pass
    first; counted by job id: the prune deletes other jobs' promises meanwhile)."""
    from delivery import sql

    from jobs.runtime import dispatch

    deadline = time.perf_counter() + timeout_s
    outbox = getattr(dispatch, "OUTBOX", None)
    if outbox is not None:
        outbox.drain(timeout_s)
    while True:
        count = sql(
            "SELECT count(DISTINCT job_id) FROM jobs_delivery_promise "
            "WHERE function = 'driver' AND job_id = ANY(%s)",
            [ids],
        )[0][0]
        if count >= len(ids):
            return time.perf_counter()
        if time.perf_counter() > deadline:
            raise RuntimeError(f"only {count} of {len(ids)} jobs dispatched after {timeout_s} s")
        time.sleep(0.005)


class Enqueuer:
    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.next = 0
        self.all_ids: list[str] = []

    def payload(self) -> dict[str, Any]:
        self.next += 1
        return {
            "kind": KIND,
            "authContext": {"userId": "bench", "organizationId": "bench"},
            "i": self.next,
        }

    def warm_up(self) -> None:
        from delivery import sql

        from jobs import queue

        self.sampler.callers.add(sql("SELECT pg_backend_pid()")[0][0])
        ids = [queue.enqueue(AGENT, self.payload()).job.job_id for _ in range(WARMUP)]
        wait_ids_dispatched(ids, 60)
        self.all_ids += ids

    def alternate(
        self, running: Any, pause: Path, window: float, sampler: Sampler
    ) -> list[dict[str, Any]]:
        """While the prune runs: windows of `window` s, the prune running (`on`) or held
        before its next batch (`off`), in turns; each window counted after its first
        SETTLE s (a batch under way finishes first). An `on` window cut short by the
        prune's end is dropped. Returns one record per state."""
        from jobs import queue

        kept: dict[str, list[tuple[int, float, list[float]]]] = {"on": [], "off": []}
        ids: list[str] = []
        state = "on"
        while True:
            if state == "off":
                pause.touch()
            else:
                pause.unlink(missing_ok=True)
            sampler.phase = f"ab-{state}"
            begun = time.perf_counter()
            counted, end = begun + SETTLE, begun + window
            lat: list[float] = []
            ended = False
            while True:
                t0 = time.perf_counter()
                if t0 >= end:
                    break
                if state == "on" and not running():
                    ended = True
                    break
                ids.append(queue.enqueue(AGENT, self.payload()).job.job_id)
                if t0 >= counted:
                    lat.append((time.perf_counter() - t0) * 1000)
            if not ended:
                kept[state].append((len(lat), time.perf_counter() - counted, lat))
            if ended or not running():
                break
            state = "off" if state == "on" else "on"
        pause.unlink(missing_ok=True)
        sampler.phase = "prune-tail"
        wait_ids_dispatched(ids, 600)
        self.all_ids += ids
        out = []
        for state, windows in kept.items():
            lat = [x for _, _, w in windows for x in w]
            seconds = sum(s for _, s, _ in windows)
            out.append(
                {
                    "record": "alternating",
                    "phase": f"ab-{state}",
                    "windows": len(windows),
                    "jobs": len(lat),
                    "seconds": round(seconds, 2),
                    "caller_per_s": round(len(lat) / seconds, 1) if seconds else None,
                    "per_window": [round(n / s, 1) for n, s, _ in windows if s > 0],
                    "lat_p50_ms": rnd(pct(lat, 50)),
                    "lat_p95_ms": rnd(pct(lat, 95)),
                    "lat_p99_ms": rnd(pct(lat, 99)),
                    "lat_max_ms": rnd(max(lat) if lat else None),
                    "loadavg": loadavg(),
                }
            )
        return out

    def run(self, phase: str, seconds: float, stop: Any = None) -> dict[str, Any]:
        """Enqueue one by one for `seconds` (or until stop()), then wait for dispatch."""
        from delivery import server_roots
        from noise import Noise

        from jobs import queue

        backend = _backend_pid()
        self.sampler.callers.add(backend)
        noise = Noise(server_roots())
        cpu0, server0 = time.process_time(), _proc_cpu(backend)
        wal0 = _wal_lsn()
        ids: list[str] = []
        lat: list[float] = []
        at: list[float] = []
        started = time.perf_counter()
        end = started + seconds
        while True:
            t0 = time.perf_counter()
            if t0 >= end or (stop is not None and stop()):
                break
            ids.append(queue.enqueue(AGENT, self.payload()).job.job_id)
            t1 = time.perf_counter()
            lat.append((t1 - t0) * 1000)
            at.append(t1 - started)
        caller_s = time.perf_counter() - started
        cpu, server = time.process_time() - cpu0, _proc_cpu(backend) - server0
        wal = _wal_since(wal0)
        done = wait_ids_dispatched(ids, 600)
        fields = noise.done()
        self.all_ids += ids
        total_s = done - started
        per_second = collections.Counter(int(t) for t in at)
        whole = [per_second.get(s, 0) for s in range(int(caller_s))]  # complete seconds only
        slow = sorted(((round(ms, 1), round(t, 2)) for ms, t in zip(lat, at, strict=True)))[-5:]
        return {
            "record": "enqueue",
            "phase": phase,
            "jobs": len(ids),
            "caller_s": round(caller_s, 3),
            "caller_per_s": round(len(ids) / caller_s, 1),
            "dispatched_s": round(total_s, 3),
            "dispatched_per_s": round(len(ids) / total_s, 1),
            "dispatch_lag_s": round(total_s - caller_s, 3),
            "wal_mib_per_s": round(wal / caller_s / 2**20, 2),  # the whole server's
            "client_cpu_cores": round(cpu / caller_s, 2),  # the whole process (both threads)
            "server_cpu_cores": round(server / caller_s, 2) if server >= 0 else None,
            "lat_p50_ms": rnd(pct(lat, 50)),
            "lat_p95_ms": rnd(pct(lat, 95)),
            "lat_p99_ms": rnd(pct(lat, 99)),
            "lat_max_ms": rnd(max(lat) if lat else None),
            "lat_mean_ms": rnd(statistics.fmean(lat) if lat else None),
            "over_100ms": sum(1 for x in lat if x > 100),
            "slowest": [{"ms": ms, "at_s": t} for ms, t in slow],
            "per_second": whole,
            "worst_second": min(whole) if whole else None,
            "loadavg": loadavg(),
            **fields,
        }


# ---- one run ----------------------------------------------------------------------------------


def prunable(cutoff_ms: int) -> int:
    from delivery import sql

    return sql(
        "SELECT count(*) FROM jobs_job WHERE status = ANY(%s) AND updated_at < %s",
        [list(SETTLED), cutoff_ms],
    )[0][0]


def store_record(label: str, window_days: int) -> dict[str, Any]:
    from delivery import sql
    from django.db import connection

    now = int(time.time() * 1000)
    rows = sql(
        "SELECT pg_database_size(current_database()), (SELECT count(*) FROM receipt_receipt), "
        "(SELECT count(*) FROM jobs_job), (SELECT count(*) FROM receipt_stream)"
    )[0]
    return {
        "record": "store",
        "size": label,
        "bytes": rows[0],
        "receipts": rows[1],
        "jobs": rows[2],
        "streams": rows[3],
        "prunable": prunable(now - window_days * DAY),
        "window_days": window_days,
        "server": connection.pg_version,
    }


def summarise_batches(batches: list[dict[str, Any]]) -> dict[str, Any]:
    txn = [b["txn_ms"] for b in batches]
    scan = [b["scan_ms"] for b in batches]
    acting = [b for b in batches if b["pruned"]]
    worst = max(batches, key=lambda b: b["txn_ms"]) if batches else None
    return {
        "batches": len(batches),
        "acting_batches": len(acting),
        "txn_p50_ms": rnd(pct(txn, 50)),
        "txn_p95_ms": rnd(pct(txn, 95)),
        "txn_max_ms": rnd(max(txn) if txn else None),
        "txn_p95_acting_ms": rnd(pct([b["txn_ms"] for b in acting], 95)),
        "scan_p50_ms": rnd(pct(scan, 50)),
        "scan_p95_ms": rnd(pct(scan, 95)),
        "scan_max_ms": rnd(max(scan) if scan else None),
        "scan_total_s": rnd(sum(scan) / 1000),
        "txn_total_s": rnd(sum(txn) / 1000),
        "worst_batch": worst,
        "streams_per_batch_p50": pct([b["pruned"] for b in acting], 50),
    }


def verify(enqueued: list[str], pruned: int, cutoff_ms: int) -> dict[str, Any]:
    from delivery import sql
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from receipts import retention, store

    started = time.perf_counter()
    out = io.StringIO()
    try:
        call_command(
            "receipts",
            "verify",
            "retention/",
            "--strict",
            "--json",
            "--by",
            f"bench:{APP}",
            stdout=out,
        )
        chain_error = None
    except CommandError as error:
        chain_error = str(error)
    chain = json.loads(out.getvalue() or "{}")
    issues = [i.to_wire() for i in retention.verify("")]
    present = sql("SELECT count(*) FROM jobs_job WHERE id = ANY(%s)", [enqueued])[0][0]
    dispatched = sql(
        "SELECT count(DISTINCT job_id) FROM jobs_delivery_promise "
        "WHERE function = 'driver' AND job_id = ANY(%s)",
        [enqueued],
    )[0][0]
    checks = store.verify_many([f"jobs/{i}" for i in enqueued])
    broken = [name for name, check in checks.items() if not check.ok]
    tombstones = sql("SELECT count(*) FROM receipt_tombstone")[0][0]
    left = prunable(cutoff_ms)
    ok = (
        chain_error is None
        and chain.get("ok") is True
        and not issues
        and present == dispatched == len(enqueued)
        and not broken
        and len(checks) == len(enqueued)
        and tombstones == pruned
    )
    return {
        "record": "verify",
        "ok": ok,
        "retention_chain": {k: chain.get(k) for k in ("ok", "checked", "broken", "retention")},
        "retention_chain_error": chain_error,
        "store_issues": issues[:20],
        "enqueued": len(enqueued),
        "present": present,
        "dispatched": dispatched,
        "chains_verified": len(checks),
        "chains_broken": broken[:20],
        "tombstones": tombstones,
        "pruned": pruned,
        "left_past_window": left,
        "verify_s": round(time.perf_counter() - started, 2),
    }


def run(args: argparse.Namespace, out: Any) -> list[dict[str, Any]]:
    label = size_label(args.n)
    source, target = f"{args.database_prefix}_{label}_src", f"{args.database_prefix}_{label}"
    records: list[dict[str, Any]] = []

    def emit(record: dict[str, Any]) -> None:
        records.append(record)
        out.write(json.dumps(record) + "\n")
        out.flush()

    emit(
        {
            "record": "meta",
            "n": args.n,
            "duration_s": args.duration,
            "window_days": args.window_days,
            "prune_nice": args.prune_nice,
            "ab_window": args.ab_window,
            "sample_ms": args.sample_ms,
            "server": args.server,
            "database": target,
            "loadavg_start": loadavg(),
            "cpus": os.cpu_count(),
        }
    )
    log(f"== store {source} ({args.n:,} jobs); load {loadavg()}")
    child = subprocess.run(
        [sys.executable, __file__, "--build-child", "--n", str(args.n), "--server", args.server]
        + ["--workers", str(args.workers)]
        + (["--rebuild"] if args.rebuild else []),
        env=_env(db_url(args.server, source), "build"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    build = _result(child.stdout)
    build["size"] = label
    emit(build)
    clone_s = clone(args.server, source, target)
    log(f"== copied to {target} in {clone_s:.1f} s")

    url = db_url(args.server, target)
    os.environ.update(_env(url, "enqueue"))
    from delivery import setup_django, sql

    setup_django(url, "orm")
    import jobs.projector  # noqa: F401

    store = store_record(label, args.window_days)
    store["clone_s"] = round(clone_s, 1)
    emit(store)
    log(f"   store: {store}")
    sampler = Sampler(url, args.sample_ms / 1000)
    sampler.start()
    enqueuer = Enqueuer(sampler)
    enqueuer.warm_up()
    emit(enqueuer.run("warmup", args.warmup))  # untimed for the report: caches, plans
    prune: subprocess.Popen | None = None
    try:
        sampler.phase = "checkpoint"
        sql("CHECKPOINT")
        sampler.phase = "baseline"
        log(f"== baseline: enqueue for {args.duration} s; load {loadavg()}")
        base = enqueuer.run("baseline", args.duration)
        emit(base)
        log(f"   {_brief(base)}")

        sampler.phase = "checkpoint"
        sql("CHECKPOINT")
        sampler.phase = "prune"
        batches_path = RESULTS / f"prune_load-batches-{os.getpid()}.jsonl"
        pause_path = Path(DATA_DIR) / f"prune_load-pause-{os.getpid()}"
        pause_path.unlink(missing_ok=True)
        wal0 = _wal_lsn()
        spawned = time.perf_counter()
        prune_started_ms = int(time.time() * 1000)
        prune = subprocess.Popen(
            (["nice", "-n", str(args.prune_nice)] if args.prune_nice else [])
            + [sys.executable, __file__, "--prune-child", str(batches_path)]
            + ["--pause-flag", str(pause_path)],
            env=_env(url, "prune", args.window_days),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert prune.stdout is not None
        ready = prune.stdout.readline().strip()
        if ready != "READY":
            raise RuntimeError(f"the prune process did not start: {ready!r}")
        startup_s = time.perf_counter() - spawned
        log(f"== during prune: enqueue for {args.duration} s or until it ends; load {loadavg()}")
        during = enqueuer.run("prune", args.duration, stop=lambda: prune.poll() is not None)
        during["prune_running_at_end"] = prune.poll() is None
        emit(during)
        log(f"   {_brief(during)} (prune still running: {during['prune_running_at_end']})")
        if args.ab_window > 0 and prune.poll() is None:
            log(f"== alternating {args.ab_window} s windows, prune on / paused, until it ends")
            for record in enqueuer.alternate(
                lambda: prune.poll() is None, pause_path, args.ab_window, sampler
            ):
                emit(record)
                log(f"   {record['phase']}: {record}")
        pause_path.unlink(missing_ok=True)
        sampler.phase = "prune-tail"
        rest = prune.stdout.read()
        code = prune.wait()
        wall_s = time.perf_counter() - spawned - startup_s
        wal = _wal_since(wal0)
        if code != 0:
            raise RuntimeError(f"the prune process exited with {code}")
        result = _result(rest)
        batches = [json.loads(line) for line in batches_path.read_text().splitlines()]
        batches_path.unlink()
        families = result["command"].get("families", [{}])
        pruned = sum(f.get("pruned", 0) for f in families)
        pruning = {
            "record": "prune",
            "streams": pruned,
            "receipts": sum(f.get("receipts", 0) for f in families),
            "skipped": sum(f.get("skipped", 0) for f in families),
            "errors": [e for f in families for e in f.get("errors", [])][:20],
            "command_error": result["error"],
            "by_family": families[0].get("byFamily") if families else None,
            "wall_s": round(result["wall_s"] - result["paused_s"], 2),  # held time left out
            "paused_s": round(result["paused_s"], 2),
            "wall_s_outside": round(wall_s - result["paused_s"], 2),  # as seen from here
            "startup_s": round(startup_s, 2),
            "streams_per_s": round(pruned / (result["wall_s"] - result["paused_s"]), 1),
            "wal_mib": round(wal / 2**20, 1),  # the whole server's, prune and enqueuer
            "client_cpu_cores": result["client_cpu_cores"],
            "server_cpu_cores": result["server_cpu_cores"],
            "overlap_s": during["caller_s"],
            **summarise_batches(batches),
            "statements": result["statements"],
            "loadavg": loadavg(),
        }
        emit(pruning)
        emit({"record": "batches", "batches": batches})
        log(f"   prune: {pruning}")

        sampler.phase = "checkpoint"
        sql("CHECKPOINT")
        sampler.phase = "after"
        log(f"== after: enqueue for {args.duration} s; load {loadavg()}")
        after = enqueuer.run("after", args.duration)
        emit(after)
        log(f"   {_brief(after)}")
        sampler.phase = "verify"
    finally:
        if prune is not None and prune.poll() is None:
            prune.send_signal(signal.SIGTERM)
            prune.wait(timeout=30)
        sampler.halt.set()
        sampler.join(timeout=10)
    for activity in sampler.records():
        emit(activity)
    gaps = sorted(sampler.gaps)
    emit(
        {
            "record": "sampler",
            "interval_ms": args.sample_ms,
            "ticks": dict(sampler.ticks),
            "gap_p50_ms": rnd(pct([g * 1000 for g in gaps], 50)),
            "gap_max_ms": rnd(gaps[-1] * 1000 if gaps else None),
        }
    )
    log("== verify")
    checked = verify(
        enqueuer.all_ids, pruning["streams"], prune_started_ms - args.window_days * DAY
    )
    emit(checked)
    log(f"   {checked}")
    from jobs.runtime import dispatch

    if getattr(dispatch, "OUTBOX", None) is not None:
        dispatch.OUTBOX.stop()
    emit({"record": "end", "loadavg_end": loadavg()})
    return records


def _brief(r: dict[str, Any]) -> str:
    return (
        f"{r['jobs']} jobs, caller {r['caller_per_s']}/s, dispatched {r['dispatched_per_s']}/s, "
        f"p50 {r['lat_p50_ms']} p95 {r['lat_p95_ms']} max {r['lat_max_ms']} ms, "
        f"foreign {r['foreign_cpu_cores']}, load {r['loadavg']}"
    )


# ---- report -----------------------------------------------------------------------------------


def report(records: list[dict[str, Any]], path: Path) -> str:
    by = collections.defaultdict(list)
    for r in records:
        by[r["record"]].append(r)
    meta, store = by["meta"][0], by["store"][0]
    enqueue = {r["phase"]: r for r in by["enqueue"]}
    activity = {(r["phase"], r["role"]): r for r in by["activity"]}
    prune = by["prune"][0] if by["prune"] else None
    checked = by["verify"][0] if by["verify"] else None
    base = enqueue.get("baseline")
    out = [
        f"Run `{path.name}`: {meta['n']:,} jobs ({store['receipts']:,} receipts, "
        f"{store['bytes'] / 2**20:,.0f} MiB), {store['prunable']:,} settled past the "
        f"{meta['window_days']}-day window; enqueue windows of {meta['duration_s']} s"
        + (f"; prune under nice {meta['prune_nice']}" if meta.get("prune_nice") else "")
        + "; "
        f"load average at start {meta['loadavg_start']}, at end "
        f"{by['end'][0]['loadavg_end'] if by['end'] else '?'} ({meta['cpus']} CPUs).",
        "",
        "| phase | jobs | enqueue jobs/s (caller) | dispatched jobs/s | vs baseline | "
        "latency p50 / p95 / p99 / max ms | worst 1-s | enqueuer max xact ms | "
        "lock-wait samples enqueue / dispatch | enqueuer CPU cores (process / its backend) | "
        "WAL MiB/s | foreign cores | load 1-min |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for phase, title in (
        ("baseline", "baseline (no prune)"),
        ("prune", "during prune"),
        ("after", "after (pruned store)"),
    ):
        row = enqueue.get(phase)
        if row is None:
            continue
        act = activity.get((phase, "enqueue"), {})
        ratio = (
            f"{row['dispatched_per_s'] / base['dispatched_per_s']:.0%}"
            if base and phase != "baseline"
            else "-"
        )
        cells = []
        for role in ("enqueue", "dispatch"):
            a = activity.get((phase, role), {})
            n = a.get("lock_wait_samples", 0)
            cells.append(f"{n} (max {a['max_lock_wait_ms']:.0f} ms)" if n else "0")
        out.append(
            f"| {title} | {row['jobs']:,} | {row['caller_per_s']:,.0f} | {row['dispatched_per_s']:,.0f}"
            f" | {ratio} | {row['lat_p50_ms']} / {row['lat_p95_ms']} / {row['lat_p99_ms']} / "
            f"{row['lat_max_ms']} | {row['worst_second']} | {act.get('max_xact_ms', '-')} | "
            + " / ".join(cells)
            + f" | {row['client_cpu_cores']} / {row['server_cpu_cores']}"
            + f" | {row.get('wal_mib_per_s', '-')}"
            + f" | {row['foreign_cpu_cores']} | {row['loadavg'].split()[0]} |"
        )
    ab = {r["phase"]: r for r in by["alternating"]}
    if ab.get("ab-on") and ab.get("ab-off") and ab["ab-on"]["seconds"] and ab["ab-off"]["seconds"]:
        on, off = ab["ab-on"], ab["ab-off"]
        out += [
            "",
            f"Alternating windows for the rest of the prune ({meta.get('ab_window')} s each, "
            f"the first {SETTLE} s of each not counted; caller rate, enqueue calls only):",
            "",
            "| prune | windows | counted s | enqueue jobs/s | vs paused | latency p50 / p95 / "
            "p99 / max ms | per window jobs/s |",
            "|---|---|---|---|---|---|---|",
        ]
        for r, title in ((off, "paused before its next batch"), (on, "running")):
            out.append(
                f"| {title} | {r['windows']} | {r['seconds']} | {r['caller_per_s']} | "
                f"{r['caller_per_s'] / off['caller_per_s']:.0%} | {r['lat_p50_ms']} / "
                f"{r['lat_p95_ms']} / {r['lat_p99_ms']} / {r['lat_max_ms']} | "
                f"{', '.join(f'{x:.0f}' for x in r['per_window'])} |"
            )
    if prune:
        act = activity.get(("prune", "prune"), {})
        tail = activity.get(("prune-tail", "prune"), {})
        max_xact = max(act.get("max_xact_ms", 0), tail.get("max_xact_ms", 0))
        waits = act.get("lock_wait_samples", 0) + tail.get("lock_wait_samples", 0)
        out += [
            "",
            "| prune | streams | receipts | batches | wall s | streams/s | batch txn p50 / p95 / "
            "max ms | scan p50 / p95 / max ms | sampled max xact ms | prune lock waits | "
            "skipped | errors | prune CPU cores (process / its backend) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            f"| `receipts prune` | {prune['streams']:,} | {prune['receipts']:,} | "
            f"{prune['batches']} ({prune['acting_batches']} pruning) | {prune['wall_s']} | "
            f"{prune['streams_per_s']} | {prune['txn_p50_ms']} / {prune['txn_p95_ms']} / "
            f"{prune['txn_max_ms']} | {prune['scan_p50_ms']} / {prune['scan_p95_ms']} / "
            f"{prune['scan_max_ms']} | {round(max_xact, 1)} | "
            + (
                f"{waits} (max {max(a.get('max_lock_wait_ms', 0) for a in (act, tail))} ms)"
                if waits
                else "none"
            )
            + f" | {prune['skipped']} | {len(prune['errors'])} | "
            f"{prune['client_cpu_cores']} / {prune['server_cpu_cores']} |",
            "",
            f"Prune: {prune['overlap_s']} s of it overlapped the enqueue window, held "
            f"{prune.get('paused_s', 0)} s in the alternating windows (not in its wall s); "
            "time in batch "
            f"transactions {prune['txn_total_s']} s, in candidate scans {prune['scan_total_s']} s"
            f" (of {prune['wall_s']} s); {prune.get('wal_mib', '?')} MiB of WAL written meanwhile; "
            f"by family {prune['by_family']}. Slowest statements "
            "(total ms, calls, max ms):",
            "",
        ]
        for s in prune["statements"][:6]:
            out.append(
                f"- {s['total_ms']:,.0f} ms, {s['calls']} calls, max {s['max_ms']} ms: "
                f"`{s['sql'][:150]}`"
            )
    waits = [r for r in by["activity"] if r["lock_wait_samples"]]
    if waits:
        out += [
            "",
            f"Heavyweight lock waits seen by the sampler (every {meta['sample_ms']:.0f} ms; "
            "enqueue = the enqueuing thread's connection, dispatch = the outbox thread's):",
        ]
        for r in waits:
            longest = max(r["lock_waits"], key=lambda w: w["ms"]) if r["lock_waits"] else {}
            out.append(
                f"- {r['phase']} / {r['role']}: {r['lock_wait_samples']} samples, max "
                f"{r['max_lock_wait_ms']} ms; {r['locks']}; blocked by {r['blocked_by']}; "
                f"longest at `{(longest.get('query') or '')[:60]}`"
            )
    if checked:
        out += [
            "",
            f"Verify: {'ok' if checked['ok'] else '**FAILED**'}: retention chain "
            f"{checked['retention_chain'].get('ok')} "
            f"({checked['retention_chain_error'] or 'no error'}),"
            f" {len(checked['store_issues'])} store issue(s), {checked['present']:,}/"
            f"{checked['enqueued']:,} enqueued jobs present, {checked['dispatched']:,} dispatched, "
            f"{checked['chains_verified'] - len(checked['chains_broken']):,} chains verify; "
            f"{checked['tombstones']:,} tombstones for {checked['pruned']:,} pruned; "
            f"{checked['left_past_window']:,} settled jobs left past the window.",
        ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=100_000, help="jobs in the store")
    parser.add_argument("--quick", action="store_true", help="N=10k, 10 s windows")
    parser.add_argument("--duration", type=float, default=20.0, help="enqueue window, s")
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed enqueue first, s")
    parser.add_argument(
        "--prune-nice", type=int, default=0, help="run the prune process under nice N"
    )
    parser.add_argument(
        "--ab-window",
        type=float,
        default=4.0,
        help="after the enqueue window, alternate prune on / paused windows of this many s "
        "until it ends (0: off)",
    )
    parser.add_argument("--window-days", type=int, default=1, help="every retention window")
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432/")
    parser.add_argument(
        "--database-prefix",
        default="receipt_prune",
        help="the databases' names: <prefix>_<size>_src and <prefix>_<size>",
    )
    parser.add_argument("--sample-ms", type=float, default=50.0)
    parser.add_argument("--workers", type=int, default=2, help="processes sealing receipts")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the source store")
    parser.add_argument("--report", type=Path, help="only print the report of a results file")
    parser.add_argument("--build-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prune-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pause-flag", type=Path, help=argparse.SUPPRESS)
    args = smoke.parse(
        parser, {"n": 300, "duration": 1.0, "warmup": 0.5, "ab_window": 0.5, "workers": 1}
    )
    if args.quick:
        args.n = 10_000
        if "--duration" not in sys.argv:
            args.duration = 10.0
    os.environ["RECEIPT_DATA_DIR"] = DATA_DIR
    Path(DATA_DIR).mkdir(parents=True, exist_ok=True)
    if args.build_child:
        build_child(os.environ["DATABASE_URL"], args.n, args.workers, args.rebuild)
        return
    if args.prune_child:
        prune_child(os.environ["DATABASE_URL"], args.prune_child, args.pause_flag)
        return
    if args.report:
        records = [json.loads(x) for x in args.report.read_text().splitlines() if x.strip()]
        print(report(records, args.report))
        return
    if urlsplit(args.server).path.strip("/"):
        parser.error("--server names the server only (the databases are this bench's own)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"prune_load-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: the finally stops the prune
    with path.open("w") as out:
        records = run(args, out)
    print(report(records, path))
    sys.stdout.flush()
    os._exit(0)  # the outbox is stopped; skip the rest of interpreter teardown


if __name__ == "__main__":
    main()
