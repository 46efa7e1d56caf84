"""A PostgreSQL cluster with a fresh `initdb`'s settings, for figures that compare systems.

A shared development server is often tuned (this machine's 5432 runs with autovacuum off)
and tuning favours some systems over others: without autovacuum's ANALYZE, a table
created empty keeps the planner's empty-table guesses, which matter to one system's plans
and not another's. So `bench/run_delivery` measures every system on a cluster of its own
by default, left as `initdb` made it (only where it listens differs), like the peers'
harness. Its data directory persists across runs under /tmp; `stop()` shuts it down.
BENCH_DEFAULT_PG_ROOT and BENCH_DEFAULT_PG_PORT move it; BENCH_DEFAULT_PG_OPTIONS adds server
options where no figure is taken (tests/bench/test_smoke.py: a throwaway cluster, fsync off).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(os.environ.get("BENCH_DEFAULT_PG_ROOT", "/tmp/receipt-bench-pg"))
PORT = int(os.environ.get("BENCH_DEFAULT_PG_PORT", "55433"))
OPTIONS = os.environ.get("BENCH_DEFAULT_PG_OPTIONS", "")


def _bin_dir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl is None:
        raise SystemExit("initdb/pg_ctl not found: install PostgreSQL's server programs")
    return Path(pg_ctl).parent


def _run(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(_bin_dir() / program), *args]
    if os.geteuid() == 0:  # initdb and postgres refuse to run as root
        command = ["runuser", "-u", "postgres", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def url(database: str) -> str:
    return f"postgres://postgres@127.0.0.1:{PORT}/{database}"


def start() -> str:
    """Start the cluster (creating it the first time); return its server's settings that
    differ from their built-in defaults, for the report."""
    data = ROOT / "data"
    if not (data / "PG_VERSION").exists():
        ROOT.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(ROOT, "postgres")
        made = _run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        if made.returncode != 0:
            raise SystemExit(f"initdb failed: {made.stderr.strip()}")
    if _run("pg_ctl", "-D", str(data), "status").returncode != 0:
        options = f"-c listen_addresses=127.0.0.1 -p {PORT} -c unix_socket_directories={ROOT}"
        options += f" {OPTIONS}" if OPTIONS else ""
        started = _run(
            "pg_ctl", "-D", str(data), "-l", str(ROOT / "server.log"), "-w", "-t", "60",
            "-o", options, "start",
        )  # fmt: skip
        if started.returncode != 0:
            raise SystemExit(f"pg_ctl start failed: {started.stderr.strip()}")
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(url("postgres"), connect_timeout=2) as conn:
                rows = conn.execute(
                    "SELECT name || '=' || setting FROM pg_settings WHERE source "
                    "NOT IN ('default', 'override', 'client', 'session') "
                    "AND name NOT LIKE 'lc\\_%%' AND name NOT IN ('port', 'listen_addresses', "
                    "'unix_socket_directories', 'DateStyle', 'TimeZone', 'log_timezone', "
                    "'default_text_search_config', 'dynamic_shared_memory_type') "
                    "ORDER BY name"
                ).fetchall()
            return ", ".join(r[0] for r in rows)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def stop() -> None:
    data = ROOT / "data"
    if (data / "PG_VERSION").exists():
        _run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
