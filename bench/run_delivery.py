"""Receipt's delivery figures beside the peers (T-1, T-3, T-4), in one sitting, one PostgreSQL.

    bench/run_delivery [--reps 3] [--n 3000] [--enqueue-n 5000] [--latency-n 100]
                       [--quick] [--smoke] [--skip-peers] [--database-url URL]
                       [--redis-broker URL|none]
                       [--peers procrastinate,djq-orm-cma60,celery-redis]
                       [--figures drain,enqueue_single,...,task_drain,task_latency]

Every repetition runs Receipt's figures first, each in a fresh process
(bench/delivery_figures.py: drain, enqueue_single, enqueue_bulk, latency, and latency with
the Redis broker; task_drain, task_enqueue_single and task_latency, the same through
Django's task framework, as the system "receipt-task"), then the peers through their own harness
(../shared/bench/peers/runner.py --reps 1, from its path, in the venv bench/.peers-venv,
against a database `receipt_peers` on the SAME PostgreSQL server and a private Redis
started for the run). Raw records (one JSON object per measurement) go to
bench/results/delivery-<stamp>.jsonl, the markdown report to stdout and
bench/results/delivery-<stamp>.md ($BENCH_RESULTS instead of bench/results), progress to
stderr. See bench/README.md. `--smoke --skip-peers` takes seconds: the enqueue figures on
20 jobs, native and through the task API, one repetition (the tests run it).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple, cast
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = Path(os.environ.get("BENCH_RESULTS") or HERE / "results")
PEERS_DIR = (ROOT / ".." / "shared" / "bench" / "peers").resolve()
PEERS_VENV = HERE / ".peers-venv"
sys.path.insert(0, str(HERE))
import default_postgres  # noqa: E402
import smoke  # noqa: E402
from delivery_figures import TASK_PREFIX, path_and_test  # noqa: E402

PEERS_RUNDIR = RESULTS / "peers-run"
DEFAULT_URL = "postgres://root@127.0.0.1:5432/receipt_bench"
DEFAULT_PEERS = "procrastinate,djq-orm-cma60,celery-redis"
TASK_PEER = "django-tasks-db"  # joins the default peers when a task_ figure is asked for
REDIS_PEERS = {"celery-redis", "djq-redis", "rq"}
NOISY = 0.3  # foreign cores above which a figure is flagged
# Receipt's figure -> the peers' harness test that measures the same thing
PEER_TESTS = {
    "drain": "drain",
    "enqueue_single": "enqueue",
    "enqueue_bulk": "bulk",
    "latency": "latency",
}

# (label, test, receipt key, peer key); peer key None: the figure exists for Receipt only
FIGURES = [
    (
        "drain, launch → all done (jobs/s)",
        "drain",
        "jobs_per_s_from_launch",
        "jobs_per_s_from_launch",
    ),
    ("drain, 1st body → all done (jobs/s)", "drain", "jobs_per_s_steady", "jobs_per_s_steady"),
    ("drain, launch → 1st body (s)", "drain", "first_start_s", "first_start_s"),
    ("drain, last body → all recorded (s)", "drain", "bookkeeping_lag_s", "bookkeeping_lag_s"),
    ("enqueue 1-by-1, caller (jobs/s)", "enqueue_single", "caller_per_s", "jobs_per_s"),
    ("enqueue 1-by-1, caller CPU (µs/job)", "enqueue_single", "caller_cpu_us", None),
    (
        "enqueue 1-by-1, until dispatched (jobs/s; peers: = caller)",
        "enqueue_single",
        "dispatched_per_s",
        "jobs_per_s",
    ),
    (
        "enqueue bulk, until dispatched (jobs/s; peers: = caller)",
        "enqueue_bulk",
        "dispatched_per_s",
        "jobs_per_s",
    ),
    ("enqueue bulk, caller (jobs/s)", "enqueue_bulk", "caller_per_s", None),
    ("latency enqueue → start p50 (ms)", "latency", "p50_ms", "p50_ms"),
    ("latency enqueue → start p95 (ms)", "latency", "p95_ms", "p95_ms"),
]


class Ratio(NamedTuple):
    """system's figure over peer's, per repetition; the target is on the median: a floor,
    or with at_most a ceiling (latencies, shown in per cent)."""

    label: str
    test: str
    key: str
    peer: str
    peer_key: str
    target: float | None
    system: str = "receipt"
    at_most: bool = False


TASK_API = "receipt-task"
RATIOS = [
    Ratio(
        "T-3 drain launch → done / procrastinate",
        "drain",
        "jobs_per_s_from_launch",
        "procrastinate",
        "jobs_per_s_from_launch",
        1.0,
    ),
    Ratio(
        "T-3 floor: drain launch → done / django-q2 ORM (CONN_MAX_AGE=60)",
        "drain",
        "jobs_per_s_from_launch",
        "djq-orm-cma60",
        "jobs_per_s_from_launch",
        2.0,
    ),
    Ratio(
        "drain 1st body → done / procrastinate",
        "drain",
        "jobs_per_s_steady",
        "procrastinate",
        "jobs_per_s_steady",
        None,
    ),
    Ratio(
        "drain 1st body → done / django-q2 ORM (CONN_MAX_AGE=60)",
        "drain",
        "jobs_per_s_steady",
        "djq-orm-cma60",
        "jobs_per_s_steady",
        None,
    ),
    Ratio(
        "drain launch → done / celery + redis",
        "drain",
        "jobs_per_s_from_launch",
        "celery-redis",
        "jobs_per_s_from_launch",
        1.0,
    ),
    Ratio(
        "drain 1st body → done / celery + redis",
        "drain",
        "jobs_per_s_steady",
        "celery-redis",
        "jobs_per_s_steady",
        None,
    ),
    Ratio(
        "enqueue 1-by-1 (caller) / celery delay",
        "enqueue_single",
        "caller_per_s",
        "celery-redis",
        "jobs_per_s",
        1.0,
    ),
    Ratio(
        "latency p50 / procrastinate",
        "latency",
        "p50_ms",
        "procrastinate",
        "p50_ms",
        1.0,
        at_most=True,
    ),
    Ratio(
        "latency p95 / procrastinate",
        "latency",
        "p95_ms",
        "procrastinate",
        "p95_ms",
        1.5,
        at_most=True,
    ),
    Ratio(
        "T-1 enqueue 1-by-1 (caller) / procrastinate defer",
        "enqueue_single",
        "caller_per_s",
        "procrastinate",
        "jobs_per_s",
        1.0,
    ),
    Ratio(
        "enqueue 1-by-1 until dispatched / procrastinate defer",
        "enqueue_single",
        "dispatched_per_s",
        "procrastinate",
        "jobs_per_s",
        1.0,
    ),
    Ratio(
        "T-1 enqueue_many until dispatched / procrastinate batch_defer",
        "enqueue_bulk",
        "dispatched_per_s",
        "procrastinate",
        "jobs_per_s",
        1.0,
    ),
    Ratio(
        "enqueue_many caller / procrastinate batch_defer",
        "enqueue_bulk",
        "caller_per_s",
        "procrastinate",
        "jobs_per_s",
        None,
    ),
    Ratio(
        "task API / native: drain launch → done",
        "drain",
        "jobs_per_s_from_launch",
        "receipt",
        "jobs_per_s_from_launch",
        0.9,
        TASK_API,
    ),
    Ratio(
        "task API / native: enqueue 1-by-1 caller",
        "enqueue_single",
        "caller_per_s",
        "receipt",
        "caller_per_s",
        0.9,
        TASK_API,
    ),
    Ratio(
        "task API / native: enqueue 1-by-1 until dispatched",
        "enqueue_single",
        "dispatched_per_s",
        "receipt",
        "dispatched_per_s",
        0.9,
        TASK_API,
    ),
    Ratio(
        "task API / native: enqueue 1-by-1 caller CPU per job",
        "enqueue_single",
        "caller_cpu_us",
        "receipt",
        "caller_cpu_us",
        None,
        TASK_API,
        at_most=True,
    ),
    Ratio(
        "task API / native: latency p50",
        "latency",
        "p50_ms",
        "receipt",
        "p50_ms",
        1.1,
        TASK_API,
        at_most=True,
    ),
    Ratio(
        "task API / native: latency p95",
        "latency",
        "p95_ms",
        "receipt",
        "p95_ms",
        None,
        TASK_API,
        at_most=True,
    ),
    Ratio(
        "task API drain launch → done / django-tasks-db",
        "drain",
        "jobs_per_s_from_launch",
        TASK_PEER,
        "jobs_per_s_from_launch",
        1.5,
        TASK_API,
    ),
    Ratio(
        "task API drain 1st body → done / django-tasks-db",
        "drain",
        "jobs_per_s_steady",
        TASK_PEER,
        "jobs_per_s_steady",
        None,
        TASK_API,
    ),
    Ratio(
        "task API enqueue 1-by-1 (caller) / django-tasks-db",
        "enqueue_single",
        "caller_per_s",
        TASK_PEER,
        "jobs_per_s",
        1.5,
        TASK_API,
    ),
    Ratio(
        "task API enqueue 1-by-1 until dispatched / django-tasks-db",
        "enqueue_single",
        "dispatched_per_s",
        TASK_PEER,
        "jobs_per_s",
        1.5,
        TASK_API,
    ),
    Ratio(
        "task API latency p50 / django-tasks-db p50",
        "latency",
        "p50_ms",
        TASK_PEER,
        "p50_ms",
        0.02,
        TASK_API,
        at_most=True,
    ),
    Ratio(
        "native drain launch → done / django-tasks-db",
        "drain",
        "jobs_per_s_from_launch",
        TASK_PEER,
        "jobs_per_s_from_launch",
        None,
    ),
    Ratio(
        "native enqueue 1-by-1 (caller) / django-tasks-db",
        "enqueue_single",
        "caller_per_s",
        TASK_PEER,
        "jobs_per_s",
        None,
    ),
]
# (label, system, key, limit in ms)
LATENCY_TARGETS = [
    ("T-4 latency p50, PostgreSQL (ORM broker)", "receipt", "p50_ms", 15.0),
    ("T-4 latency p95, PostgreSQL (ORM broker)", "receipt", "p95_ms", 40.0),
    ("T-4 latency p50, Redis broker", "receipt-redis", "p50_ms", 10.0),
    ("latency p50, task API (ORM broker)", TASK_API, "p50_ms", 15.0),
    ("latency p95, task API (ORM broker)", TASK_API, "p95_ms", 40.0),
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- output
class Out:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[dict] = []
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, rec: dict) -> dict:
        with open("/proc/loadavg") as handle:
            load = handle.read().split()[0]
        rec = {"ts": dt.datetime.now().isoformat(timespec="seconds"), "loadavg": load, **rec}
        with self.path.open("a") as handle:
            handle.write(json.dumps(rec) + "\n")
        self.records.append(rec)
        short = {
            k: v for k, v in rec.items() if k not in ("lat_ms", "warmup_ms", "settings", "top")
        }
        log("  -> " + json.dumps(short))
        return rec


# ---------------------------------------------------------------- process control
def _is_ours(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return needle in handle.read()
    except OSError:
        return False


def _group(pgid: int) -> list[int]:
    """Processes whose process group is pgid."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    stat = handle.read()
                if int(stat[stat.rindex(")") + 2 :].split()[2]) == pgid:
                    members.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return members


def stop_recorded(pids_file: Path, needle: bytes) -> None:
    """Stop the worker process groups recorded in pids_file (one `<pgid> <label>` a line) that
    are still alive and still run our command (needle in a member's command line): SIGTERM,
    then SIGKILL after 20 s. Workers are normally stopped by whoever started them; this only
    catches what survived a crash or a timeout."""
    if not pids_file.exists():
        return
    groups = []
    for line in pids_file.read_text().splitlines():
        with contextlib.suppress(ValueError, IndexError):
            groups.append(int(line.split()[0]))

    def alive(pgid: int) -> bool:
        return any(_is_ours(pid, needle) for pid in _group(pgid))

    left = [g for g in groups if alive(g)]
    if left:
        log(f"stopping leftover worker process groups {left} ({pids_file.name})")
    for pgid in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [g for g in left if alive(g)]
    for pgid in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    pids_file.write_text("")


def run_child(
    cmd: list[str], env: dict, timeout: float, log_path: Path, echo: bool = False
) -> tuple[int | None, list[str]]:
    """Run cmd in its own session; return (exit code or None on timeout, stdout lines).
    stdout lines are echoed to stderr if asked, stderr goes to log_path. On timeout: SIGTERM
    to the child (it stops its own workers), SIGKILL to its process group after 45 s."""
    lines: list[str] = []
    with log_path.open("ab") as err:
        err.write(f"$ {' '.join(cmd)}\n".encode())
        err.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
            text=True,
        )

        def pump() -> None:
            assert proc.stdout is not None  # stdout=PIPE
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if echo:
                    log("   | " + line.rstrip("\n"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log(f"timeout after {timeout:.0f} s: {' '.join(cmd[:3])} ...")
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            rc = None
        reader.join(timeout=10)
    return rc, lines


# ---------------------------------------------------------------- receipt
def receipt_figure(a, out: Out, rep: int, figure: str, broker: str, system: str) -> None:
    """One figure in a fresh process; recorded under its test name (task_drain: "drain" of
    the system receipt-task)."""
    test = path_and_test(figure)[1]
    n = {"drain": a.n, "latency": a.latency_n}.get(test, a.enqueue_n)
    timeout = {"drain": 180 + n / 5, "latency": 180 + 2 * n}.get(test, 180 + n / 10)
    cmd = [
        sys.executable,
        str(HERE / "delivery_figures.py"),
        figure,
        "--database-url",
        a.database_url,
        "--broker",
        broker,
        "--n",
        str(n),
        "--seed",
        str(1000 + rep),
        "--logs",
        str(a.logdir),
        "--enqueue-kind",
        a.enqueue_kind,
    ]
    env = {**os.environ, "BENCH_WORKER_PIDS": str(a.receipt_pids), "PYTHONUNBUFFERED": "1"}
    log(f"[rep {rep}] {system} {figure} (n={n})")
    rc, lines = run_child(cmd, env, timeout, a.logdir / f"{system}-{figure}.log")
    stop_recorded(a.receipt_pids, b"runworker")
    result = None
    for line in lines:
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
    if result is None:
        tail = (
            (a.logdir / f"{system}-{figure}.log").read_text(errors="replace").strip().splitlines()
        )
        error = f"rc={rc}: " + " | ".join(tail[-3:])[-600:]
        out.write({"system": system, "rep": rep, "test": test, "error": error})
        return
    result.pop("test", None)
    out.write({"system": system, "rep": rep, "test": test, **result})


# ---------------------------------------------------------------- peers
class Peers:
    def __init__(self, a, stamp: str) -> None:
        self.a = a
        self.stamp = stamp
        self.redis_port: int | None = None
        self.python = PEERS_VENV / "bin" / "python"
        parts = urlsplit(a.database_url)
        self.pg = {
            "host": parts.hostname or "127.0.0.1",
            "port": parts.port or 5432,
            "user": parts.username or "postgres",
            "password": parts.password,
        }

    def prepare(self) -> None:
        if not (PEERS_DIR / "runner.py").exists():
            sys.exit(f"peer harness not found at {PEERS_DIR} (expected ../shared/bench/peers)")
        if not self.python.exists():
            log(f"creating {PEERS_VENV}")
            subprocess.run(["python3", "-m", "venv", str(PEERS_VENV)], check=True)
        probe = [
            str(self.python),
            "-c",
            "import celery, django, django_q, django_tasks_db, procrastinate, psycopg, redis",
        ]
        if subprocess.run(probe, capture_output=True).returncode != 0:
            log(f"installing {PEERS_DIR / 'requirements.txt'} into {PEERS_VENV}")
            subprocess.run(
                [
                    str(self.python),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "-r",
                    str(PEERS_DIR / "requirements.txt"),
                ],
                check=True,
            )
        PEERS_RUNDIR.mkdir(parents=True, exist_ok=True)
        (PEERS_RUNDIR / "worker.pids").write_text("")
        import psycopg

        admin = psycopg.connect(
            host=self.pg["host"],
            port=self.pg["port"],
            user=self.pg["user"],
            password=self.pg["password"],
            dbname="postgres",
            autocommit=True,
        )
        if not admin.execute(
            "SELECT 1 FROM pg_database WHERE datname=%s", [self.a.peers_db]
        ).fetchone():
            admin.execute(f'CREATE DATABASE "{self.a.peers_db}"')
            log(f"created database {self.a.peers_db}")
        # runner.py's "foreign CPU" treats the postmaster (and our Redis) as ours, as with its
        # own cluster: record the server's pid where it looks for it (same machine only).
        pid_row = admin.execute("SELECT pg_backend_pid()").fetchone()
        assert pid_row is not None  # a SELECT without FROM: one row
        backend = pid_row[0]
        admin.close()
        sys.path.insert(0, str(HERE))
        from noise import parent_of

        postmaster = parent_of(backend)
        pidfile = PEERS_RUNDIR / "postgres.pid"
        pidfile.write_text(f"{postmaster}\n" if postmaster else "")
        if REDIS_PEERS & set(self.a.peers):
            self.start_redis()

    def start_redis(self) -> None:
        """A private, throwaway Redis (the harness FLUSHDBs db 0; the shared one is left alone)."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        pidfile = PEERS_RUNDIR / "redis.pid"
        pidfile.unlink(missing_ok=True)
        subprocess.run(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "yes",
                "--pidfile",
                str(pidfile),
                "--logfile",
                str(PEERS_RUNDIR / "redis.log"),
                "--dir",
                str(PEERS_RUNDIR),
            ],
            check=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG") and pidfile.exists():
                        self.redis_port = port
                        log(
                            f"private redis on 127.0.0.1:{port} (pid {pidfile.read_text().strip()})"
                        )
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("private redis-server did not start")

    def stop_redis(self) -> None:
        pidfile = PEERS_RUNDIR / "redis.pid"
        if self.redis_port is None or not pidfile.exists():
            return
        pid = int(pidfile.read_text().split()[0])
        if _is_ours(pid, b"redis-server"):
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if not _is_ours(pid, b"redis-server"):
                    break
                time.sleep(0.1)
        pidfile.unlink(missing_ok=True)
        self.redis_port = None

    def env(self) -> dict:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RECEIPT_", "DJANGO_", "BENCH_"))
            and k not in ("DATABASE_URL", "VIRTUAL_ENV")
        }
        env.update(
            {
                "BENCH_PG_HOST": self.pg["host"],
                "BENCH_PG_PORT": str(self.pg["port"]),
                "BENCH_PG_USER": self.pg["user"],
                "BENCH_PG_DB": self.a.peers_db,
                "BENCH_RUNDIR": str(PEERS_RUNDIR),
                "BENCH_REDIS_HOST": "127.0.0.1",
                "BENCH_REDIS_PORT": str(self.redis_port or 6379),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.pg["password"]:
            env["PGPASSWORD"] = self.pg["password"]
        return env

    def run_rep(self, out: Out, rep: int) -> None:
        raw = RESULTS / f"delivery-{self.stamp}-peers-r{rep}.jsonl"
        asked = [path_and_test(f)[1] for f in self.a.figures.split(",") if f]
        tests = ",".join(dict.fromkeys(PEER_TESTS[t] for t in asked if t in PEER_TESTS))
        cmd = [
            str(self.python),
            str(PEERS_DIR / "runner.py"),
            "--peers",
            ",".join(self.a.peers),
            "--reps",
            "1",
            "--tests",
            tests,
            "--no-pgbench",
            "--enqueue-n",
            str(self.a.enqueue_n),
            "--drain-n",
            str(self.a.n),
            "--lat-n",
            str(self.a.latency_n),
            "--out",
            str(raw),
        ]
        log(
            f"[rep {rep}] peers: {', '.join(self.a.peers)} (harness runner.py, log {self.a.logdir}/peers.log)"
        )
        per_peer = 300 + self.a.enqueue_n / 100 + self.a.n / 20 + 3 * self.a.latency_n
        rc, lines = run_child(
            cmd, self.env(), per_peer * len(self.a.peers), self.a.logdir / "peers.log", echo=True
        )
        stop_recorded(PEERS_RUNDIR / "worker.pids", b".peers-venv")
        records = []
        if raw.exists():
            records = [json.loads(x) for x in raw.read_text().splitlines() if x.strip()]
        for rec in records:
            if rec.get("test") == "settings" and rep > 1:
                continue
            rec["rep"] = rep
            out.write(rec)
        if rc != 0:
            out.write(
                {
                    "system": "peers",
                    "rep": rep,
                    "test": "runner",
                    "error": f"runner.py rc={rc}: " + " | ".join(lines[-3:])[-600:],
                }
            )


# ---------------------------------------------------------------- report
def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    ax = abs(x)
    if ax >= 100:
        return f"{x:,.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _mmm(values: list[float], fmt=_fmt) -> str:
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"**{fmt(values[0])}** (n=1)"
    return f"{fmt(min(values))} / **{fmt(statistics.median(values))}** / {fmt(max(values))}"


def _x(v: float) -> str:
    return f"{v:.2f}x"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.3g} %"


def _valid(rec: dict) -> bool:
    return not rec.get("error") and rec.get("ok") is not False


def report(records: list[dict], a) -> str:
    by: dict[tuple[str, str], dict[int, dict]] = {}
    systems: list[str] = []
    errors: list[str] = []
    for rec in records:
        # the records this script wrote: each names its system and test
        system, test = cast(str, rec.get("system")), cast(str, rec.get("test"))
        if system in ("machine", "meta") or test in ("settings", "noise"):
            continue
        if not _valid(rec):
            why = rec.get("error") or (
                f"jobs/queued after {rec.get('jobs_after', rec.get('queued_after'))}, "
                f"expected {rec.get('expected', rec.get('expected_queued'))}"
            )
            errors.append(f"{system} {test} rep {rec.get('rep')}: {str(why)[:300]}")
            continue
        if system not in systems:
            systems.append(system)
        by.setdefault((system, test), {})[rec["rep"]] = rec
    order = [
        "receipt",
        TASK_API,
        "receipt-redis",
        TASK_PEER,
        "procrastinate",
        "djq-orm-cma60",
        "djq-orm",
        "celery-redis",
    ]
    systems.sort(key=lambda s: order.index(s) if s in order else len(order))
    if "peers" in systems:
        systems.remove("peers")

    def values(system: str, test: str, key: str | None) -> dict[int, float]:
        if key is None:
            return {}
        return {
            rep: rec[key]
            for rep, rec in by.get((system, test), {}).items()
            if isinstance(rec.get(key), (int, float))
        }

    lines = [
        f"Cells: min / **median** / max over {a.reps} interleaved repetition(s); "
        f"drain N={a.n}, enqueue N={a.enqueue_n}, latency N={a.latency_n}, 2 workers.",
        "",
    ]
    lines.append("| figure | " + " | ".join(systems) + " |")
    lines.append("|---|" + "---|" * len(systems))
    for label, test, rkey, pkey in FIGURES:
        cells = []
        for s in systems:
            key = rkey if s.startswith("receipt") else pkey
            cells.append(
                _mmm(list(values(s, test, key).values())) if by.get((s, test)) and key else "-"
            )
        if any(c != "-" for c in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")

    ratio_lines = []
    for ratio in RATIOS:
        mine = values(ratio.system, ratio.test, ratio.key)
        theirs = values(ratio.peer, ratio.test, ratio.peer_key)
        per_rep = [mine[r] / theirs[r] for r in sorted(set(mine) & set(theirs)) if theirs[r]]
        if not per_rep:
            continue
        shown, fmt = (_pct(ratio.target), _pct) if ratio.at_most else (_x(ratio.target or 0), _x)
        verdict = "-"
        if ratio.target is not None:
            median = statistics.median(per_rep)
            met = median <= ratio.target if ratio.at_most else median >= ratio.target
            sign = "<=" if ratio.at_most else ">="
            verdict = f"{sign} {shown} ({'met' if met else '**not met**'})"
        ratio_lines.append(f"| {ratio.label} | {_mmm(per_rep, fmt)} | {verdict} |")
    for label, system, key, limit in LATENCY_TARGETS:
        vals = list(values(system, "latency", key).values())
        if vals:
            met = statistics.median(vals) <= limit
            ratio_lines.append(
                f"| {label} | {_mmm(vals)} ms | <= {limit:.0f} ms "
                f"({'met' if met else '**not met**'}) |"
            )
    if ratio_lines:
        lines += [
            "",
            "| ratio system / peer (per repetition) or absolute figure | value "
            "(min / **median** / max) | target (on the median) |",
            "|---|---|---|",
        ]
        lines += ratio_lines

    noise_rows = []
    for test in ("drain", "enqueue_single", "enqueue_bulk", "latency"):
        cells = []
        for s in systems:
            vals = list(values(s, test, "foreign_cpu_cores").values())
            cells.append(f"{statistics.median(vals):.2f}" if vals else "-")
        noise_rows.append(f"| {test} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Foreign CPU (cores busy with processes that are not part of the measurement, median):",
        "",
        "| figure | " + " | ".join(systems) + " |",
        "|---|" + "---|" * len(systems),
        *noise_rows,
    ]
    noisy = [
        r
        for r in records
        if isinstance(r.get("foreign_cpu_cores"), (int, float)) and r["foreign_cpu_cores"] > NOISY
    ]
    if noisy:
        lines += [
            "",
            f"WARNING: {len(noisy)} measurement(s) ran while other processes used more than "
            f"{NOISY} cores; the ratios of those repetitions are unreliable.",
        ]
    if errors:
        lines += ["", "Failed or excluded measurements:"] + [f"- {e}" for e in errors]
    return "\n".join(lines)


# ---------------------------------------------------------------- main
def meta(a, peers: Peers | None) -> dict:
    import django
    import psycopg

    info = {
        "system": "meta",
        "test": "settings",
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "args": {k: str(v) for k, v in vars(a).items()},
    }
    try:
        conn = psycopg.connect(
            a.database_url.replace("postgres://", "postgresql://", 1),
            autocommit=True,
            dbname="postgres",
        )
        row = conn.execute(
            "SELECT version(), current_setting('fsync'), current_setting('synchronous_commit'), "
            "current_setting('shared_buffers')"
        ).fetchone()
        assert row is not None  # a SELECT without FROM: one row
        info.update(
            zip(("server", "fsync", "synchronous_commit", "shared_buffers"), row, strict=True)
        )
        conn.close()
    except Exception as error:
        info["server_error"] = str(error)
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
        info["git"] = rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except Exception:
        pass
    if peers is not None:
        frozen = subprocess.run(
            [str(peers.python), "-m", "pip", "freeze"], capture_output=True, text=True
        )
        wanted = (
            *("django==", "django-q2==", "procrastinate==", "celery==", "psycopg==", "redis=="),
            *("django-tasks==", "django-tasks-db=="),
        )
        info["peer_versions"] = [
            x for x in frozen.stdout.splitlines() if x.lower().startswith(wanted)
        ]
    return info


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default 3)")
    ap.add_argument("--n", type=int, default=None, help="drain jobs (default 3000)")
    ap.add_argument("--enqueue-n", type=int, default=None, help="enqueue jobs (default 5000)")
    ap.add_argument("--latency-n", type=int, default=None, help="latency samples (default 100)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a quick look: 1 rep, drain 300, enqueue 500, latency 20 (unless given)",
    )
    ap.add_argument(
        "--server",
        choices=("default", "url"),
        default="default",
        help="default: every system on a cluster of its own with initdb's settings "
        "(bench/default_postgres.py, autovacuum on); url: the server of --database-url",
    )
    ap.add_argument("--database-url", default=DEFAULT_URL, help="with --server url")
    ap.add_argument(
        "--redis-broker",
        default="redis://127.0.0.1:6379/13",
        help="Receipt's Redis broker for the extra latency figure; 'none' to skip",
    )
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument(
        "--peers",
        default=None,
        help=f"harness labels (default {DEFAULT_PEERS}, and {TASK_PEER} with a task_ figure)",
    )
    ap.add_argument(
        "--peers-db", default="receipt_peers", help="peers' database on the same server"
    )
    ap.add_argument(
        "--figures",
        default="drain,enqueue_single,enqueue_bulk,latency",
        help="Receipt figures to run; task_drain, task_enqueue_single and task_latency are the "
        "same through Django's task framework (system receipt-task)",
    )
    ap.add_argument(
        "--enqueue-kind",
        default="factory.dispatch",
        help="payload kind of the enqueue figures (factory.dispatch: no ledger rows)",
    )
    ap.add_argument(
        "--report",
        nargs="+",
        metavar="JSONL",
        help="only print the report of earlier raw files (bench/results/delivery-*.jsonl)",
    )
    a = smoke.parse(
        ap,
        {
            "reps": 1,
            "n": 20,
            "enqueue_n": 20,
            "latency_n": 3,
            "figures": "enqueue_single,enqueue_bulk,task_enqueue_single",
        },
    )
    if a.report:
        records = [
            json.loads(x)
            for path in a.report
            for x in Path(path).read_text().splitlines()
            if x.strip()
        ]
        args: dict[str, Any] = next((r["args"] for r in records if r.get("system") == "meta"), {})
        for key in ("n", "enqueue_n", "latency_n"):
            setattr(a, key, args.get(key, "?"))
        a.reps = len({r.get("rep") for r in records if r.get("rep")})
        print(report(records, a))
        return
    quick = {"reps": 1, "n": 300, "enqueue_n": 500, "latency_n": 20}
    full = {"reps": 3, "n": 3000, "enqueue_n": 5000, "latency_n": 100}
    for key, default in (quick if a.quick else full).items():
        if getattr(a, key) is None:
            setattr(a, key, default)
    figures = [f for f in a.figures.split(",") if f]
    if a.peers is None:
        with_task = any(f.startswith(TASK_PREFIX) for f in figures)
        a.peers = DEFAULT_PEERS + (f",{TASK_PEER}" if with_task else "")
    a.peers = [p for p in a.peers.split(",") if p]

    server_note = "as configured"
    if a.server == "default":
        tuned = default_postgres.start()
        a.database_url = default_postgres.url("receipt_bench")
        server_note = f"initdb defaults ({tuned or 'nothing changed'})"
        log(f"PostgreSQL with initdb's settings at {a.database_url}: {server_note}")

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Out(RESULTS / f"delivery-{stamp}.jsonl")
    a.logdir = RESULTS / f"delivery-{stamp}-logs"
    a.logdir.mkdir(parents=True, exist_ok=True)
    a.receipt_pids = a.logdir / "receipt-worker.pids"
    a.receipt_pids.write_text("")
    redis_ok = a.redis_broker.lower() != "none"
    if redis_ok:
        parts = urlsplit(a.redis_broker)
        try:
            socket.create_connection(
                (parts.hostname or "127.0.0.1", parts.port or 6379), timeout=2
            ).close()
        except OSError as error:
            log(
                f"Redis broker {a.redis_broker} not reachable ({error}): skipping the Redis latency figure"
            )
            redis_ok = False

    peers = None if a.skip_peers else Peers(a, stamp)
    t_all = time.monotonic()
    try:
        if peers:
            peers.prepare()
        out.write(meta(a, peers))
        for rep in range(1, a.reps + 1):
            for figure in figures:
                task_api = figure.startswith(TASK_PREFIX)
                receipt_figure(a, out, rep, figure, "orm", TASK_API if task_api else "receipt")
            if redis_ok and "latency" in figures:
                receipt_figure(a, out, rep, "latency", a.redis_broker, "receipt-redis")
            if peers:
                peers.run_rep(out, rep)
    finally:
        stop_recorded(a.receipt_pids, b"runworker")
        if peers:
            stop_recorded(PEERS_RUNDIR / "worker.pids", b".peers-venv")
            peers.stop_redis()
    text = report(out.records, a)
    where = urlsplit(a.database_url)
    header = (
        f"# Delivery figures {stamp}\n\n{os.cpu_count()} cores; PostgreSQL {where.hostname}:"
        f"{where.port or 5432} ({server_note}), database {where.path.lstrip('/')}"
        + ("" if a.skip_peers else f" (peers: {a.peers_db}, same server)")
        + f"; Receipt enqueue payload kind {a.enqueue_kind}; {time.monotonic() - t_all:.0f} s\n\n"
    )
    (RESULTS / f"delivery-{stamp}.md").write_text(header + text + "\n")
    log(f"done in {time.monotonic() - t_all:.0f} s; raw: {out.path}; logs: {a.logdir}")
    print(header + text)


if __name__ == "__main__":
    main()
