"""CPU per drained job, by process class: PostgreSQL and the runworkers (docs/scaling.md).

    .venv/bin/python bench/cpu_split.py [--database-url URL] [--n 3000] [--reps 3]
                                        [--path native|task] [--concurrency 2[,4]]
    .venv/bin/python bench/cpu_split.py --smoke     # one drain of 60 jobs

Runs `bench/delivery.py --tests drain` and, beside it, samples the CPU time of the
PostgreSQL server's processes (the postmaster's children) and of the runworkers that run
started (their clusters' workers included) from /proc every 0.1 s; other sessions'
backends and other runworkers on a shared machine stay out. The window is the stretch in which the 10th to the 90th percent
of the bodies ran (counted from the drain's marker file), so the runworkers' start and
the last stragglers stay out of it. A process that ends between two samples loses at
most its last 0.1 s, which the window does not include anyway. Same machine only: the
PostgreSQL server must be local. Prints one JSON line per repetition (per concurrency),
with `machine_busy_cores`: the CPU every process of the machine used over the window, so
a drain that leaves cores idle (waiting, not computing) shows as such.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import delivery
import noise
import smoke

HERE = Path(__file__).resolve().parent
MARKER = delivery.LOGS / delivery.DRAIN_MARKER  # where `delivery.py --tests drain` marks bodies


def postmaster(url: str) -> int:
    """The pid of the server's postmaster (the server must run on this machine)."""
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        found = noise.parent_of(row[0]) if row else None  # while the backend is alive
    if found is None:
        sys.exit("cpu_split: the PostgreSQL server must run on this machine")
    return found


ROLES = ("driver", "chat")


def _role(pid: int) -> str:
    """The runworker role in a process's command line (its cluster's forks keep it)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return "worker"
    for role in ROLES:
        if b"--role" in argv and role.encode() in argv:
            return role
    return "worker"


class Sampler:
    """(time, bodies run, CPU seconds by class) every `period` s, in a thread. A process is
    of class 'pg' below the postmaster; below the bench process that launches the
    runworkers (itself excluded: it only watches the marker file), of its runworker's
    role, 'driver' or 'chat'."""

    def __init__(self, server: int, bench: int, period: float = 0.1) -> None:
        self.roots = {server: "pg", bench: "worker"}
        self.bench = bench
        self.period = period
        self.latest: dict[int, tuple[str, float]] = {}
        self.samples: list[tuple[float, int, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            table = noise._table()
            for pid, (_, cpu) in table.items():
                root = noise.ancestor_in(pid, table, set(self.roots))
                if root is not None and pid != self.bench:
                    known = self.latest.get(pid)
                    cls = known[0] if known else self.roots[root]
                    if cls == "worker":
                        cls = _role(pid)
                    self.latest[pid] = (cls, cpu)
            totals = dict.fromkeys(("pg", "worker", *ROLES), 0.0)
            for cls, cpu in self.latest.values():
                totals[cls] += cpu
                if cls in ROLES:
                    totals["worker"] += cpu
            totals["machine"] = _machine_busy_s()
            self.samples.append((time.monotonic(), delivery.marker_count(MARKER), totals))
            self._stop.wait(self.period)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_rep(url: str, n: int, path: str, concurrency: int = 2) -> dict:
    MARKER.unlink(missing_ok=True)
    command = [sys.executable, str(HERE / "delivery.py"), "--tests", "drain", "--n", str(n)]
    command += ["--database-url", url, "--path", path, "--concurrency", str(concurrency)]
    server = postmaster(url)
    bench = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with Sampler(server, bench.pid) as sampler:
        _, stderr = bench.communicate()
    if bench.returncode != 0:
        sys.exit(f"delivery.py failed:\n{stderr[-2000:]}")
    samples = sampler.samples
    first = next(k for k, s in enumerate(samples) if s[1] >= 0.1 * n)
    last = next(k for k, s in enumerate(samples) if s[1] >= 0.9 * n)
    if last == first:  # a drain shorter than a sample period: the samples around it
        first, last = max(0, first - 1), min(len(samples) - 1, last + 1)
    low, high = samples[first], samples[last]
    jobs, wall = high[1] - low[1], high[0] - low[0]
    if jobs <= 0 or wall <= 0:
        sys.exit(f"cpu_split: no window to measure in ({len(samples)} samples, N={n})")
    rec: dict = {"n": n, "path": path, "concurrency": concurrency, "window_jobs": jobs}
    rec["window_s"] = round(wall, 2)
    rec["jobs_per_s"] = round(jobs / wall)
    for cls in ("pg", "worker", *ROLES):
        cpu = high[2][cls] - low[2][cls]
        rec[f"{cls}_core_ms_per_job"] = round(1000 * cpu / jobs, 2)
        rec[f"{cls}_cores"] = round(cpu / wall, 2)
    # every process's CPU, ours and others': what the machine had left (os.cpu_count() cores)
    rec["machine_busy_cores"] = round((high[2]["machine"] - low[2]["machine"]) / wall, 2)
    return rec


def _machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy since boot (/proc/stat: all but idle and
    iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--path", choices=delivery.PATHS, default="native")
    parser.add_argument(
        "--concurrency",
        default="2",
        help="chat worker processes; a list (2,4) runs each in turn within every repetition",
    )
    args = smoke.parse(parser, {"n": 60, "reps": 1})
    for rep in range(1, args.reps + 1):
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            rec = one_rep(args.database_url, args.n, args.path, concurrency)
            print(json.dumps({"rep": rep, **rec}), flush=True)


if __name__ == "__main__":
    main()
