from __future__ import annotations

import os
import signal
import sqlite3

import psutil
from django.db import connection

from jobs import queue
from jobs.core.reducer import fold_job, reduce
from receipts import store
from tests.conftest import wait_for
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload


def enqueue(agent: str, *, job_id: str | None = None, **fields):
    options = {
        k: fields.pop(k)
        for k in ("max_attempts", "session_key", "singleton_mode", "lane")
        if k in fields
    }
    return queue.enqueue(agent, payload(**fields), job_id=job_id, **options).job


def wait_status(job_id: str, *statuses: str, timeout: float = 30.0):
    return wait_for(
        lambda: (j := queue.get(job_id)) is not None and j.status in statuses and j,
        timeout=timeout,
        message=f"job {job_id} to be {'/'.join(statuses)}",
    )


def receipt_types(job_id: str) -> list[str]:
    return [r.type for r in store.read(f"jobs/{job_id}")]


def assert_settled_once(job_id: str) -> None:
    """At most one terminal receipt, a sound chain, and the read model equal to the fold."""
    state, settled = None, 0
    for receipt in store.read(f"jobs/{job_id}"):
        before = state.is_terminal if state else False
        state = reduce(state, receipt)
        if state is not None and state.is_terminal and not before:
            settled += 1
    assert settled <= 1
    assert fold_job(store.read(f"jobs/{job_id}")) == queue.get(job_id)
    assert_read_model_matches_receipts(job_id)


def freeze_outside_transactions(pid: int) -> None:
    """SIGSTOP `pid` at a moment it has no transaction open.

    A process frozen inside one keeps its locks (on SQLite the database's only write
    lock) and stalls every writer: a stuck lock holder, not the alive-but-silent holder
    a test of fencing means. Freeze, look, and thaw to try again if it was inside one."""

    def frozen_idle() -> bool:
        os.kill(pid, signal.SIGSTOP)
        if not _in_transaction(pid):
            return True
        os.kill(pid, signal.SIGCONT)
        return False

    wait_for(frozen_idle, timeout=30, message=f"process {pid} to be frozen outside transactions")


def _in_transaction(pid: int) -> bool:
    if connection.vendor == "postgresql":
        ports = [c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp") if c.raddr]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s) "
                "AND xact_start IS NOT NULL",
                [ports],
            )
            return bool(cursor.fetchone()[0])
    probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0.2)
    try:
        probe.execute("BEGIN IMMEDIATE")  # only possible while no one holds the write lock
        probe.rollback()
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        probe.close()
