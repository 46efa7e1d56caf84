"""Roles, their django-q2 clusters and the cluster configuration (D-9, K-8).

Pure: builds the Q_CLUSTER setting from the typed config, so settings.py and tests share
it. Each role has its own queue (cluster name) so a task sent to one role is never taken
by another; `retry` always exceeds the longest run a task can take inside the cluster
(otherwise django-q2's ORM broker hands a still-running task out a second time).

The roles are the driver, the three built-in worker groups and every group the
deployment declares (`jobs.core.groups`): `worker-<group>` each.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from jobs.core.groups import BUILTIN_GROUPS, GroupsError, is_group_name
from jobs.core.groups import parse as parse_groups
from jobs.core.names import group_of_cluster, worker_cluster
from jobs.core.timing import CODEX_LEASE_CEILING_MS, TimingSettings, concurrency_for

GROUPS = BUILTIN_GROUPS  # the built-in worker groups; `group_names` adds the declared
ROLE_CLUSTERS = {
    "driver": "driver",
    "chat": "worker-chat",
    "control": "worker-control",
    "codex": "worker-codex",
}


class UnknownRole(ValueError):
    pass


def normalize_role(value: str, groups: tuple[str, ...] | None = None) -> str:
    """`driver`, a worker group or its `worker-` form -> the cluster name. `groups`: the
    groups that exist (built-in and declared); None accepts any well-formed group name
    (before Django starts, when the declared groups are not known yet)."""
    name = value.strip()
    if name in ROLE_CLUSTERS:
        return ROLE_CLUSTERS[name]
    if name in ROLE_CLUSTERS.values():
        return name
    group = group_of_cluster(name) or name
    if (groups is None and is_group_name(group)) or (groups is not None and group in groups):
        return worker_cluster(group)
    known = ", ".join(["driver", *(groups or GROUPS)])
    raise UnknownRole(f"unknown role {value!r}; expected one of {known} (or worker-<group>)")


def role_names(timing: TimingSettings) -> tuple[str, ...]:
    """`driver` and every worker group, as `runworker --role` and runstack name them."""
    return ("driver", *timing.group_names())


@cache  # on every send: a handful of names per process
def is_cluster(cluster: str) -> bool:
    """The driver's cluster or a worker group's, declared or not: a job routed to a group
    no longer declared still gets its task, which waits for a runworker of the group."""
    return cluster == "driver" or is_group_name(group_of_cluster(cluster))


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
    try:  # the groups declared in the environment; a settings block's, the command knows
        declared = parse_groups(environ.get("RECEIPT_WORKER_GROUPS") or "")
        known = (*BUILTIN_GROUPS, *(group.name for group in declared))
        environ["Q_CLUSTER_NAME"] = normalize_role(role or "", known)
    except (UnknownRole, GroupsError):
        return


def cluster_for_group(group: str) -> str:
    if not is_group_name(group):
        raise UnknownRole(f"unknown worker group {group!r}")
    return worker_cluster(group)


def _longest_run_s(cluster: str, timing: TimingSettings) -> int:
    """Upper bound of one task's run time in `cluster`, in seconds."""
    if cluster == "driver":
        return 120
    group = group_of_cluster(cluster)
    declared = timing.declared(group)
    longest_lease = max(
        timing.job_lease_ms,
        timing.codex_job_lease_ms,
        timing.factory_control_job_lease_ms,
        CODEX_LEASE_CEILING_MS if group == "codex" else 0,
        (declared.lease_ms or 0) if declared is not None else 0,
    )
    return math.ceil(longest_lease / 1000) + 60


def connections_per_runworker(role: str, timing: TimingSettings) -> int:
    """PostgreSQL connections one `runworker --role <role>` holds: one per worker
    process, plus its pusher, maintenance loops and lease keeper (see runworker)."""
    group = "driver" if role == "driver" else group_of_cluster(normalize_role(role)) or role
    return concurrency_for(group, timing) + 3


def connection_budget(timing: TimingSettings, *, runworkers_per_role: int = 1) -> int:
    """Connections the runworkers hold with `runworkers_per_role` of each role (the
    driver and every worker group, declared ones included): add the API's pools."""
    return runworkers_per_role * sum(
        connections_per_runworker(role, timing) for role in role_names(timing)
    )


def cluster_config(
    *, timing: TimingSettings, broker_url: str | None, poll_s: float
) -> dict[str, Any]:
    """The Q_CLUSTER setting for every process (API, roles, tests)."""
    alt: dict[str, dict[str, Any]] = {}
    for role in role_names(timing):
        cluster = normalize_role(role)
        group = "driver" if role == "driver" else role
        workers = concurrency_for(group, timing)
        timeout = _longest_run_s(cluster, timing)
        # each worker's next task waiting (two at most): a worker that finishes a job then
        # finds it and sends the completion with its begin (jobs.runtime.lookahead)
        queue_limit = 2 if workers >= 2 else 1
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
