"""The names the runtime gives delivery promises and worker clusters, in Python and as
the SQL expressions that compute the same names inside a statement.

Both forms are rendered here from the same parts, so the driver's two paths (decided in
Python, or by the database in one statement) can never name a promise or a cluster
differently. Pure: strings only, no Django, no I/O.
"""

from __future__ import annotations

ATTEMPT_PART = ":attempt:"  # <jobId>:attempt:<n>
DISPATCH_PART = ":dispatch:"  # ...:dispatch:<driver promise id>, under a non-default key
RECOVERY_PART = ":recovery:"  # <jobId>:recovery:<g>, a delivery generation (D-3)
WORKER_CLUSTER_PREFIX = "worker-"  # worker-<group>


def execute_promise_id(job_id: str, attempt: int, driver_promise_id: str) -> str:
    """The execute promise of a job's attempt; a driver promise under a key other than
    the job's own (a redrive, a recovery generation) names itself in it."""
    base = f"{job_id}{ATTEMPT_PART}{attempt}"
    return base if driver_promise_id == job_id else f"{base}{DISPATCH_PART}{driver_promise_id}"


def execute_promise_id_sql(job: str, attempt: str, driver: str) -> str:
    """`execute_promise_id` as a SQL expression of the columns or expressions given."""
    return (
        f"{job} || '{ATTEMPT_PART}' || {attempt} || "
        f"CASE WHEN {driver} = {job} THEN '' ELSE '{DISPATCH_PART}' || {driver} END"
    )


def recovery_generation_id(job_id: str, generation: int) -> str:
    """The driver promise of a job's delivery generation `generation` (D-3)."""
    return f"{job_id}{RECOVERY_PART}{generation}"


def worker_cluster(group: str) -> str:
    """The django-q2 cluster (and broker channel suffix) of a worker group."""
    return f"{WORKER_CLUSTER_PREFIX}{group}"


def worker_cluster_sql(group: str) -> str:
    """`worker_cluster` as a SQL expression of the column or expression given."""
    return f"'{WORKER_CLUSTER_PREFIX}' || {group}"


def group_of_cluster(cluster: str) -> str | None:
    """The worker group a cluster serves (None for the driver or anything else)."""
    if cluster.startswith(WORKER_CLUSTER_PREFIX):
        return cluster.removeprefix(WORKER_CLUSTER_PREFIX)
    return None
