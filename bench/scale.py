"""A million jobs (T-5): read paths at 1k, 100k and 1M jobs on PostgreSQL.

    .venv/bin/python bench/scale.py                      # 1k, 100k, 1m (builds what is missing)
    .venv/bin/python bench/scale.py --sizes 1k,100k      # limit the sizes
    .venv/bin/python bench/scale.py --sizes 1m --build-only
    .venv/bin/python bench/scale.py --sizes 1k,250k --scenarios queue   # a deep backlog
    .venv/bin/python bench/scale.py --sizes empty,1k,1m --scenarios mixed,queued,backlog
    .venv/bin/python bench/scale.py --only 'GET /jobs'   # only the figures this finds
    .venv/bin/python bench/scale.py --rebuild            # rebuild the stores even if present
    .venv/bin/python bench/scale.py --report bench/results/scale-<stamp>.jsonl
    .venv/bin/python bench/scale.py --smoke              # one store of 400 jobs, one run a figure

Per size up to four stores, each its own database on --server (default
postgres://root@127.0.0.1:5432/; names from --database-prefix, default receipt_scale):
`receipt_scale_<size>` (settled and active jobs),
`receipt_scale_<size>_backlog` (40 % of the jobs queued, no workers), with `--scenarios
queue`, `receipt_scale_<size>_queue` (80 % queued: a deep backlog that is cheap to build,
200k queued at 250k) and, with `--scenarios queued`, `receipt_scale_<size>_queued`
(every job queued, in batches of 100 as the batch endpoint writes them, never vacuumed
nor analyzed: the planner has no statistics). The size `empty` (mixed only) is an empty
store, the enqueue figures' baseline. They are built by bench/scale_data.py (real
sealing, real fold and `row_for`, COPY, ANALYZE) and reused: the build is skipped when the
database holds the right number of jobs and streams.

Figures: the admin changelist unfiltered, under each filter and each pair of filters it
offers, and each search; `GET /jobs` unfiltered, under each filter and each pair of
filters (a pair with a session or an objective takes the other value from one of its
jobs), and keyset pages; a job, its receipts, its diagnosis and its admin page (settled,
running, queued, the newest queued); the dashboard, `/metrics`, `/healthz`; the recovery
loops, the watchdog and `receipts verify`; and the enqueue rate against the history
beside it: 200 jobs one by one (`jobs.queue.enqueue`) and 200 in one `enqueue_many`,
ms per job, removed again after each run (untimed).

Each figure: one warm-up (its SQL captured with CaptureQueriesContext), then the median of
--runs (5) runs in ms. Admin pages and the API go through django.test.Client logged in as
a superuser (the API accepts a staff session); recovery loops run one pass each inside a
transaction that is rolled back (so every run sees the same store). The report prints,
per figure, the ms at each size and the ratio to its first size (target T-5: 1M <= 1.5x
1k; the largest size measured is held to it), and for every miss EXPLAIN (ANALYZE,
BUFFERS) of its slowest statements on the largest store. Each size runs in its own
process (Django binds one database per process). Output: the markdown on stdout, JSON
lines in bench/results/scale-<stamp>.jsonl, progress on stderr. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(os.environ.get("BENCH_RESULTS") or ROOT / "bench" / "results")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke  # noqa: E402

SIZES = {"empty": 0, "1k": 1_000, "100k": 100_000, "250k": 250_000, "1m": 1_000_000}
SCENARIOS = ("mixed", "backlog", "queue", "queued")
SEEDS = {"mixed": 0, "backlog": 7, "queue": 11, "queued": 13}
# Stores left as enqueues through the batch endpoint leave them on a server without
# autovacuum: never vacuumed nor analyzed, so the planner has no statistics of any column.
UNANALYZED = ("queued",)
TARGET = 1.5
ONLY: list[str] = []  # --only: a regular expression the figures measured must match
ROW_MARK = b'name="_selected_action"'
CHUNK_JOBS = 2_000
SEED = 20261201
SIZES["smoke"] = 400  # --smoke: a store this small (enough for every sample figure() picks)


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def db_url(server: str, size: str, scenario: str, prefix: str = "receipt_scale") -> str:
    name = f"{prefix}_{size}" + ("" if scenario == "mixed" else f"_{scenario}")
    return server.rstrip("/") + "/" + name


# ---- build --------------------------------------------------------------------------------


def _counts() -> tuple[int, int]:
    from delivery import sql

    jobs = sql("SELECT count(*) FROM jobs_job")[0][0]
    streams = sql("SELECT count(*) FROM receipt_stream")[0][0]
    return jobs, streams


_LOAD_TABLES = ("receipt_receipt", "receipt_stream", "jobs_job", "jobs_delivery_promise")


def _secondary_ddl() -> tuple[list[str], list[str], list[str]]:
    """(drop, create-after-load) statements for the secondary indexes and unique
    constraints of the loaded tables, from their own definitions."""
    from delivery import sql

    drops, creates_c, creates_i = [], [], []
    for table in _LOAD_TABLES:
        for name, definition in sql(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = %s::regclass AND contype = 'u'",
            [table],
        ):
            drops.append(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
            creates_c.append(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        for name, definition in sql(
            "SELECT i.relname, pg_get_indexdef(x.indexrelid) FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE x.indrelid = %s::regclass AND NOT x.indisprimary "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)",
            [table],
        ):
            drops.append(f'DROP INDEX "{name}"')
            creates_i.append(definition)
    return drops, creates_c, creates_i


def build(n: int, scenario: str, workers: int) -> dict[str, Any]:
    import multiprocessing

    import scale_data
    from delivery import reset, sql
    from django.db import connection, connections

    started = time.monotonic()
    now = int(time.time() * 1000)
    reset()
    plan = scale_data.plan(n, scenario, now, SEED + SEEDS[scenario])
    drops, creates_c, creates_i = _secondary_ddl()
    for statement in drops:
        sql(statement)
    connections.close_all()  # no connection crosses the fork
    chunks = [
        (start, plan[start : start + CHUNK_JOBS], n, SEED, scenario, now)
        for start in range(0, n, CHUNK_JOBS)
    ]
    seq = 0
    totals = {"receipts": 0, "jobs": 0}
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        connection.ensure_connection()
        raw = connection.connection
        with raw.cursor() as cursor:
            cursor.execute("SET synchronous_commit = off")
        for done, part in enumerate(pool.imap(scale_data.build_chunk, chunks), 1):
            lines = part["receipts"]
            block = "".join(f"{seq + i + 1}\t{line}" for i, line in enumerate(lines))
            seq += len(lines)
            with raw.cursor() as cursor:
                for table, columns, data in (
                    ("receipt_receipt", scale_data.RECEIPT_COLUMNS, block),
                    ("receipt_stream", scale_data.STREAM_COLUMNS, part["streams"]),
                    ("jobs_job", scale_data.JOB_COLUMNS, part["jobs"]),
                    ("jobs_delivery_promise", scale_data.PROMISE_COLUMNS, part["promises"]),
                ):
                    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                        copy.write(data.encode())
            raw.commit() if not raw.autocommit else None
            totals["receipts"] += len(lines)
            totals["jobs"] += part["count"]
            if done % 25 == 0 or done == len(chunks):
                log(
                    f"  {scenario} {totals['jobs']:,}/{n:,} jobs, {totals['receipts']:,} receipts, "
                    f"{time.monotonic() - started:.0f} s"
                )
    loaded = time.monotonic()
    sql("SET maintenance_work_mem = '512MB'")
    for statement in creates_c + creates_i:
        sql(statement)
    sql("SELECT setval(pg_get_serial_sequence('receipt_receipt', 'seq'), %s)", [max(seq, 1)])
    indexed = time.monotonic()
    for table in _LOAD_TABLES:
        if scenario in UNANALYZED:  # as a batch endpoint leaves them with autovacuum off
            sql("DELETE FROM pg_statistic WHERE starelid = %s::regclass", [table])
        else:
            sql(f"VACUUM (ANALYZE) {table}")
    sql("CHECKPOINT")
    finished = time.monotonic()
    return {
        "record": "build",
        "scenario": scenario,
        "n": n,
        "receipts": totals["receipts"],
        "load_s": round(loaded - started, 1),
        "index_s": round(indexed - loaded, 1),
        "analyze_s": round(finished - indexed, 1),
        "total_s": round(finished - started, 1),
    }


# ---- timing -------------------------------------------------------------------------------


class Bench:
    def __init__(self, size: str, scenario: str, runs: int, out: Any) -> None:
        from delivery import server_roots
        from django.contrib.auth import get_user_model
        from django.test import Client

        self.size, self.scenario, self.runs, self.out = size, scenario, runs, out
        self.roots = server_roots()
        user_model = get_user_model()
        user = user_model.objects.filter(username="scale-admin").first()
        if user is None:
            user = user_model.objects.create_superuser(
                "scale-admin", "scale@example.invalid", "scale-admin-password"
            )
        self.client = Client()
        self.client.force_login(user)

    def figure(
        self,
        name: str,
        call: Callable[[], Any],
        per: Callable[[], int] | None = None,
        after: Callable[[], Any] | None = None,
    ) -> None:
        """`after`, if given, runs untimed after each call (the enqueue figures' clean-up)."""
        if ONLY and not re.search(ONLY[0], name):
            return
        from django.core.signals import request_started
        from django.db import connection, reset_queries
        from django.test.utils import CaptureQueriesContext
        from noise import Noise

        # request_started resets the query log: keep it for the warm-up's capture
        request_started.disconnect(reset_queries)
        try:
            with CaptureQueriesContext(connection) as captured:
                t0 = time.perf_counter()
                status = call()
                warm = (time.perf_counter() - t0) * 1000
            if after is not None:
                after()
            captured_list = list(captured.captured_queries)  # before the log is reset
        finally:
            request_started.connect(reset_queries)
        noise = Noise(self.roots)
        times = []
        for _ in range(self.runs):
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1000 / (per() if per else 1))
            if after is not None:
                after()
        warm /= per() if per else 1
        queries = [
            {"sql": q["sql"], "ms": round(float(q["time"]) * 1000, 3)} for q in captured_list
        ]
        slow = sorted(queries, key=lambda q: -q["ms"])[:4]
        record = {
            "record": "figure",
            "size": self.size,
            "scenario": self.scenario,
            "figure": name,
            "median_ms": round(statistics.median(times), 3),
            "min_ms": round(min(times), 3),
            "max_ms": round(max(times), 3),
            "warmup_ms": round(warm, 3),
            "queries": len(queries),
            "status": status if isinstance(status, int | str) else None,
            "slow_sql": slow,
            **noise.done(),
        }
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()
        log(
            f"  {self.scenario:7} {name:48} {record['median_ms']:9.2f} ms "
            f"({record['queries']} queries, status {record['status']}, "
            f"foreign {record['foreign_cpu_cores']})"
        )

    def get(self, url: str, uncached: bool = False) -> Callable[[], Any]:
        def call() -> Any:
            if uncached:  # the per-process caches of /healthz and dashboard.json: time the work
                from jobs import dashboard
                from receipt_site import health

                dashboard.reset_shared()
                health.reset_queue_cache()
            response = self.client.get(url)
            if response.status_code != 200:
                raise RuntimeError(f"GET {url}: {response.status_code}")
            if getattr(response, "streaming", False):
                b"".join(response.streaming_content)
            else:
                content = response.content
                if b"_selected_action" in content:  # a changelist: the rows it shows
                    return f"rows {content.count(ROW_MARK)}"
                if content.startswith(b'{"jobs"'):
                    return f"rows {len(response.json()['jobs'])}"
            return response.status_code

        return call


def _sample(statement: str, params: list | None = None) -> Any:
    from delivery import sql

    rows = sql(statement, params)
    return rows[0][0] if rows else None


def samples(n: int) -> dict[str, Any]:
    """Jobs picked from the middle of the store (untimed)."""
    mid = n // 2
    pick = {}
    pick["settled"] = _sample(
        "SELECT id FROM jobs_job WHERE status = 'completed' "
        "ORDER BY created_at DESC, id DESC OFFSET %s LIMIT 1",
        [mid // 2],
    )
    pick["progress"] = (
        _sample(
            "SELECT j.id FROM jobs_job j WHERE j.status = 'completed' AND EXISTS (SELECT 1 FROM "
            "receipt_receipt r WHERE r.stream = 'jobs/' || j.id AND r.event_type = 'job.progress') "
            "ORDER BY j.created_at DESC LIMIT 1 OFFSET 3"
        )
        or pick["settled"]
    )
    pick["failed"] = _sample(
        "SELECT id FROM jobs_job WHERE status = 'failed' ORDER BY created_at DESC OFFSET 3 LIMIT 1"
    )
    pick["queued"] = _sample(
        "SELECT id FROM jobs_job WHERE status = 'queued' "
        "ORDER BY created_at DESC, id DESC OFFSET %s LIMIT 1",
        [max(0, _sample("SELECT count(*) FROM jobs_job WHERE status = 'queued'") // 2)],
    )
    pick["newest_queued"] = _sample(
        "SELECT id FROM jobs_job WHERE status = 'queued' ORDER BY created_at DESC, id DESC LIMIT 1"
    )
    pick["running"] = _sample(
        "SELECT id FROM jobs_job WHERE status = 'running' ORDER BY created_at DESC LIMIT 1"
    )
    pick["session"] = _sample(
        "SELECT session_key FROM jobs_job WHERE id = %s", [pick["settled"] or pick["queued"]]
    ) or _sample(
        "SELECT session_key FROM jobs_job WHERE session_key IS NOT NULL "
        "ORDER BY created_at DESC LIMIT 1 OFFSET 5"
    )
    pick["objective"] = _sample(
        "SELECT objective_id FROM jobs_job WHERE objective_id IS NOT NULL "
        "ORDER BY created_at DESC LIMIT 1 OFFSET 7"
    )
    pick["org"] = "org-0003"
    from delivery import sql

    pick["objectives"] = [
        r[0]
        for r in sql(
            "SELECT DISTINCT objective_id FROM jobs_job WHERE objective_id IS NOT NULL "
            "AND status IN ('queued', 'leased', 'running') ORDER BY 1 LIMIT 100"
        )
    ]
    pick["verify"] = [
        r[0]
        for r in sql(
            "SELECT 'jobs/' || id FROM jobs_job WHERE status IN ('completed', 'failed') "
            "ORDER BY created_at DESC, id DESC OFFSET %s LIMIT 20",
            [mid // 3],
        )
    ]
    return pick


def rolled_back(run: Callable[[int], Any]) -> Callable[[], str]:
    def call() -> str:
        from django.db import transaction

        from receipts.clock import now_ms

        with transaction.atomic():
            report = run(now_ms())
            transaction.set_rollback(True)
        return f"examined {getattr(report, 'examined', '?')} acted {getattr(report, 'acted', '?')}"

    return call


# API filters (GET /jobs) and admin list filters (the changelist), each with the value the
# figures use; pairs of filters that name a session or an objective take the other
# filter's value from that session's or objective's job, so that no pair is empty.
API_FILTERS = (
    "status",
    "agentId",
    "kind",
    "lane",
    "routedGroup",
    "organizationId",
    "sessionKey",
    "objectiveId",
)
ADMIN_FILTERS = {  # admin parameter -> the API filter of the same column
    "status": "status",
    "lane": "lane",
    "agent": "agentId",
    "kind": "kind",
    "group": "routedGroup",
    "org": "organizationId",
}
HELD_STATUS = {"mixed": "failed", "backlog": "queued", "queue": "queued", "queued": "queued"}
ENQUEUE_JOBS = 200  # per run of the enqueue figures, removed again after each run


def filter_values(scenario: str, pick: dict[str, Any]) -> dict[str, str]:
    return {
        "status": HELD_STATUS[scenario],
        "agentId": "factory",
        "kind": "factory.run",
        "lane": "chat",
        "routedGroup": "chat",
        "organizationId": pick["org"],
        "sessionKey": pick["session"],
        "objectiveId": pick["objective"],
    }


def pair_values(a: str, b: str, values: dict[str, str], pick: dict[str, Any]) -> dict[str, str]:
    """The two filters' values: the defaults, or, beside a session or an objective, the
    values of one of its jobs."""
    for key, ref in (("sessionKey", "session_row"), ("objectiveId", "objective_row")):
        if key in (a, b) and pick.get(ref):
            row = pick[ref]
            return {a: row[a], b: row[b]}
    return {a: values[a], b: values[b]}


def _row_of(column: str, value: Any) -> dict[str, str] | None:
    from delivery import sql

    rows = sql(
        "SELECT status, agent_id, kind, lane, worker_group, organization_id, session_key, "
        f"objective_id FROM jobs_job WHERE {column} = %s ORDER BY created_at DESC LIMIT 1",
        [value],
    )
    if not rows:
        return None
    return dict(zip(API_FILTERS, rows[0], strict=True))


def _label(query: dict[str, str]) -> str:
    """The query with sampled values shown as <sample> (they differ between stores); beside
    a session or an objective every value is that job's."""
    opaque = ("sessionKey", "objectiveId", "organizationId", "org", "session", "objective")
    of_job = any(k in ("sessionKey", "objectiveId") for k in query)
    return "&".join(f"{k}={'<sample>' if of_job or k in opaque else v}" for k, v in query.items())


def enqueuer(bulk: bool) -> tuple[Callable[[], int], Callable[[], None]]:
    """(enqueue ENQUEUE_JOBS jobs, remove them again): one by one through
    `jobs.queue.enqueue`, or in one `jobs.queue.enqueue_many`."""
    from delivery import payload, sql

    from jobs import queue

    made: list[str] = []

    def enqueue() -> int:
        if bulk:
            requests = [queue.build_request("bench-noop", payload(i)) for i in range(ENQUEUE_JOBS)]
            made.extend(r.job.job_id for r in queue.enqueue_many(requests))
        else:
            for i in range(ENQUEUE_JOBS):
                made.append(queue.enqueue("bench-noop", payload(i)).job.job_id)
        return ENQUEUE_JOBS

    def remove() -> None:
        streams = [f"jobs/{job_id}" for job_id in made]
        sql("DELETE FROM receipt_receipt WHERE stream = ANY(%s)", [streams])
        sql("DELETE FROM receipt_stream WHERE name = ANY(%s)", [streams])
        sql("DELETE FROM jobs_delivery_promise WHERE job_id = ANY(%s)", [list(made)])
        sql("DELETE FROM jobs_job WHERE id = ANY(%s)", [list(made)])
        made.clear()

    return enqueue, remove


def measure(size: str, scenario: str, runs: int, out: Any) -> None:
    from django.conf import settings

    from jobs.management.commands.runworker import maintenance_loops
    from objectives import selectors as objective_selectors
    from objectives.core.facts import is_stale
    from objectives.handlers import watchdog
    from receipts import store
    from receipts.clock import now_ms

    n = SIZES[size]
    bench = Bench(size, scenario, runs, out)
    fig = bench.figure
    for bulk in (False, True):
        enqueue, remove = enqueuer(bulk)
        name = "enqueue_many, per job" if bulk else "enqueue one by one, per job"
        fig(
            f"{name} ({ENQUEUE_JOBS} a run)",
            enqueue,
            per=lambda: ENQUEUE_JOBS,
            after=remove,
        )
    if n == 0:  # the empty store: the enqueue figures only
        return
    pick = samples(n)
    pick["session_row"] = _row_of("session_key", pick["session"])
    pick["objective_row"] = _row_of("objective_id", pick["objective"])
    log(f"  samples: { {k: v for k, v in pick.items() if k not in ('objectives', 'verify')} }")
    get = bench.get
    admin = "/admin/jobs/job/"
    values = filter_values(scenario, pick)
    api_queries: list[dict[str, str]] = [{}]
    api_queries += [{key: values[key]} for key in API_FILTERS]
    for extra in ("completed", "running", "queued"):  # the other statuses' first pages
        if extra != values["status"]:
            api_queries.append({"status": extra})
    api_queries += [{"lane": "steer"}, {"routedGroup": "codex"}, {"agentId": "agent-07"}]
    for i, a in enumerate(API_FILTERS):
        for b in API_FILTERS[i + 1 :]:
            api_queries.append(pair_values(a, b, values, pick))
    admin_names = {api: param for param, api in ADMIN_FILTERS.items()}
    admin_queries: list[dict[str, str]] = [{}]
    params = list(ADMIN_FILTERS)
    admin_queries += [{p: values[ADMIN_FILTERS[p]]} for p in params]
    for i, a in enumerate(params):
        for b in params[i + 1 :]:
            pair = pair_values(ADMIN_FILTERS[a], ADMIN_FILTERS[b], values, pick)
            admin_queries.append({admin_names[k]: v for k, v in pair.items()})

    fetched = {"pages": 1}

    def keyset(query: str, pages: int = 50) -> Callable[[], int]:
        def call() -> int:
            cursor, seen = None, 0
            fetched["pages"] = 0
            for _ in range(pages):
                fetched["pages"] += 1
                url = (
                    "/jobs?"
                    + query
                    + (("&" if query else "") + f"cursor={cursor}" if cursor else "")
                )
                response = bench.client.get(url)
                if response.status_code != 200:
                    raise RuntimeError(f"GET {url}: {response.status_code}")
                body = response.json()
                seen += len(body["jobs"])
                cursor = body["nextCursor"]
                if not cursor:
                    break
            return seen

        return call

    for query in admin_queries:
        fig(f"admin changelist ?{_label(query)}", get(f"{admin}?{urlencode(query)}"))
    searches = {
        "id": pick["queued"] if scenario in ("queue", "queued") else pick["settled"],
        "session": pick["session"],
        "objective": pick["objective"],
        "org:": f"org:{pick['org']}",
        "agent:": "agent:factory",
        "error:": "error:TimeoutError",
    }
    for label, term in searches.items():
        fig(f"admin search {label}", get(f"{admin}?{urlencode({'q': term})}"))
    fig(
        "admin search agent: with ?status",
        get(f"{admin}?{urlencode({'q': 'agent:factory', 'status': values['status']})}"),
    )
    for query in api_queries:
        fig(f"GET /jobs?{_label(query)}", get(f"/jobs?{urlencode(query)}"))
    for query in ({}, {"status": values["status"]}, {"agentId": "codex"}, {"lane": "chat"}):
        fig(
            f"GET /jobs?{_label(query)} keyset, per page (50 deep)",
            keyset(urlencode(query)),
            per=lambda: fetched["pages"],
        )
    jobs = {
        "completed": pick["settled"],
        "running": pick["running"],
        "queued": pick["queued"],
        "newest queued": pick["newest_queued"],
    }
    for label, job_id in jobs.items():
        if job_id is None:
            continue
        fig(f"GET /jobs/<id> ({label})", get(f"/jobs/{job_id}"))
        fig(f"GET /jobs/<id>/diagnosis ({label})", get(f"/jobs/{job_id}/diagnosis"))
        fig(f"admin job page ({label})", get(f"{admin}{job_id}/change/"))
    if pick["progress"]:
        fig("GET /jobs/<id>/receipts", get(f"/jobs/{pick['progress']}/receipts"))
    fig("admin dashboard", get(f"{admin}dashboard/"))
    fig("admin dashboard.json", get(f"{admin}dashboard.json"))
    fig("admin dashboard.json, uncached", get(f"{admin}dashboard.json", uncached=True))
    fig("GET /metrics", get("/metrics"))
    fig("GET /healthz", get("/healthz"))
    fig("GET /healthz, uncached", get("/healthz", uncached=True))
    seen = set()
    for loop in maintenance_loops(settings.RECEIPT, "all"):
        if loop.name in seen:
            continue
        seen.add(loop.name)
        fig(f"loop pass: {loop.name}", rolled_back(loop.run))
    if scenario != "mixed":
        return

    judge = objective_selectors.staleness()

    def watchdog_facts() -> int:
        now, stale = now_ms(), 0
        for objective_id in pick["objectives"]:
            for fact in objective_selectors.active_job_facts(objective_id):
                stale += bool(fact.is_active and is_stale(fact, now, judge))
        return len(pick["objectives"])

    fig(
        "watchdog facts, per objective (<=100 with active jobs)",
        watchdog_facts,
        per=lambda: max(1, len(pick["objectives"])),
    )
    fig("watchdog handler scan", lambda: watchdog.scan(limit=200)["scanned"])

    def verify() -> int:
        for stream in pick["verify"]:
            result = store.verify(stream)
            if not result.ok:
                raise RuntimeError(f"verify {stream}: {result.describe()}")
        return len(pick["verify"])

    fig("receipts verify (20 streams)", verify)


def _one(
    size: str,
    scenario: str,
    url: str,
    n: int,
    out: Any,
    runs: int,
    rebuild: bool,
    build_only: bool,
    workers: int,
) -> None:
    from delivery import setup_django, sql

    setup_django(url, "orm")
    from django.db import connection

    import jobs.projector  # noqa: F401 (families registered by the app)

    jobs_count, streams = _counts()
    if rebuild or jobs_count != n or streams != n:
        log(
            f"[{size}/{scenario}] building {n:,} jobs in {url} "
            f"(found {jobs_count:,} jobs, {streams:,} streams)"
        )
        record = build(n, scenario, workers)
        record["size"] = size
        out.write(json.dumps(record) + "\n")
        out.flush()
        log(f"[{size}/{scenario}] built: {record}")
    else:
        log(f"[{size}/{scenario}] reusing {url} ({n:,} jobs)")
    rows = sql(
        "SELECT pg_database_size(current_database()), (SELECT count(*) FROM receipt_receipt)"
    )
    out.write(
        json.dumps(
            {
                "record": "store",
                "size": size,
                "scenario": scenario,
                "n": n,
                "bytes": rows[0][0],
                "receipts": rows[0][1],
                "server": connection.pg_version,
            }
        )
        + "\n"
    )
    out.flush()
    if not build_only:
        log(f"[{size}/{scenario}] measuring")
        measure(size, scenario, runs, out)


# ---- report -------------------------------------------------------------------------------


def explain(url: str, statement: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=False) as conn:
        try:
            rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement).fetchall()
            return "\n".join(r[0] for r in rows)
        except Exception as error:  # a statement that cannot be re-run alone
            return f"(EXPLAIN failed: {type(error).__name__}: {error})"
        finally:
            conn.rollback()


def report(path: Path, server: str, prefix: str = "receipt_scale") -> str:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    figures = [r for r in records if r["record"] == "figure"]
    sizes = [s for s in SIZES if any(r["size"] == s for r in figures)]
    base, top = sizes[1 if sizes[0] == "empty" and len(sizes) > 2 else 0], sizes[-1]
    out = [f"Run `{path.stem}` (`{path}`)", ""]
    builds = [r for r in records if r["record"] == "build"]
    stores = [r for r in records if r["record"] == "store"]
    if stores:
        out += [
            "| store | jobs | receipts | database size | build (load + index + analyze) |",
            "|---|---|---|---|---|",
        ]
        for s in stores:
            b = next(
                (
                    b
                    for b in builds
                    if b.get("size") == s["size"] and b["scenario"] == s["scenario"]
                ),
                None,
            )
            built = (
                f"{b['total_s']} s ({b['load_s']} + {b['index_s']} + {b['analyze_s']})"
                if b
                else "reused"
            )
            out.append(
                f"| {s['size']} {s['scenario']} | {s['n']:,} | {s['receipts']:,} | "
                f"{s['bytes'] / 2**20:,.0f} MiB | {built} |"
            )
        out.append("")
    head = "| scenario | figure | " + " | ".join(f"{s} ms" for s in sizes)
    head += " | " + " | ".join(f"{s}/first" for s in sizes[1:]) + " | queries | foreign cores |"
    out += [head, "|" + "---|" * (head.count("|") - 1)]
    misses = []
    seen_keys = []
    for r in figures:
        key = (r["scenario"], r["figure"])
        if key not in seen_keys:
            seen_keys.append(key)
    by: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in figures:  # with --repeat, the lower median of each figure's runs at a size
        at = (r["scenario"], r["figure"], r["size"])
        if at not in by or r["median_ms"] < by[at]["median_ms"]:
            by[at] = r
    for scenario, name in seen_keys:
        cells, ratios, foreign, queries = [], [], [], []
        for s in sizes:
            r = by.get((scenario, name, s))
            cells.append(f"{r['median_ms']:,.2f}" if r else "-")
            if r:
                foreign.append(f"{r['foreign_cpu_cores']:.2f}")
                queries.append(str(r["queries"]))
        # each figure against its smallest store (the enqueue figures: the empty one)
        first = next(s for s in sizes if (scenario, name, s) in by)
        b = by[(scenario, name, first)]
        for s in sizes[1:]:
            r = by.get((scenario, name, s))
            if r and s != first:
                ratio = r["median_ms"] / max(b["median_ms"], 1e-6)
                unfair = str(b["status"]).startswith("rows") and b["status"] != r["status"]
                miss = ratio > TARGET and s == top and not unfair
                ratios.append(
                    f"**{ratio:.2f}x miss**"
                    if miss
                    else f"{ratio:.2f}x n/c ({b['status']} vs {r['status'].split()[1]})"
                    if unfair and ratio > TARGET
                    else f"{ratio:.2f}x"
                )
                if miss:
                    misses.append((scenario, name, s, ratio, r))
            else:
                ratios.append("-")
        out.append(
            f"| {scenario} | {name} | "
            + " | ".join(cells)
            + " | "
            + " | ".join(ratios)
            + f" | {'/'.join(queries)} | {'/'.join(foreign)} |"
        )
        did = [str(by[(scenario, name, s)]["status"]) for s in sizes if (scenario, name, s) in by]
        if did and did[0].startswith("examined"):  # a loop: its cost per job it examined
            per = []
            for s in sizes:
                r = by.get((scenario, name, s))
                examined = int(str(r["status"]).split()[1]) if r else 0
                per.append(r["median_ms"] / examined if r and examined else None)
            cells = [f"{p:,.3f}" if p is not None else "-" for p in per]
            ratios = [f"{p / per[0]:.2f}x" if p is not None and per[0] else "-" for p in per[1:]]
            out.append(
                f"| {scenario} | {name}, per job examined ({'; '.join(did)}) | "
                + " | ".join(cells)
                + " | "
                + " | ".join(ratios)
                + " | | |"
            )
    out += [
        "",
        f"Target T-5: figure at {top} <= {TARGET}x its figure at the first size measured "
        f"({base}; the enqueue figures: the empty store). "
        f"{len(misses)} of {len(seen_keys)} figures miss (n/c: not comparable, the page at "
        f"{base} had fewer rows than at {top}; loops: compare the per-job rows).",
    ]
    if misses:
        out += ["", f"### Misses: plans of the slowest statements on the {top} store", ""]
        for scenario, name, s, ratio, r in misses:
            out += [
                f"#### {scenario}: {name} ({ratio:.2f}x; {r['median_ms']:,.1f} ms at {s}, "
                f"{r['queries']} queries)",
                "",
            ]
            for q in r["slow_sql"][:2]:
                if q["ms"] < 0.5 and q is not r["slow_sql"][0]:
                    continue
                plan = explain(db_url(server, s, scenario, prefix), q["sql"])
                out += ["```", q["sql"][:1500], f"-- {q['ms']} ms in the warm-up", plan, "```", ""]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1k,100k,1m")
    parser.add_argument(
        "--scenarios", default="mixed,backlog", help="of mixed, backlog, queue, queued"
    )
    parser.add_argument("--server", default="postgres://root@127.0.0.1:5432/")
    parser.add_argument("--database-prefix", default="receipt_scale", help="<prefix>_<size>...")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--workers", type=int, default=2, help="processes sealing receipts")
    parser.add_argument("--report", type=Path, help="only print the report of a results file")
    parser.add_argument("--only", help="measure only the figures this regular expression finds")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure every size this many times, in turn; the report keeps each figure's "
        "lower median (on a shared machine other work only ever adds time)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    parser.add_argument("--stamp", help=argparse.SUPPRESS)
    args = smoke.parse(parser, {"sizes": "smoke", "runs": 1, "workers": 1})
    if args.only:
        ONLY.append(args.only)
    if args.child:
        os.environ.setdefault("RECEIPT_LOG_LEVEL", "WARNING")
        out = (RESULTS / f"scale-{args.stamp}.jsonl").open("a")
        _one(
            args.child,
            args.scenario,
            db_url(args.server, args.child, args.scenario, args.database_prefix),
            SIZES[args.child],
            out,
            args.runs,
            args.rebuild,
            args.build_only,
            args.workers,
        )
        return
    if args.report:
        print(report(args.report, args.server, args.database_prefix))
        return
    sizes = [s.strip().lower() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        parser.error(f"unknown sizes {unknown}; choose from {', '.join(SIZES)}")
    sizes = sorted(sizes, key=SIZES.__getitem__)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if set(scenarios) - set(SCENARIOS):
        parser.error(f"unknown scenarios {scenarios}; choose from {', '.join(SCENARIOS)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"scale-{stamp}.jsonl"
    for size in [s for _ in range(args.repeat) for s in sizes]:
        for scenario in scenarios:
            if size == "empty" and scenario != "mixed":
                continue  # one empty store: the enqueue figures' baseline
            command = [
                sys.executable,
                __file__,
                "--child",
                size,
                "--scenario",
                scenario,
                "--server",
                args.server,
                "--database-prefix",
                args.database_prefix,
                "--stamp",
                stamp,
                "--runs",
                str(args.runs),
                "--workers",
                str(args.workers),
            ]
            command += ["--rebuild"] if args.rebuild else []
            command += ["--only", args.only] if args.only else []
            command += ["--build-only"] if args.build_only else []
            log(f"== {size} {scenario}: {' '.join(command[1:])}")
            subprocess.run(command, check=True)
    if not args.build_only:
        print(report(path, args.server, args.database_prefix))
    else:
        print(f"built; records in {path}")


if __name__ == "__main__":
    main()
