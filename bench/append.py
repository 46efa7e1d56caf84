"""Append throughput of receipts.store on PostgreSQL, optionally beside pgbench (SPEC 16, T-1).

    .venv/bin/python bench/append.py [--database-url URL] [--n 3000] [--reps 3] [--pgbench]
    bench/run --smoke                                         # every figure, 30 receipts
    .venv/bin/python bench/profile_append.py                  # where the time goes

Figures (receipts per second, perf_counter around the timed loop only, after a warm-up):
  single_new       N appends of one receipt, each to a NEW stream (the shape of an enqueue)
  single_existing  N appends of one receipt to 1000 EXISTING streams, round robin
  batched          N single-receipt appends to N new streams inside ONE transaction.atomic()
  multi100         N/100 appends of 100 events each to one stream
  enqueue          N `jobs.queue.enqueue()` calls one at a time (a `factory.dispatch` job
                   each: its receipt, job row and driver promise): T-1's own figure
Streams are named bench/<id> (--stream-prefix): a prefix with no registered family, so
no projector runs and the figures are the store's own cost (jobs/<id> has the jobs
projector, which only accepts real job events; `enqueue` writes real jobs).
Data is reset (delivery.reset: TRUNCATE of the receipt_, jobs_ and objectives_ tables,
RESTART IDENTITY; CHECKPOINT) before every timed section. With --pgbench every repetition first runs the pgbench
anchor (bench/pgbench_anchor.py: insert_one.sql and es_append.sql, 1 client, 15 s) in
its own database on the same server, so the ratios come from one sitting.

Raw records: bench/results/append-<stamp>.jsonl ($BENCH_RESULTS instead of bench/results).
Markdown summary: stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from typing import Any
from urllib.parse import urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import delivery  # noqa: E402
import pgbench_anchor  # noqa: E402
import smoke  # noqa: E402
from pgbench_anchor import Server, busy_cores, busy_jiffies, ensure_database  # noqa: E402

DEFAULT_URL = pgbench_anchor.DEFAULT_URL
EXISTING_STREAMS = 1000  # figure (b)'s streams (--existing-streams)
PREFIX = "bench/"
MULTI = 100
NOISY = 0.3  # foreign cores above which a measurement is flagged as disturbed
TESTS = ("single_new", "single_existing", "batched", "multi100", "enqueue")
LABELS = {
    "single_new": "(a) single append, new stream",
    "single_existing": "(b) single append, existing stream (1000, round robin)",
    "batched": "(c) N single appends in one transaction",
    "multi100": "(d) one append of 100 events, one stream",
    "enqueue": "(e) queue.enqueue one by one (jobs/s)",
    "pgbench_insert_one_c1": "pgbench insert one row, 1 client (TPS)",
    "pgbench_es_append_c1": "pgbench event-store append, 1 client (TPS)",
}


def body(i: int) -> dict:
    # the same fields and size as the body of the peers' pgbench scripts (227 bytes as text)
    return {
        "type": "JobEnqueued",
        "job": "bench_noop",
        "queue": "default",
        "args": {"job_id": i},
        "priority": 0,
        "attempt": 1,
        "max_attempts": 3,
        "scheduled_at": 1796040000,
        "meta": {"source": "receipt-bench", "trace": "0123456789abcdef"},
    }


# ---------------------------------------------------------------- setup
def setup_django(url: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "receipt_site.settings"
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("RECEIPT_DATA_DIR", "/tmp/receipt-bench-data")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    os.environ.setdefault("RECEIPT_LOG_LEVEL", "WARNING")
    os.environ["RECEIPT_BROKER"] = "orm"
    os.environ["RECEIPT_HANDLER_MODULES"] = "bench.handlers"  # the no-op `bench-noop` agent
    server = Server.from_url(url)
    dbname = urlsplit(url).path.lstrip("/") or "receipt"
    if ensure_database(server, dbname):
        print(f"created database {dbname}", file=sys.stderr)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from receipts import registry

    family = registry.family_for(PREFIX + "x")
    if family is not None:
        sys.exit(
            f"stream prefix {PREFIX!r} belongs to the {family.label!r} family (its projector "
            "would run); pick another --stream-prefix"
        )


def sql(statement: str) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement)


def reset() -> None:
    delivery.reset()  # every receipt_ and jobs_ table (and the rest of the app's) emptied


def backend_cpu() -> float | None:
    """CPU seconds used so far by this connection's PostgreSQL backend (same machine only)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------- workloads
# Each workload: prepare(n, tag) (untimed), then run(n, tag) -> receipts written (timed).
def run_single_new(n: int, tag: str) -> int:
    from receipts.store import append

    for i in range(n):
        append(f"{PREFIX}{tag}{i:07d}", body(i))
    return n


def prepare_existing(n: int, tag: str) -> None:
    from django.db import transaction

    from receipts.store import append

    with transaction.atomic():
        for s in range(EXISTING_STREAMS):
            append(f"{PREFIX}{tag}{s:07d}", body(s))


def run_single_existing(n: int, tag: str) -> int:
    from receipts.store import append

    for i in range(n):
        append(f"{PREFIX}{tag}{i % EXISTING_STREAMS:07d}", body(i))
    return n


def run_batched(n: int, tag: str) -> int:
    from django.db import transaction

    from receipts.store import append

    with transaction.atomic():
        for i in range(n):
            append(f"{PREFIX}{tag}{i:07d}", body(i))
    return n


def run_multi(n: int, tag: str) -> int:
    from receipts.store import append

    rounds = max(1, n // MULTI)
    for r in range(rounds):
        append(f"{PREFIX}{tag}multi", [body(r * MULTI + k) for k in range(MULTI)])
    return rounds * MULTI


def run_enqueue(n: int, tag: str) -> int:
    from delivery import payload

    from jobs import queue

    for i in range(n):
        queue.enqueue("bench-noop", payload(i, "factory.dispatch"))
    return n


WORKLOADS = {
    "single_new": (None, run_single_new),
    "single_existing": (prepare_existing, run_single_existing),
    "batched": (None, run_batched),
    "multi100": (None, run_multi),
    "enqueue": (None, run_enqueue),
}


def measure(test: str, n: int, warmup: int, rep: int) -> dict:
    prepare, run = WORKLOADS[test]
    reset()
    # warm-up on the same code path but its own streams (connection, caches, plans)
    if prepare:
        prepare(warmup, f"w{rep}-")
    run(warmup if test != "multi100" else 2 * MULTI, f"w{rep}-")
    if prepare:
        prepare(n, f"r{rep}-")
    sql("CHECKPOINT")
    srv0, cpu0, mach0 = backend_cpu(), time.process_time(), busy_jiffies()
    t0 = time.perf_counter()
    receipts = run(n, f"r{rep}-")
    elapsed = time.perf_counter() - t0
    cpu, mach = time.process_time() - cpu0, busy_jiffies()
    srv1 = backend_cpu()
    rec: dict[str, Any] = {
        "bench": "receipt",
        "test": test,
        "n": n,
        "receipts": receipts,
        "elapsed_s": round(elapsed, 4),
        "rate": round(receipts / elapsed, 1),
        "us_per_receipt": round(1e6 * elapsed / receipts, 1),
        "client_cpu_us_per_receipt": round(1e6 * cpu / receipts, 1),
        "busy_cores": busy_cores(mach0, mach),
    }
    ours = cpu
    if srv0 is not None and srv1 is not None:
        rec["server_cpu_us_per_receipt"] = round(1e6 * (srv1 - srv0) / receipts, 1)
        ours += srv1 - srv0
    rec["foreign_cores"] = round(max(0.0, rec["busy_cores"] - ours / elapsed), 2)
    return rec


# ---------------------------------------------------------------- output
class Out:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)

    def write(self, rec: dict) -> dict:
        with open("/proc/loadavg") as handle:
            load = handle.read().split()[0]
        rec = {"ts": dt.datetime.now().isoformat(timespec="seconds"), "loadavg": load, **rec}
        with open(self.path, "a") as handle:
            handle.write(json.dumps(rec) + "\n")
        print("  ->", json.dumps(rec), file=sys.stderr, flush=True)
        return rec


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def _mmm(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{_fmt(min(values))} / **{_fmt(statistics.median(values))}** / {_fmt(max(values))}"


def _pct(values: list[float]) -> str:
    if not values:
        return "n/a"
    return (
        f"{100 * min(values):.0f} % / **{100 * statistics.median(values):.0f} %** / "
        f"{100 * max(values):.0f} %"
    )


def report(records: list[dict]) -> str:
    """Markdown: figures (min / median / max) and ratios to the pgbench anchor."""
    by: dict[str, dict[int, dict]] = {}
    for rec in records:
        if rec.get("test") in LABELS and "error" not in rec:
            by.setdefault(rec["test"], {})[rec["rep"]] = rec
    lines = [
        "| figure | receipts/s or TPS (min / **median** / max) | µs per receipt or tx "
        "| client CPU µs | server CPU µs | foreign cores |",
        "|---|---|---|---|---|---|",
    ]
    for test, label in LABELS.items():
        reps = by.get(test)
        if not reps:
            continue
        rs = list(reps.values())

        def med(key: str, scale: float = 1.0, rs: list[dict] = rs) -> float | None:
            vals = [r[key] * scale for r in rs if r.get(key) is not None]
            return statistics.median(vals) if vals else None

        if test.startswith("pgbench"):
            rates, per = [r["tps"] for r in rs], med("latency_avg_ms", 1000)
            client, server = med("client_cpu_us_per_tx"), med("server_cpu_us_per_tx")
        else:
            rates, per = [r["rate"] for r in rs], med("us_per_receipt")
            client, server = med("client_cpu_us_per_receipt"), med("server_cpu_us_per_receipt")
        foreign = med("foreign_cores")
        lines.append(
            f"| {label} | {_mmm(rates)} | {_fmt(per)} | {_fmt(client)} | {_fmt(server)} "
            f"| {'n/a' if foreign is None else f'{foreign:.2f}'} |"
        )

    def ratios(test: str, anchor: str) -> list[float]:
        a, b = by.get(test, {}), by.get(anchor, {})
        return [a[r]["rate"] / b[r]["tps"] for r in sorted(set(a) & set(b)) if b[r]["tps"]]

    if "pgbench_es_append_c1" in by:
        lines += [
            "",
            "| ratio (same repetition, min / **median** / max) | value | target |",
            "|---|---|---|",
        ]
        rows = [
            (
                "enqueue",
                "pgbench_es_append_c1",
                "(e) enqueue one by one / event-store append",
                "T-1: >= 70 %",
            ),
            ("single_new", "pgbench_es_append_c1", "(a) single append / event-store append", "-"),
            ("single_new", "pgbench_insert_one_c1", "(a) single append / insert one row", "-"),
            (
                "single_existing",
                "pgbench_es_append_c1",
                "(b) existing stream / event-store append",
                "-",
            ),
            ("batched", "pgbench_es_append_c1", "(c) batched / event-store append", "-"),
            (
                "multi100",
                "pgbench_es_append_c1",
                "(d) 100 events per append / event-store append",
                "-",
            ),
        ]
        cpu = []
        a_reps, e_reps = by.get("single_new", {}), by["pgbench_es_append_c1"]
        for r in sorted(set(a_reps) & set(e_reps)):
            a, e = a_reps[r], e_reps[r]
            if all(e.get(k) for k in ("client_cpu_us_per_tx", "server_cpu_us_per_tx")) and a.get(
                "server_cpu_us_per_receipt"
            ):
                cpu.append(
                    a["client_cpu_us_per_receipt"]
                    + a["server_cpu_us_per_receipt"]
                    - e["client_cpu_us_per_tx"]
                    - e["server_cpu_us_per_tx"]
                )
        for test, anchor, label, target in rows:
            vals = ratios(test, anchor)
            if vals:
                verdict = ""
                if target.startswith("T-1"):
                    verdict = " (met)" if statistics.median(vals) >= 0.70 else " (NOT met)"
                lines.append(f"| {label} | {_pct(vals)} | {target}{verdict} |")
        if cpu:
            lines.append(
                f"| (a) extra CPU µs per append over one es_append tx (client + server; "
                f"little affected by other load) | {_mmm(cpu)} µs | - |"
            )
    measured = [r for r in records if "foreign_cores" in r]
    noisy = [r for r in measured if r["foreign_cores"] > NOISY]
    if noisy:
        lines += [
            "",
            f"WARNING: {len(noisy)} of {len(measured)} measurements ran while other processes "
            f"used more than {NOISY} cores (column 'foreign cores'); the rate ratios are "
            "unreliable, rerun on a quiet machine (the CPU columns are less affected).",
        ]
    return "\n".join(lines)


# ---------------------------------------------------------------- main
def main() -> None:
    global PREFIX, EXISTING_STREAMS
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--database-url", default=DEFAULT_URL)
    ap.add_argument("--n", type=int, default=3000, help="receipts per timed section")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=200, help="untimed appends before each section")
    ap.add_argument("--tests", default=",".join(TESTS))
    ap.add_argument("--pgbench", action="store_true", help="interleave the pgbench anchor")
    ap.add_argument("--pgbench-db", default=pgbench_anchor.DEFAULT_DB)
    ap.add_argument("--pgbench-secs", type=int, default=15)
    ap.add_argument(
        "--pgbench-transactions",
        type=int,
        default=None,
        help="pgbench runs this many transactions instead of --pgbench-secs",
    )
    ap.add_argument("--existing-streams", type=int, default=EXISTING_STREAMS)
    ap.add_argument(
        "--stream-prefix",
        default=PREFIX,
        help="stream name prefix; must not belong to a registered family",
    )
    ap.add_argument("--out", default=None)
    a = smoke.parse(
        ap,
        {"n": 30, "reps": 1, "warmup": 5, "existing_streams": 30, "pgbench_transactions": 50},
    )

    PREFIX = a.stream_prefix
    EXISTING_STREAMS = a.existing_streams
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    results = os.environ.get("BENCH_RESULTS") or os.path.join(HERE, "results")
    os.makedirs(results, exist_ok=True)
    setup_django(a.database_url)

    tests = [t for t in a.tests.split(",") if t]
    for t in tests:
        if t not in WORKLOADS:
            sys.exit(f"unknown test {t}; known: {', '.join(TESTS)}")
    out = Out(a.out or os.path.join(results, f"append-{stamp}.jsonl"))
    anchor = None
    if a.pgbench:
        anchor = pgbench_anchor.Anchor(
            a.database_url,
            a.pgbench_db,
            a.pgbench_secs,
            log=os.path.join(results, f"pgbench-{stamp}.log"),
            transactions=a.pgbench_transactions,
        )
        anchor.setup()
    import django
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT version(), current_setting('fsync'), "
            "current_setting('synchronous_commit'), current_setting('shared_buffers')"
        )
        version, fsync, sync_commit, shared_buffers = cursor.fetchone()
    out.write(
        {
            "bench": "meta",
            "test": "settings",
            "server": version,
            "fsync": fsync,
            "synchronous_commit": sync_commit,
            "shared_buffers": shared_buffers,
            "django": django.get_version(),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "pgbench": anchor.version() if anchor else None,
            "n": a.n,
            "reps": a.reps,
            "warmup": a.warmup,
        }
    )

    records: list[dict] = []
    t_all = time.monotonic()
    try:
        for rep in range(1, a.reps + 1):
            if anchor:
                for script in pgbench_anchor.SCRIPTS:
                    print(f"[rep {rep}] pgbench {script}", file=sys.stderr, flush=True)
                    records.append(out.write({"rep": rep, **anchor.run(script)}))
            for test in tests:
                print(f"[rep {rep}] receipt {test}", file=sys.stderr, flush=True)
                records.append(out.write({"rep": rep, **measure(test, a.n, a.warmup, rep)}))
        reset()
    finally:
        if anchor:
            anchor.close()
    print(f"done in {time.monotonic() - t_all:.0f} s; raw records: {out.path}", file=sys.stderr)
    print(
        f"\nreceipt append, PostgreSQL, {a.reps} reps, N={a.n}, {os.cpu_count()} cores, "
        f"{dt.date.today().isoformat()}\n"
    )
    print(report(records))


if __name__ == "__main__":
    main()
