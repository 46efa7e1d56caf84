"""Every script in bench/ still runs: each one's `--smoke` mode (a handful of jobs, seconds)
as a subprocess with a deadline. A test asserts only that its script exits 0 and prints its
figure, never a timing.

They run once, in the SQLite leg (the shorter one in CI), against a PostgreSQL cluster of
this session's own whichever database the suite tests, started through
bench/default_postgres.py in a temporary directory on a free port with fsync off: no figure
is taken, so the resets' TRUNCATE and CHECKPOINT between figures cost next to nothing, and
nothing the scripts create or empty can meet the test database or anyone else's bench.
`run_delivery` measures on that same cluster (its default server). The libraries are
exercised through the scripts: noise.py and handlers.py by every drain, default_postgres.py
by the cluster itself, scale_data.py by scale.py and prune_load.py, delivery_figures.py by
run_delivery, append.py by `run` (`exec append.py --pgbench`).

Needs PostgreSQL's server programs (initdb, pg_ctl; as root also runuser) and, for three
scripts, pgbench and the peers' pgbench scripts (../shared/bench/peers/pgbench): without
them a test is skipped, and fails when CI=true (CI has them).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
DEADLINE_S = 180  # per script; a smoke takes seconds, this only stops a hung one
OPTIONS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
# Smokes run two at a time (most of one is waiting on its subprocesses), each lane on its
# own databases: a bench empties its database and refuses to start beside other sessions.
LANES = 2


@dataclass(frozen=True)
class Smoke:
    script: str  # in bench/: a .py runs under this interpreter, the others are bash
    cost_s: float  # about how long it takes, to balance the lanes
    args: tuple[str, ...]  # {url}: the lane's bench database, {pgbench}: its pgbench
    # database, {server}: the cluster (for scripts that name their databases themselves)
    figures: tuple[str, ...]  # each must match a line of stdout
    pgbench: bool = False  # needs pgbench and the peers' pgbench scripts

    @property
    def name(self) -> str:
        return self.script.removesuffix(".py")


URL = ("--database-url", "{url}")
PGBENCH = (*URL, "--pgbench-db", "{pgbench}")
SMOKES = [
    Smoke("merkle.py", 0.5, (), (r"^inclusion proof +[\d.]+ us", r"^proof, [\d,]+ leaves ")),
    Smoke(
        "pgbench_anchor.py",
        1,
        PGBENCH,
        (r'"test": "pgbench_es_append_c1".*"tps": [\d.]+',),
        pgbench=True,
    ),
    Smoke(
        "run",  # `exec append.py --pgbench`
        2.5,
        PGBENCH,
        (
            r"^\| \(a\) single append, new stream \| [\d,.]+ / ",
            r"^\| \(e\) enqueue one by one / event-store append \| \d+ % / ",
        ),
        pgbench=True,
    ),
    Smoke(
        "profile_append.py",
        2,
        PGBENCH,
        (r"^SQL through Django per append", r"^\| store \| [\d,]+ \| ", r"^\| es-python \| "),
        pgbench=True,
    ),
    Smoke("enqueue.py", 3, URL, (r"^enqueue_http_batch per_s: \d+ / ",)),
    Smoke("http_cost.py", 1, URL, (r'"test": "http_cost", .*"whole_request_cpu_us": [\d.]+',)),
    Smoke("http_load.py", 2.5, URL, (r'"test": "enqueue_http_load".*"clients": 2, .*"per_s": ',)),
    Smoke("sse_load.py", 9, URL, (r'"test": "sse_load", "clients": 4, ',)),
    Smoke("task_overhead.py", 1.2, URL, (r'"enqueue_share": [\d.]+',)),
    Smoke(
        "log_proofs.py",
        1.1,
        URL,
        (r"^inclusion proof, [\d,]+ +mean [\d.]+ ms", r"^every proof verified"),
    ),
    Smoke(
        "delivery.py",
        9.5,
        URL,
        (r'"test": "drain", .*"jobs_per_s_from_launch": ', r'"test": "latency", .*"p50_ms": '),
    ),
    Smoke("cpu_split.py", 6, URL, (r'"pg_core_ms_per_job": [\d.]+',)),
    Smoke("callback_drain.py", 9, URL, (r"^\| median \| [\d.]+ \| [\d.]+ \| \d+% \|",)),
    Smoke(
        "log_drain.py",
        9,
        URL,
        (r"^\| median \| [\d.]+ \| [\d.]+ \| \d+% \|", r"^Storage after the drains: \d+ "),
    ),
    Smoke(
        "prune_load.py",  # its databases: receipt_prune_300_src and receipt_prune_300
        8,
        ("--server", "{server}"),
        (r"^\| during prune \| [\d,]+ \| ", r"^\| `receipts prune` \| [\d,]+ \| "),
    ),
    Smoke(
        "scale.py",  # its databases: receipt_scale_smoke and receipt_scale_smoke_backlog
        12,
        ("--server", "{server}"),
        (r"^\| mixed \| admin dashboard \| [\d,.]+ \|", r"^\| backlog \| admin dashboard \| "),
    ),
    Smoke(
        "run_delivery",  # its database: receipt_bench (on its default server: this cluster)
        5,
        ("--skip-peers",),
        (r"^\| enqueue 1-by-1, caller \(jobs/s\) \| \*\*[\d,]+\*\* \(n=1\) \| \*\*",),
    ),
]


def test_every_script_in_bench_has_a_smoke_test() -> None:
    libraries = {"default_postgres.py", "handlers.py", "noise.py", "scale_data.py", "smoke.py"}
    # run by `run` (append.py) and `run_delivery` (run_delivery.py, delivery_figures.py)
    run_by_others = {"append.py", "run_delivery.py", "delivery_figures.py"}
    files = [p for p in BENCH.iterdir() if p.is_file() and not p.name.startswith(".")]
    scripts = {p.name for p in files if p.suffix in (".py", "")}
    assert scripts - libraries - run_by_others == {s.script for s in SMOKES}


def _required(present: bool, what: str) -> None:
    if present:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing; CI runs the bench smoke tests")
    pytest.skip(f"{what} is missing")


def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def _pgbench_ready() -> bool:
    """pgbench and the peers' scripts, where bench/pgbench_anchor.py looks for them."""
    binary = any(
        p and os.access(p, os.X_OK)
        for p in (os.environ.get("PGBENCH"), "/usr/lib/postgresql/15/bin/pgbench")
    ) or bool(shutil.which("pgbench"))
    scripts = [ROOT.parent / "shared", Path("/work/shared")]
    peers = os.environ.get("BENCH_PEERS_PGBENCH")
    found = (
        Path(peers).is_dir()
        if peers
        else any((s / "bench" / "peers" / "pgbench" / "es_append.sql").exists() for s in scripts)
    )
    return binary and found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _cluster_call(env: dict[str, str], call: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import default_postgres; default_postgres.{call}()"],
        cwd=BENCH,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"default_postgres.{call}(): {done.stderr[-2000:]}"


@pytest.fixture(scope="session")
def cluster() -> Iterator[dict[str, str]]:
    """The environment every smoke runs in: the session's own PostgreSQL cluster (what
    bench/default_postgres.py starts, at a temporary root and a free port, fsync off)."""
    pg_bin = _pg_bin()
    _required(pg_bin is not None and (pg_bin / "initdb").exists(), "initdb (PostgreSQL server)")
    if os.geteuid() == 0:  # initdb and postgres refuse root: they run as postgres
        _required(bool(shutil.which("runuser")), "runuser")
    root = Path(tempfile.mkdtemp(prefix="receipt-bench-smoke-"))
    root.chmod(0o755)  # the postgres user reaches its data directory below it
    port = _free_port()
    skipped = {"DATABASE_URL", "RECEIPT_PROCESS_ROLE", "RECEIPT_BROKER", "RECEIPT_KEEPER_DIR"}
    env = {k: v for k, v in os.environ.items() if k not in skipped}
    env.update(
        BENCH_DEFAULT_PG_ROOT=str(root / "pg"),
        BENCH_DEFAULT_PG_PORT=str(port),
        BENCH_DEFAULT_PG_OPTIONS=OPTIONS,
        PYTHON=sys.executable,  # the bash scripts' interpreter (bench/run, bench/run_delivery)
        PYTHONUNBUFFERED="1",
    )
    try:
        _cluster_call(env, "start")
        yield env
    finally:
        _cluster_call(env, "stop")  # a no-op when it never started
        shutil.rmtree(root, ignore_errors=True)


def _kill_recorded(pids: Path) -> None:
    """SIGKILL the runworker process groups a killed script recorded (each runworker leads
    a session of its own) that still run a runworker."""
    if not pids.exists():
        return
    for line in pids.read_text().splitlines():
        with contextlib.suppress(ValueError, IndexError, OSError):
            pgid = int(line.split()[0])
            if b"runworker" in Path(f"/proc/{pgid}/cmdline").read_bytes():
                os.killpg(pgid, signal.SIGKILL)


@dataclass
class Run:
    smoke: Smoke
    done: threading.Event = field(default_factory=threading.Event)
    returncode: int | None = None  # None: still running at the deadline, killed
    stdout: str = ""
    stderr: str = ""
    elapsed_s: float = 0.0
    lane: int = -1


class Lanes:
    """The selected smokes in LANES threads, each lane on a database of its own on the
    cluster, its scripts one after another (the costliest first, to the least loaded lane).
    Each test waits for its own script's run."""

    def __init__(self, env: dict[str, str], smokes: list[Smoke], tmp: Path) -> None:
        self.env, self.tmp = env, tmp
        self.runs = {smoke.name: Run(smoke) for smoke in smokes}
        self.procs: list[tuple[subprocess.Popen[str], Path]] = []  # and its runworkers' pids
        self.stopping = threading.Event()
        lanes: list[list[Smoke]] = [[] for _ in range(LANES)]
        loads = [0.0] * LANES
        for smoke in sorted(smokes, key=lambda smoke: -smoke.cost_s):
            lane = loads.index(min(loads))
            lanes[lane].append(smoke)
            loads[lane] += smoke.cost_s
        self.threads = [
            threading.Thread(target=self._lane, args=(k, lane), daemon=True)
            for k, lane in enumerate(lanes)
        ]
        for thread in self.threads:
            thread.start()

    def _lane(self, k: int, smokes: list[Smoke]) -> None:
        for smoke in smokes:
            run = self.runs[smoke.name]
            try:
                if not self.stopping.is_set():
                    self._run(k, run)
            finally:
                run.done.set()

    def _run(self, k: int, run: Run) -> None:
        port = self.env["BENCH_DEFAULT_PG_PORT"]
        server = f"postgres://postgres@127.0.0.1:{port}/"
        names = {"url": f"{server}receipt_bench_lane{k}", "pgbench": f"receipt_pgbench_lane{k}"}
        args = [a.format(server=server, **names) for a in run.smoke.args]
        command = [str(BENCH / run.smoke.script), "--smoke", *args]
        if run.smoke.script.endswith(".py"):
            command.insert(0, sys.executable)
        tmp = self.tmp / run.smoke.name
        for name in ("logs", "data"):
            (tmp / name).mkdir(parents=True)
        env = {
            **self.env,
            "BENCH_RESULTS": str(tmp / "results"),
            "BENCH_LOGS": str(tmp / "logs"),
            "BENCH_WORKER_PIDS": str(tmp / "worker.pids"),
            "RECEIPT_DATA_DIR": str(tmp / "data"),
        }
        run.lane = k
        started = time.monotonic()
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its servers and children go with it when killed
        )
        self.procs.append((proc, tmp / "worker.pids"))
        try:
            run.stdout, run.stderr = proc.communicate(timeout=DEADLINE_S)
            run.returncode = proc.returncode
        except subprocess.TimeoutExpired:
            self._kill(proc, tmp / "worker.pids")
            run.stdout, run.stderr = proc.communicate()
        run.elapsed_s = time.monotonic() - started

    @staticmethod
    def _kill(proc: subprocess.Popen[str], pids: Path) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_recorded(pids)

    def wait(self, smoke: Smoke) -> Run:
        run = self.runs[smoke.name]
        assert run.done.wait(DEADLINE_S * len(self.runs)), f"{smoke.script} never finished"
        return run

    def stop(self) -> None:
        """Kill what still runs (an interrupted session) and wait for the lanes."""
        self.stopping.set()
        for proc, pids in self.procs:
            if proc.poll() is None:
                self._kill(proc, pids)
        for thread in self.threads:
            thread.join(timeout=30)


@pytest.fixture(scope="session")
def lanes(
    request: pytest.FixtureRequest,
    cluster: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Lanes]:
    """Every smoke this session selected and can run, started together in lanes."""
    params = [getattr(item, "callspec", None) for item in request.session.items]
    selected = [p.params["smoke"] for p in params if p is not None and "smoke" in p.params]
    runnable = [s for s in selected if not s.pgbench or _pgbench_ready()]
    running = Lanes(cluster, runnable, tmp_path_factory.mktemp("bench-smoke"))
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.runtime
@pytest.mark.skipif(
    os.environ.get("RECEIPT_TEST_BACKEND") == "postgres",
    reason="runs once, in the SQLite leg (on a PostgreSQL cluster of its own)",
)
@pytest.mark.parametrize("smoke", SMOKES, ids=lambda smoke: smoke.name)
def test_bench_script_runs_and_prints_its_figure(smoke: Smoke, lanes: Lanes) -> None:
    if smoke.pgbench:
        _required(_pgbench_ready(), "pgbench or the peers' pgbench scripts")
    run = lanes.wait(smoke)
    shown = (
        f"{smoke.script} --smoke ({run.elapsed_s:.1f} s), stdout:\n{run.stdout[-3000:]}\n"
        f"stderr:\n{run.stderr[-3000:]}"
    )
    print(f"{smoke.script} --smoke: {run.elapsed_s:.1f} s in lane {run.lane}")  # with -rP
    assert run.returncode is not None, f"still running after {DEADLINE_S} s: {shown}"
    assert run.returncode == 0, shown
    for figure in smoke.figures:
        assert re.search(figure, run.stdout, re.MULTILINE), f"no line matches {figure!r}: {shown}"
