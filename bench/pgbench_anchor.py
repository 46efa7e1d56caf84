"""pgbench anchor: the raw PostgreSQL rate that receipt's append figures are divided by.

Runs the peer harness's pgbench scripts (../shared/bench/peers/pgbench/) exactly as
its runner.py does: the statements of schema.sql once, then before every run the
statements of reset.sql and a CHECKPOINT, then

    pgbench -h H -p P -U U -n -M prepared -c 1 -j 1 -T 15 -f <script> <db>

The only difference from the peers harness is the server and the database (a
separate database, default receipt_pgbench, on the server of --database-url).

Standalone use (prints one JSON line per run):

    .venv/bin/python bench/pgbench_anchor.py [--database-url URL] [--secs 15] [--reps 1]
    .venv/bin/python bench/pgbench_anchor.py --smoke      # 50 transactions a script

bench/append.py --pgbench imports this module and interleaves the runs with its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import smoke


def _peers_pgbench() -> str:
    """The peers' pgbench scripts: ../shared/bench/peers/pgbench beside this checkout (where
    CI's copy of shared/ is too), else /work/shared's."""
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.normpath(os.path.join(here, "..", "..", "shared", "bench", "peers", "pgbench"))
    for candidate in (beside, "/work/shared/bench/peers/pgbench"):
        if os.path.isdir(candidate):
            return candidate
    return beside


PEERS_PGBENCH = os.environ.get("BENCH_PEERS_PGBENCH") or _peers_pgbench()
DEFAULT_URL = "postgres://root@127.0.0.1:5432/receipt_bench"
DEFAULT_DB = "receipt_pgbench"
# label used in the report, same wording as the peers' BASELINE.md
SCRIPTS = {
    "insert_one.sql": "insert one row",
    "es_append.sql": "event-store append (3 inserts + 1 update)",
}


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    user: str
    password: str

    @classmethod
    def from_url(cls, url: str) -> Server:
        parts = urlsplit(url)
        return cls(
            parts.hostname or "127.0.0.1",
            parts.port or 5432,
            unquote(parts.username or os.environ.get("USER", "postgres")),
            unquote(parts.password or ""),
        )

    def connect(self, dbname: str, autocommit: bool = True):  # -> psycopg.Connection
        import psycopg

        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password or None,
            dbname=dbname,
            autocommit=autocommit,
        )


def ensure_database(server: Server, dbname: str) -> bool:
    """CREATE DATABASE `dbname` unless it exists (through the `postgres` database)."""
    from psycopg import sql

    with server.connect("postgres") as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone():
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        return True


def pgbench_binary() -> str:
    for candidate in (
        os.environ.get("PGBENCH"),
        "/usr/lib/postgresql/15/bin/pgbench",
        shutil.which("pgbench"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit("pgbench not found (set PGBENCH=/path/to/pgbench)")


def _run_sql_file(conn, name: str) -> None:
    # same splitting as the peers' runner.py (pgbench_setup / m_pgbench)
    with open(os.path.join(PEERS_PGBENCH, name)) as handle:
        for stmt in handle.read().split(";"):
            if stmt.strip():
                conn.execute(stmt)


def busy_jiffies() -> tuple[int, int]:
    """(non-idle, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def busy_cores(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Average number of busy cores between two busy_jiffies() snapshots."""
    ncpu = os.cpu_count() or 1
    total = max(after[1] - before[1], 1)
    return round(ncpu * (after[0] - before[0]) / total, 2)


def proc_cpu(pid: int) -> float | None:
    """utime + stime seconds of process `pid` (None when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class BackendWatch(threading.Thread):
    """CPU of pgbench's server backend(s), sampled every 0.2 s (last sample wins)."""

    def __init__(self, conn, dbname: str) -> None:
        super().__init__(daemon=True)
        self.conn, self.dbname = conn, dbname
        self.cpu: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            rows = self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = 'pgbench'",
                [self.dbname],
            ).fetchall()
            for (pid,) in rows:
                cpu = proc_cpu(pid)
                if cpu is not None:
                    self.cpu[pid] = cpu


class Anchor:
    def __init__(
        self,
        url: str = DEFAULT_URL,
        dbname: str = DEFAULT_DB,
        secs: int = 15,
        clients: int = 1,
        log: str | None = None,
        transactions: int | None = None,
    ) -> None:
        self.server = Server.from_url(url)
        self.dbname = dbname
        self.secs = secs
        self.transactions = transactions  # per client, instead of secs (-t, not -T)
        self.clients = clients
        self.binary = pgbench_binary()
        self.log = log
        self._conn = None

    def setup(self) -> None:
        ensure_database(self.server, self.dbname)
        self._conn = self.server.connect(self.dbname)
        _run_sql_file(self._conn, "schema.sql")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True)
        return out.stdout.strip()

    def run(self, script: str) -> dict:
        assert self._conn is not None, "call setup() first"
        _run_sql_file(self._conn, "reset.sql")
        self._conn.execute("CHECKPOINT")
        cmd = [
            self.binary,
            "-h",
            self.server.host,
            "-p",
            str(self.server.port),
            "-U",
            self.server.user,
            "-n",
            "-M",
            "prepared",
            "-c",
            str(self.clients),
            "-j",
            str(min(self.clients, 2)),
            *(["-t", str(self.transactions)] if self.transactions else ["-T", str(self.secs)]),
            "-f",
            os.path.join(PEERS_PGBENCH, script),
            self.dbname,
        ]
        env = dict(os.environ)
        if self.server.password:
            env["PGPASSWORD"] = self.server.password
        watch = BackendWatch(self.server.connect("postgres"), self.dbname)
        watch.start()
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu0 = busy_jiffies()
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=self.secs + 60
            )
            text = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            text = "timeout"
        wall = time.monotonic() - t0
        cpu1 = busy_jiffies()
        children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        watch.stop.set()
        watch.join()
        watch.conn.close()
        client_cpu = (
            children1.ru_utime + children1.ru_stime - children0.ru_utime - children0.ru_stime
        )
        server_cpu = sum(watch.cpu.values())
        tps = latency = None
        for line in text.splitlines():
            if line.startswith("tps = "):
                tps = float(line.split()[2])
            if line.startswith("latency average = "):
                latency = float(line.split()[3])
        if self.log:
            with open(self.log, "a") as handle:
                handle.write(" ".join(cmd) + "\n" + text + "\n")
        rec = {
            "bench": "pgbench",
            "test": f"pgbench_{script.removesuffix('.sql')}_c{self.clients}",
            "script": script,
            "clients": self.clients,
            "secs": None if self.transactions else self.secs,
            "transactions": self.transactions,
            "tps": tps,
            "latency_avg_ms": latency,
            "wall_s": round(wall, 2),
            "client_cpu_cores": round(client_cpu / wall, 2),
            "server_cpu_cores": round(server_cpu / wall, 2),
            "busy_cores": busy_cores(cpu0, cpu1),
        }
        rec["foreign_cores"] = round(
            max(0.0, rec["busy_cores"] - rec["client_cpu_cores"] - rec["server_cpu_cores"]), 2
        )
        if tps:
            rec["client_cpu_us_per_tx"] = round(1e6 * client_cpu / (tps * wall), 1)
            rec["server_cpu_us_per_tx"] = round(1e6 * server_cpu / (tps * wall), 1)
        if tps is None:
            rec["error"] = text[-500:]
        return rec


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--database-url",
        default=DEFAULT_URL,
        help="server to use (only host/port/user/password are taken)",
    )
    ap.add_argument("--pgbench-db", default=DEFAULT_DB)
    ap.add_argument("--secs", type=int, default=15)
    ap.add_argument("--transactions", type=int, default=None, help="per client, instead of --secs")
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--scripts", default=",".join(SCRIPTS))
    a = smoke.parse(ap, {"transactions": 50})
    anchor = Anchor(a.database_url, a.pgbench_db, a.secs, a.clients, transactions=a.transactions)
    anchor.setup()
    try:
        for rep in range(1, a.reps + 1):
            for script in a.scripts.split(","):
                print(json.dumps({"rep": rep, **anchor.run(script)}), flush=True)
    finally:
        anchor.close()


if __name__ == "__main__":
    main()
