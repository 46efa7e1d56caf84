"""Where the time of one receipts.store.append goes (PostgreSQL), and what-if variants.

    .venv/bin/python bench/profile_append.py [--database-url URL] [--n 2000] [--reps 3]
    .venv/bin/python bench/profile_append.py --smoke          # every part on 20 appends

1. SQL per append: statements through Django (execute_wrapper) and the frontend
   protocol messages actually sent (libpq trace).
2. cProfile of --n single appends to new streams, own time grouped by layer.
3. What-if variants, timed like bench/append.py figure (a) (N appends of one receipt
   to new streams), interleaved over --reps, on the same tables. They reproduce the
   store's SQL outside receipts/store.py (which this script never changes) to price
   each cost separately:
     store        receipts.store.append (the reference)
     store ssb    the same, DATABASES OPTIONS server_side_binding=True (no prepared statements)
     store ssb+prep5  the same plus prepare_threshold=5 (psycopg prepares a query text
                  after 5 executions; unique SAVEPOINT names never reach that)
     raw-simple   the same 6 round trips with raw psycopg, literals inlined (what Django sends)
     raw-prep     the same 6 round trips, server-side binding + prepared statements
     raw-prep-nonotify  raw-prep without the pg_notify statement (5 round trips)
     raw-cte      prepared, INSERT receipt + UPDATE stream + pg_notify in ONE statement (4 round trips)
     raw-pipe     raw-cte in pipeline mode: [BEGIN, upsert] then [cte, COMMIT] (2 round trips)
     es-python    pgbench's es_append.sql statements from Python, prepared (6 round trips):
                  the ceiling for any Python client doing pgbench's work one statement at a time
   and, with --drop-indexes, store / raw-prep again without receipt_receipt's
   `hash` varchar_pattern_ops index and receipt_stream's `updated_at` index (both are
   put back, from their saved definitions, before the script ends).
4. pgbench es_append.sql, 1 client (--pgbench-secs, 0 to skip), as the anchor.

Writes bench/results/profile-<stamp>.md (and .libpq-trace; $BENCH_RESULTS instead of
bench/results); prints the summary.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import json
import os
import pstats
import re
import secrets
import statistics
import sys
import time
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import append as bench  # noqa: E402
import pgbench_anchor  # noqa: E402
import smoke  # noqa: E402
from pgbench_anchor import Server, busy_cores, busy_jiffies, proc_cpu  # noqa: E402

COLUMNS = (
    "stream, stream_seq, receipt_id, ts, prev, hash, event_type, body, context, hints, event_id"
)
LOCK = (
    "INSERT INTO receipt_stream (name, head, receipt_count, last_ts, updated_at) "
    "VALUES (%s, NULL, 0, NULL, 0) ON CONFLICT (name) DO UPDATE SET name = excluded.name "
    "RETURNING head, receipt_count"
)
INSERT = (
    f"INSERT INTO receipt_receipt ({COLUMNS}) VALUES "
    "(%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb, %s) RETURNING seq, stream_seq"
)
UPDATE = (
    "UPDATE receipt_stream SET head = %s, receipt_count = %s, last_ts = %s, updated_at = %s "
    "WHERE name = %s"
)
NOTIFY = "SELECT pg_notify(%s, %s)"
CTE = (
    f"WITH r AS (INSERT INTO receipt_receipt ({COLUMNS}) VALUES "
    "(%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb, %s) RETURNING seq, stream_seq), "
    "s AS (UPDATE receipt_stream SET head = %s, receipt_count = %s, last_ts = %s, updated_at = %s "
    "WHERE name = %s) "
    "SELECT r.seq, r.stream_seq, pg_notify('receipt', r.seq || ' ' || %s) FROM r"
)
ES_BODY = (
    '{"type": "JobEnqueued", "job": "bench_noop", "queue": "default", "args": {"job_id": 12345}, '
    '"priority": 0, "attempt": 1, "max_attempts": 3, "scheduled_at": 1796040000, '
    '"meta": {"source": "pgbench", "trace": "0123456789abcdef"}}'
)
ES = [
    "UPDATE es_streams SET version = version + 1, updated_at = now() WHERE id = %s",
    "INSERT INTO es_events (stream, version, body) VALUES ('job-' || %s, 1, %s::jsonb)",
    "INSERT INTO es_jobs (stream, state, body) VALUES ('job-' || %s, 'queued', %s::jsonb)",
    "INSERT INTO es_outbox (event_id) VALUES (currval('es_events_id_seq'))",
]
DROPPABLE = ("receipt_receipt_hash_%_like", "receipt_stream_updated_at_%")
WARMUP = 200  # untimed appends before each timed loop (--warmup)


def dump(value):
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sealed(stream: str, i: int):
    """What StreamHandle.append computes for one event on a new stream (seal = id + hash)."""
    from receipts.clock import now_ms
    from receipts.core.chain import seal

    return seal(
        stream=stream, prev=None, body=bench.body(i), ts=now_ms(), random_hex16=secrets.token_hex(8)
    )


# ---------------------------------------------------------------- variants
class Raw:
    """One raw psycopg connection to the bench database (autocommit, explicit BEGIN/COMMIT)."""

    def __init__(self, server: Server, dbname: str, client_side: bool) -> None:
        import psycopg

        self.conn = server.connect(dbname)
        if client_side:
            self.conn.cursor_factory = psycopg.ClientCursor
        # Django's backend sends literals inlined, never prepares; pgbench -M prepared does
        self.conn.prepare_threshold = None if client_side else 0
        self.prepare = None if client_side else True

    def pid(self) -> int:
        return self.conn.info.backend_pid

    def close(self) -> None:
        self.conn.close()


def one_append_6(raw: Raw, stream: str, i: int, notify: bool = True) -> None:
    cur, prep = raw.conn.cursor(), raw.prepare
    cur.execute("BEGIN")
    _head, count = cur.execute(LOCK, [stream], prepare=prep).fetchone()
    r = sealed(stream, i)
    seq, _stream_seq = cur.execute(
        INSERT,
        [r.stream, count + 1, r.id, r.ts, r.prev, r.hash, r.type, dump(r.body), None, None, None],
        prepare=prep,
    ).fetchone()
    cur.execute(UPDATE, [r.hash, count + 1, r.ts, r.ts, stream], prepare=prep)
    if notify:
        cur.execute(NOTIFY, ["receipt", f"{seq} {stream} {r.type}"], prepare=prep)
    cur.execute("COMMIT")


def one_append_5(raw: Raw, stream: str, i: int) -> None:
    one_append_6(raw, stream, i, notify=False)


def cte_params(r, count: int, stream: str) -> list:
    return [
        r.stream,
        count + 1,
        r.id,
        r.ts,
        r.prev,
        r.hash,
        r.type,
        dump(r.body),
        None,
        None,
        None,
        r.hash,
        count + 1,
        r.ts,
        r.ts,
        stream,
        f"{stream} {r.type}",
    ]


def one_append_cte(raw: Raw, stream: str, i: int) -> None:
    cur = raw.conn.cursor()
    cur.execute("BEGIN")
    _head, count = cur.execute(LOCK, [stream], prepare=True).fetchone()
    r = sealed(stream, i)
    cur.execute(CTE, cte_params(r, count, stream), prepare=True).fetchone()
    cur.execute("COMMIT")


def one_append_pipe(raw: Raw, stream: str, i: int) -> None:
    conn = raw.conn
    lock, write = conn.cursor(), conn.cursor()
    with conn.pipeline() as pipe:
        conn.execute("BEGIN")
        lock.execute(LOCK, [stream], prepare=True)
        pipe.sync()
        _head, count = lock.fetchone()
        r = sealed(stream, i)
        write.execute(CTE, cte_params(r, count, stream), prepare=True)
        conn.execute("COMMIT")
    write.fetchone()


def one_es(raw: Raw, sid: int) -> None:
    cur = raw.conn.cursor()
    cur.execute("BEGIN")
    cur.execute(ES[0], [sid], prepare=True)
    cur.execute(ES[1], [str(sid), ES_BODY], prepare=True)
    cur.execute(ES[2], [str(sid), ES_BODY], prepare=True)
    cur.execute(ES[3], prepare=True)
    cur.execute("COMMIT")


def timed(label: str, loop, n: int, server_pid, **extra) -> dict:
    s0, c0, m0 = proc_cpu(server_pid()), time.process_time(), busy_jiffies()
    t0 = time.perf_counter()
    loop(n)
    wall = time.perf_counter() - t0
    cpu, m1, s1 = time.process_time() - c0, busy_jiffies(), proc_cpu(server_pid())
    rec = {
        "variant": label,
        "n": n,
        "rate": n / wall,
        "us": 1e6 * wall / n,
        "client_us": 1e6 * cpu / n,
        "busy_cores": busy_cores(m0, m1),
        **extra,
    }
    if s0 is not None and s1 is not None:
        rec["server_us"] = 1e6 * (s1 - s0) / n
        rec["foreign_cores"] = max(0.0, rec["busy_cores"] - (cpu + s1 - s0) / wall)
    return rec


def run_variants(
    server: Server, dbname: str, pgb_db: str, n: int, rep: int, tag: str
) -> list[dict]:
    from django.db import connection

    from receipts.store import append

    out = []

    def django_pid() -> int:
        return connection.connection.info.backend_pid

    def reset_all() -> None:
        bench.reset()

    # store (Django), then the same with DATABASES OPTIONS changed (reconnects in between)
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    for label, extra in (
        ("store", {}),
        ("store ssb", {"server_side_binding": True}),
        ("store ssb+prep5", {"server_side_binding": True, "prepare_threshold": 5}),
    ):
        if tag and extra:
            continue
        connection.close()
        options.clear()
        options.update(saved, **extra)
        try:
            reset_all()
            bench.run_single_new(WARMUP, f"w{label[6:].replace('+', '')}{tag}{rep}-")
            bench.sql("CHECKPOINT")
            out.append(
                timed(
                    label + tag,
                    lambda k, label=label: [
                        append(f"bench/{label[6:].replace('+', '')}s{rep}-{i:07d}", bench.body(i))
                        for i in range(k)
                    ],
                    n,
                    django_pid,
                )
            )
        finally:
            connection.close()
            options.clear()
            options.update(saved)
    for label, client_side, fn in (
        ("raw-simple", True, one_append_6),
        ("raw-prep", False, one_append_6),
        ("raw-prep-nonotify", False, one_append_5),
        ("raw-cte", False, one_append_cte),
        ("raw-pipe", False, one_append_pipe),
    ):
        if tag and label not in ("raw-prep", "raw-cte"):
            continue
        raw = Raw(server, dbname, client_side)
        try:
            reset_all()
            for i in range(WARMUP):
                fn(raw, f"bench/w{label}{rep}-{i}", i)
            bench.sql("CHECKPOINT")
            out.append(
                timed(
                    label + tag,
                    lambda k, raw=raw, fn=fn, label=label: [
                        fn(raw, f"bench/{label}{rep}-{i:07d}", i) for i in range(k)
                    ],
                    n,
                    raw.pid,
                )
            )
        finally:
            raw.close()
    if not tag:
        raw = Raw(server, pgb_db, False)
        try:
            with open(os.path.join(pgbench_anchor.PEERS_PGBENCH, "reset.sql")) as handle:
                reset_sql = handle.read()
            with raw.conn.cursor() as cur:
                for stmt in reset_sql.split(";"):
                    if stmt.strip():
                        cur.execute(stmt)
                cur.execute("CHECKPOINT")
            for i in range(WARMUP):
                one_es(raw, 1 + i % 1000)

            def es_python(k: int) -> None:
                for i in range(k):
                    one_es(raw, 1 + (i * 7919) % 1000)

            out.append(timed("es-python", es_python, n, raw.pid))
        finally:
            raw.close()
    return out


# ---------------------------------------------------------------- statement counts, cProfile
def normalise(text: str) -> str:
    text = re.sub(r"'(?:[^']|'')*'", "?", text)
    text = re.sub(r"\b\d+\b", "?", text)
    return " ".join(text.split())[:80]


def statements(k: int, trace_path: str) -> list[str]:
    from django.db import connection

    bench.reset()
    bench.run_single_new(min(WARMUP, 100), "tw-")
    seen: Counter[str] = Counter()

    def count(execute, sql, params, many, context):
        seen[" ".join(sql.split())[:80]] += 1
        return execute(sql, params, many, context)

    pgconn = connection.connection.pgconn
    with open(trace_path, "w") as trace:
        pgconn.trace(trace.fileno())
        with connection.execute_wrapper(count):
            bench.run_single_new(k, "tc-")
        pgconn.untrace()
    messages: Counter[str] = Counter()
    queries: Counter[str] = Counter()
    with open(trace_path) as trace:
        for line in trace:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 4 and parts[1] == "F":
                messages[parts[3]] += 1
                if parts[3] == "Query":
                    queries[normalise(parts[-1])] += 1
    lines = [f"SQL through Django per append ({k} appends):"]
    lines += [f"  {c / k:g} x {s}" for s, c in seen.most_common()]
    lines += ["frontend protocol messages per append (libpq trace):"]
    lines += [f"  {c / k:g} x {m}" for m, c in messages.most_common()]
    lines += ["query texts per append (literals -> ?):"]
    lines += [f"  {c / k:g} x {q}" for q, c in queries.most_common()]
    return lines


LAYERS = [
    (
        "psycopg: blocked on the server (connection.wait, incl. C-level I/O)",
        r"psycopg/connection\.py.*\(wait\)",
    ),
    ("psycopg: send query (client_cursor._execute_send)", r"_execute_send"),
    ("psycopg: other (cursor machinery, adaptation, results)", r"/psycopg/"),
    ("django db layer (cursor wrappers, atomic, autocommit)", r"/django/"),
    (
        "receipts: canonical check + json + sha256 (seal)",
        r"receipts/core/|json/|_hashlib|hashlib|sha256|"
        r"_json|hexdigest|token_hex|urandom",
    ),
    ("receipts.store glue", r"receipts/(store|append|new_streams)\.py|receipts/registry\.py"),
]


def cprofile(n: int) -> list[str]:
    bench.reset()
    bench.run_single_new(WARMUP, "pw-")
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    bench.run_single_new(n, "pp-")
    prof.disable()
    wall = time.perf_counter() - t0
    stats = pstats.Stats(prof)
    layers: dict[str, float] = defaultdict(float)
    total = 0.0
    # Stats.stats is undocumented, and typeshed leaves it out
    entries = stats.stats.items()  # type: ignore[attr-defined]
    for (path, line, func), (_cc, _nc, tottime, _ct, _callers) in entries:
        key = f"{path}:{line}({func})"
        total += tottime
        for name, pattern in LAYERS:
            if re.search(pattern, key):
                layers[name] += tottime
                break
        else:
            layers["other (asgiref locals, contextlib, builtins, bench loop)"] += tottime
    lines = [
        f"cProfile: {n} appends, {1e6 * wall / n:.0f} µs/append under the profiler; "
        "own time by layer (µs per append):"
    ]
    for name, t in sorted(layers.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {1e6 * t / n:7.0f}  {100 * t / total:4.1f} %  {name}")
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
    lines += ["", "top own time:", buf.getvalue()]
    return lines


# ---------------------------------------------------------------- index what-if
def drop_indexes() -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND ("
            + " OR ".join(["indexname LIKE %s"] * len(DROPPABLE))
            + ")",
            list(DROPPABLE),
        )
        found = cursor.fetchall()
        for name, _ in found:
            cursor.execute(f'DROP INDEX "{name}"')
    return [definition for _, definition in found]


def restore_indexes(definitions: list[str]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for definition in definitions:
            cursor.execute(definition)


# ---------------------------------------------------------------- main
def main() -> None:
    global WARMUP
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--database-url", default=bench.DEFAULT_URL)
    ap.add_argument("--pgbench-db", default=pgbench_anchor.DEFAULT_DB)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pgbench-secs", type=int, default=10)
    ap.add_argument(
        "--pgbench-transactions",
        type=int,
        default=None,
        help="pgbench runs this many transactions instead of --pgbench-secs",
    )
    ap.add_argument("--warmup", type=int, default=WARMUP)
    ap.add_argument("--statements", type=int, default=100, help="appends traced for the SQL")
    ap.add_argument("--drop-indexes", action="store_true")
    a = smoke.parse(
        ap,
        {
            "n": 20,
            "reps": 1,
            "warmup": 5,
            "statements": 5,
            "pgbench_transactions": 50,
        },
    )
    WARMUP = a.warmup
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    results = os.environ.get("BENCH_RESULTS") or os.path.join(HERE, "results")
    os.makedirs(results, exist_ok=True)
    bench.setup_django(a.database_url)
    server = Server.from_url(a.database_url)
    dbname = a.database_url.rsplit("/", 1)[1].split("?")[0]
    anchor = pgbench_anchor.Anchor(
        a.database_url,
        a.pgbench_db,
        max(a.pgbench_secs, 1),
        transactions=a.pgbench_transactions,
    )
    anchor.setup()

    report = [f"# receipts.store.append profile, {stamp}", ""]
    report += statements(a.statements, os.path.join(results, f"profile-{stamp}.libpq-trace"))
    report += ["", *cprofile(a.n)]
    print("\n".join(report[:60]), flush=True)

    recs: list[dict] = []
    for rep in range(1, a.reps + 1):
        if a.pgbench_secs:
            pg = anchor.run("es_append.sql")
            recs.append(
                {
                    "variant": "pgbench es_append",
                    "rate": pg["tps"],
                    "us": pg["latency_avg_ms"] * 1000,
                    "client_us": pg.get("client_cpu_us_per_tx"),
                    "server_us": pg.get("server_cpu_us_per_tx"),
                    "foreign_cores": pg["foreign_cores"],
                }
            )
        recs += run_variants(server, dbname, a.pgbench_db, a.n, rep, "")
        if a.drop_indexes:
            saved = drop_indexes()
            try:
                recs += run_variants(server, dbname, a.pgbench_db, a.n, rep, "-2idx")
            finally:
                restore_indexes(saved)
        print(f"[rep {rep}] done", file=sys.stderr, flush=True)
    anchor.close()
    bench.reset()

    by: dict[str, list[dict]] = defaultdict(list)
    for r in recs:
        by[r["variant"]].append(r)
    ref = statistics.median(r["rate"] for r in by["store"])
    es = (
        statistics.median(r["rate"] for r in by["pgbench es_append"])
        if "pgbench es_append" in by
        else None
    )

    def med(rs, key):
        vals = [r[key] for r in rs if r.get(key) is not None]
        return f"{statistics.median(vals):,.0f}" if vals else "n/a"

    table = [
        "| variant | appends/s (median) | best | µs/append | client CPU µs | server CPU µs | x store "
        "| % of pgbench es_append | foreign cores |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, rs in by.items():
        rate = statistics.median(r["rate"] for r in rs)
        best = max(r["rate"] for r in rs)
        table.append(
            f"| {variant} | {rate:,.0f} | {best:,.0f} | {med(rs, 'us')} | {med(rs, 'client_us')} "
            f"| {med(rs, 'server_us')} | {rate / ref:.2f} | "
            f"{'n/a' if not es else f'{100 * rate / es:.0f} %'} "
            f"| {statistics.median(r.get('foreign_cores', 0) for r in rs):.2f} |"
        )
    report += ["", f"## what-if variants (median of {a.reps}, N={a.n} per run)", "", *table]
    path = os.path.join(results, f"profile-{stamp}.md")
    with open(path, "w") as handle:
        handle.write("\n".join(report) + "\n")
    with open(os.path.join(results, f"profile-{stamp}.jsonl"), "w") as handle:
        for r in recs:
            handle.write(json.dumps(r) + "\n")
    print("\n".join(table))
    print(f"\nfull report: {path}")


if __name__ == "__main__":
    main()
