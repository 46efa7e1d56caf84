"""The connection budget (T-7): a runworker holds at most its concurrency + 3 PostgreSQL
connections, counted from the operating system (every TCP connection to the server from
any process of the runworker's tree), sampled all through an objective's run; two
runworkers per role; no connection error anywhere in their logs.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

import psutil
import pytest

from jobs.core.names import group_of_cluster
from jobs.core.timing import TimingSettings, concurrency_for
from jobs.runtime.roles import normalize_role
from receipt_site.config import load
from tests import conftest
from tests.runtime.test_factory import ROLES, create, factory, start, until  # noqa: F401

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]


def _connections(pid: int, port: int) -> int:
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in tree:
        try:
            total += sum(
                1
                for c in proc.net_connections(kind="tcp")
                if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"
            )
        except psutil.NoSuchProcess:
            continue
    return total


def test_every_runworker_stays_within_concurrency_plus_three(factory, tmp_path):  # noqa: F811
    port = urlsplit(conftest.test_database_url()).port or 5432
    timing = TimingSettings.from_config(load(factory.env))
    names = []
    for role in ROLES:
        start(factory, role)
        factory.start(role, name=f"{role}-2")
        names += [role, f"{role}-2"]
    # the group of a role's worker cluster, or the driver's
    budget = {
        name: concurrency_for(
            group_of_cluster(normalize_role(name.split("-")[0])) or "driver", timing
        )
        + 3
        for name in names
    }
    peak = dict.fromkeys(names, 0)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            for name in names:
                peak[name] = max(peak[name], _connections(factory.procs[name].pid, port))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        tasks = [
            {"id": f"t{i}", "title": f"T{i}", "command": "echo hello; sleep 0.5"} for i in range(6)
        ]
        oid = create(title="Budget", tasks=tasks, policy={"maxActiveTasks": 3})
        state = until(oid, "completed", "blocked", "failed", timeout=120)
    finally:
        done.set()
        sampler.join(5)
    assert state.status == "completed", state.blocked_reason
    print("connection peaks", peak, "budgets", budget)
    assert all(peak[name] > 0 for name in names), peak  # the counting sees real connections
    over = {name: (peak[name], budget[name]) for name in names if peak[name] > budget[name]}
    assert not over, f"connections above concurrency + 3: {over}"
    for name in names:
        log = (tmp_path / f"{name}.log").read_text(errors="replace")
        assert "too many clients" not in log and "OperationalError" not in log, factory.log(name)
