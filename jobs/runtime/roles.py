"""Roles, their django-q2 clusters and the cluster configuration (D-9, K-8).

Pure: builds the Q_CLUSTER setting from the typed config, so settings.py and tests share
it. Each role has its own queue (cluster name) so a task sent to one role is never taken
by another; `retry` always exceeds the longest run a task can take inside the cluster
(otherwise django-q2's ORM broker hands a still-running task out a second time).
"""

from __future__ import annotations

import math
from typing import Any

from jobs.core.names import group_of_cluster, worker_cluster
from jobs.core.timing import CODEX_LEASE_CEILING_MS, TimingSettings, concurrency_for

GROUPS = ("chat", "control", "codex")
ROLE_CLUSTERS = {
    "driver": "driver",
    "chat": "worker-chat",
    "control": "worker-control",
    "codex": "worker-codex",
}
ROLE_NAMES = ("api", "driver", "worker-chat", "worker-control", "worker-codex")


class UnknownRole(ValueError):
    pass


def normalize_role(value: str) -> str:
    """`driver`, `chat`, `control`, `codex` or their `worker-` forms -> the cluster name."""
    name = value.strip()
    if name in ROLE_CLUSTERS:
        return ROLE_CLUSTERS[name]
    if name in ROLE_CLUSTERS.values():
        return name
    known = ", ".join([*ROLE_CLUSTERS, *ROLE_CLUSTERS.values()])
    raise UnknownRole(f"unknown role {value!r}; expected one of {known}")


def preset_cluster_name(argv: list[str], environ: Any) -> None:
    """Before Django starts: name the django-q2 cluster of a `runworker` command line in
    `environ` (Q_CLUSTER_NAME), which django-q2 reads once at import. Without it the
    command must re-execute itself with the name set, importing everything twice (about
    a second of every worker's start-up). Anything it cannot read is left to the command,
    which reports it."""
    if "runworker" not in argv[1:2] or environ.get("Q_CLUSTER_NAME"):
        return
    role = environ.get("RECEIPT_PROCESS_ROLE")
    for index, arg in enumerate(argv):
        if arg == "--role" and index + 1 < len(argv):
            role = argv[index + 1]
        elif arg.startswith("--role="):
            role = arg.removeprefix("--role=")
    try:
        environ["Q_CLUSTER_NAME"] = normalize_role(role or "")
    except UnknownRole:
        return


def group_of(cluster: str) -> str | None:
    """The worker group a cluster serves (None for the driver)."""
    return group_of_cluster(cluster)


def cluster_for_group(group: str) -> str:
    if group not in GROUPS:
        raise UnknownRole(f"unknown worker group {group!r}")
    return worker_cluster(group)


def _longest_run_s(cluster: str, timing: TimingSettings) -> int:
    """Upper bound of one task's run time in `cluster`, in seconds."""
    if cluster == "driver":
        return 120
    group = group_of(cluster)
    longest_lease = max(
        timing.job_lease_ms,
        timing.codex_job_lease_ms,
        timing.factory_control_job_lease_ms,
        CODEX_LEASE_CEILING_MS if group == "codex" else 0,
    )
    return math.ceil(longest_lease / 1000) + 60


def cluster_config(
    *, timing: TimingSettings, broker_url: str | None, poll_s: float
) -> dict[str, Any]:
    """The Q_CLUSTER setting for every process (API, roles, tests)."""
    alt: dict[str, dict[str, Any]] = {}
    for role, cluster in ROLE_CLUSTERS.items():
        group = "driver" if role == "driver" else role
        workers = concurrency_for(group, timing)  # type: ignore[arg-type]
        timeout = _longest_run_s(cluster, timing)
        queue_limit = 1
        retry = timeout * (1 + math.ceil((queue_limit + 1) / workers)) + 30
        alt[cluster] = {
            "workers": workers,
            "timeout": timeout,
            "retry": retry,
            "queue_limit": queue_limit,
        }
    config: dict[str, Any] = {
        # identical in every process: `name` is django-q2's signing salt (notes §2)
        "name": "receipt",
        "ack_failures": True,  # our receipts decide retries; django-q2 never re-runs a failure
        "max_attempts": 1,
        "save_limit": -1,  # receipts are the record: no django_q_task rows for successes
        "workers": 1,
        "timeout": 180,
        "retry": 600,
        "queue_limit": 1,
        "bulk": 1,
        "poll": poll_s,
        "catch_up": False,
        "scheduler": False,
        # A recycled worker is a new fork with a new connection and nothing prepared; every
        # 500 tasks (django-q2's default) that cost a chat worker about a tenth of its
        # throughput. A leaking handler is still bounded by max_rss (KiB).
        "recycle": 10_000,
        "max_rss": 600_000,
        "guard_cycle": 0.5,
        "ALT_CLUSTERS": alt,
    }
    if broker_url:
        config["redis"] = broker_url
    else:
        config["orm"] = "default"
    return config
