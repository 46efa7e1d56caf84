"""CPU per drained job, by process class: PostgreSQL and the runworkers (docs/scaling.md).

    .venv/bin/python bench/cpu_split.py [--database-url URL] [--n 3000] [--reps 3]

Runs `bench/delivery.py --tests drain` and, beside it, samples the CPU time of every
PostgreSQL process and of every `runworker` process (their clusters' workers included)
from /proc every 0.1 s. The window is the stretch in which the 10th to the 90th percent
of the bodies ran (counted from the drain's marker file), so the runworkers' start and
the last stragglers stay out of it. A process that ends between two samples loses at
most its last 0.1 s, which the window does not include anyway. Same machine only: the
PostgreSQL server must be local. Prints one JSON line per repetition.
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

HERE = Path(__file__).resolve().parent
MARKER = delivery.LOGS / delivery.DRAIN_MARKER  # where `delivery.py --tests drain` marks bodies
TICK = os.sysconf("SC_CLK_TCK")


def _class_of(pid: str) -> tuple[str, float] | None:
    """('pg' | 'worker', CPU seconds so far) of one process, None for any other."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:
        return None
    comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
    fields = rest.split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    if comm.startswith("postgres"):
        return "pg", cpu
    if b"runworker" in cmdline:
        return "worker", cpu
    return None


class Sampler:
    """(time, bodies run, CPU seconds by class) every `period` s, in a thread."""

    def __init__(self, period: float = 0.1) -> None:
        self.period = period
        self.latest: dict[int, tuple[str, float]] = {}
        self.samples: list[tuple[float, int, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit() and (found := _class_of(pid)) is not None:
                    self.latest[int(pid)] = found
            totals = {"pg": 0.0, "worker": 0.0}
            for cls, cpu in self.latest.values():
                totals[cls] += cpu
            self.samples.append((time.monotonic(), delivery.marker_count(MARKER), totals))
            self._stop.wait(self.period)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_rep(url: str, n: int) -> dict:
    MARKER.unlink(missing_ok=True)
    with Sampler() as sampler:
        done = subprocess.run(
            [
                sys.executable,
                str(HERE / "delivery.py"),
                "--tests",
                "drain",
                "--n",
                str(n),
                "--database-url",
                url,
            ],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        sys.exit(f"delivery.py failed:\n{done.stderr[-2000:]}")
    samples = sampler.samples
    low = next(s for s in samples if s[1] >= 0.1 * n)
    high = next(s for s in samples if s[1] >= 0.9 * n)
    jobs, wall = high[1] - low[1], high[0] - low[0]
    rec: dict = {"n": n, "window_jobs": jobs, "window_s": round(wall, 2)}
    rec["jobs_per_s"] = round(jobs / wall)
    for cls in ("pg", "worker"):
        cpu = high[2][cls] - low[2][cls]
        rec[f"{cls}_core_ms_per_job"] = round(1000 * cpu / jobs, 2)
        rec[f"{cls}_cores"] = round(cpu / wall, 2)
    return rec


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    for rep in range(1, args.reps + 1):
        print(json.dumps({"rep": rep, **one_rep(args.database_url, args.n)}), flush=True)


if __name__ == "__main__":
    main()
