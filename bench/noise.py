"""How busy the machine was with OTHER work during a measurement (the machine is shared).

Same rule as the peers harness (../shared/bench/peers/runner.py, column "foreign CPU"):
CPU seconds used during the window by processes that are not descendants of our roots
(this process, which starts the workers, plus the PostgreSQL postmaster and, when used, the
Redis server), divided by the wall time. Only processes alive at the end of the window
are counted, so it is a lower bound. On a PostgreSQL server shared with other sessions
their backends count as ours (they are children of the postmaster): read the loadavg
recorded beside it too.
"""

from __future__ import annotations

import os
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _table() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, utime + stime in seconds) for every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
            fields = stat[stat.rindex(")") + 2 :].split()
            table[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / CLK_TCK)
        except (OSError, ValueError, IndexError):
            pass
    return table


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
        return int(stat[stat.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def ancestor_in(pid: int, table: dict[int, tuple[int, float]], roots: set[int]) -> int | None:
    """The first of `roots` on pid's chain of parents (pid itself included), else None."""
    p, hops = pid, 0
    while p > 2 and hops < 64:
        if p in roots:
            return p
        p = table.get(p, (0, 0.0))[0]
        hops += 1
    return None


def _foreign(roots: set[int]) -> dict[int, float]:
    table = _table()
    out = {}
    for pid, (ppid, cpu) in table.items():
        if pid <= 2 or ppid == 2:  # kernel threads
            continue
        if ancestor_in(pid, table, roots) is None:
            out[pid] = cpu
    return out


class Noise:
    """`Noise(roots)` at the start of the window, `.done()` at its end -> record fields."""

    def __init__(self, roots: set[int] | None = None) -> None:
        self.roots = {os.getpid(), *(roots or set())}
        self.t0 = time.monotonic()
        self.c0 = _foreign(self.roots)

    def done(self) -> dict:
        c1 = _foreign(self.roots)
        wall = max(time.monotonic() - self.t0, 1e-6)
        used = sum(cpu - self.c0.get(pid, 0.0) for pid, cpu in c1.items())
        with open("/proc/loadavg") as handle:
            load = handle.read().split()[0]
        return {"foreign_cpu_cores": round(max(used, 0.0) / wall, 3), "loadavg_end": load}
