"""Worker registry (D-11): each runworker process records itself and beats; a process
unseen for three beats is gone, and the leases of its attempts are released
(`jobs.runtime.recovery.release_gone_holders`).

Worker ids (D-10) name the runworker's main pid, `<group>:<host>:<runworker pid>`, for
every worker process of that runworker: the registry row is then exactly the holder of
those leases.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from django.db import models

from jobs import selectors
from jobs.core.state import Fence
from jobs.models import WorkerProcess

BEAT_MS = 5_000
GONE_AFTER_BEATS = 3


def process_id(role: str) -> str:
    return f"{role}:{socket.gethostname()}:{os.getpid()}"


def register(
    *,
    role: str,
    group: str | None,
    concurrency: int,
    now_ms: int,
    info: dict[str, Any] | None = None,
) -> str:
    pid = process_id(role)
    WorkerProcess.objects.update_or_create(
        pk=pid,
        defaults={
            "role": role,
            "group": group,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "concurrency": concurrency,
            "started_at": now_ms,
            "last_seen": now_ms,
            "stopped_at": None,
            "released_at": None,
            "current_attempts": [],
            "info": info or {},
        },
    )
    return pid


RUNWORKER_PID_ENV = "RECEIPT_RUNWORKER_PID"


def holder_pid() -> int:
    """The pid worker ids name: the runworker's main process, else this process."""
    value = os.environ.get(RUNWORKER_PID_ENV, "")
    return int(value) if value.isdigit() else os.getpid()


def worker_prefix(row: WorkerProcess) -> str:
    return f"{row.group}:{row.host}:{row.pid}"


def _holds(worker_id: str, prefix: str) -> bool:
    return worker_id == prefix or worker_id.startswith(prefix + ":")


def holds(worker_id: str, row: WorkerProcess) -> bool:
    """Whether a lease's worker id names this runworker."""
    return row.group is not None and _holds(worker_id, worker_prefix(row))


def attempts_held_by(row: WorkerProcess, *, limit: int = 2000) -> list[tuple[str, Fence]]:
    """Leased or running jobs whose worker id names this runworker (bounded by capacity:
    a group's active leases)."""
    if row.group is None:
        return []
    prefix = worker_prefix(row)
    return [
        (job_id, Fence(worker, attempt))
        for job_id, attempt, worker in selectors.held_in_group(row.group, limit=limit)
        if worker and _holds(worker, prefix)
    ]


def gone_unreleased(*, now_ms: int, limit: int = 50) -> list[WorkerProcess]:
    """Worker runworkers unseen for three beats (or stopped) whose leases were not yet
    released."""
    rows = (
        WorkerProcess.objects.filter(group__isnull=False, released_at__isnull=True)
        .filter(
            models.Q(stopped_at__isnull=False)
            | models.Q(last_seen__lt=now_ms - GONE_AFTER_BEATS * BEAT_MS)
        )
        .order_by("last_seen")[:limit]
    )
    return list(rows)


def mark_released(row: WorkerProcess, *, now_ms: int) -> None:
    WorkerProcess.objects.filter(pk=row.pk).update(released_at=now_ms)


def beat(pid: str, *, now_ms: int, attempts: list[dict[str, Any]]) -> None:
    # A process that beats again after being declared gone holds new leases: watch it anew.
    WorkerProcess.objects.filter(pk=pid).update(
        last_seen=now_ms, current_attempts=attempts, released_at=None
    )


def stopped(pid: str, *, now_ms: int) -> None:
    WorkerProcess.objects.filter(pk=pid).update(
        stopped_at=now_ms, last_seen=now_ms, current_attempts=[]
    )


def live(*, now_ms: int, role: str | None = None, group: str | None = None) -> list[WorkerProcess]:
    rows = WorkerProcess.objects.filter(
        last_seen__gte=now_ms - GONE_AFTER_BEATS * BEAT_MS, stopped_at__isnull=True
    )
    if role:
        rows = rows.filter(role=role)
    if group:
        rows = rows.filter(group=group)
    return list(rows.order_by("role", "id"))


def is_live(row: WorkerProcess, *, now_ms: int) -> bool:
    return row.stopped_at is None and row.last_seen >= now_ms - GONE_AFTER_BEATS * BEAT_MS


def held_by_gone(*, now_ms: int, limit: int = 2000) -> list[dict[str, Any]]:
    """Leased or running jobs whose worker id names a registered runworker that is gone
    and not yet released: nothing finishes them until a live worker's holder release (or
    the lease) frees them.

    From the registry, not the jobs: a gone runworker whose holdings were released holds
    nothing any more (the release expired each lease, and a process that beats again is
    watched anew), so only the unreleased ones are looked at, and the jobs of each are
    read from its group's active leases. A healthy system reads one small registry query,
    whatever the number of jobs. A worker id naming no registered process (an external
    client's) is not reported: nobody knows it is gone.
    """
    gone = gone_unreleased(now_ms=now_ms)
    if not gone:
        return []
    # a live row naming the same holder (a restarted runworker reusing the pid) wins
    rivals = WorkerProcess.objects.filter(
        group__isnull=False, host__in={row.host for row in gone}, pid__in={row.pid for row in gone}
    )
    live_rows = [row for row in rivals if is_live(row, now_ms=now_ms)]
    out = []
    for row in gone:
        job_ids = sorted(
            job_id
            for job_id, fence in attempts_held_by(row, limit=limit)
            if not any(holds(fence.worker_id, live) for live in live_rows)
        )
        if job_ids:
            out.append(
                {
                    "process": row.id,
                    "lastSeen": row.last_seen,
                    "stoppedAt": row.stopped_at,
                    "jobs": len(job_ids),
                    "jobIds": job_ids[:20],
                }
            )
    return sorted(out, key=lambda entry: entry["process"])


def summary(*, now_ms: int) -> list[dict[str, Any]]:
    """Processes seen recently (live or gone), for /healthz and the dashboard."""
    cutoff = now_ms - 20 * GONE_AFTER_BEATS * BEAT_MS
    rows = WorkerProcess.objects.filter(last_seen__gte=cutoff).order_by("role", "id")[:200]
    out = []
    for row in rows:
        alive = is_live(row, now_ms=now_ms)
        out.append(
            {
                "id": row.id,
                "role": row.role,
                "group": row.group,
                "host": row.host,
                "pid": row.pid,
                "concurrency": row.concurrency,
                "startedAt": row.started_at,
                "lastSeen": row.last_seen,
                "live": alive,
                "currentAttempts": row.current_attempts,
                "info": row.info,
            }
        )
    return out
