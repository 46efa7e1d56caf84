"""Worker registry (D-11): each runworker process records itself and beats; a process
unseen for three beats is shown as gone."""

from __future__ import annotations

import os
import socket
from typing import Any

from jobs.models import Job, WorkerProcess

BEAT_MS = 5_000
GONE_AFTER_BEATS = 3


def process_id(role: str) -> str:
    return f"{role}:{socket.gethostname()}:{os.getpid()}"


def register(*, role: str, group: str | None, concurrency: int, now_ms: int,
             info: dict[str, Any] | None = None) -> str:
    pid = process_id(role)
    WorkerProcess.objects.update_or_create(pk=pid, defaults={
        "role": role, "group": group, "host": socket.gethostname(), "pid": os.getpid(),
        "concurrency": concurrency, "started_at": now_ms, "last_seen": now_ms,
        "stopped_at": None, "current_attempts": [], "info": info or {}})
    return pid


def current_attempts(group: str | None, child_pids: list[int]) -> list[dict[str, Any]]:
    """Attempts held by this host's worker children (worker ids embed host and pid)."""
    if group is None or not child_pids:
        return []
    prefixes = tuple(f"{group}:{socket.gethostname()}:{pid}" for pid in child_pids)
    rows = (Job.objects.filter(worker_group=group, status__in=("leased", "running"))
            .values_list("id", "attempt", "state")[:500])
    found = []
    for job_id, attempt, state in rows:
        worker = state.get("workerId") or ""
        if worker.startswith(prefixes):
            found.append({"jobId": job_id, "attempt": attempt, "workerId": worker})
    return found


def beat(pid: str, *, now_ms: int, attempts: list[dict[str, Any]]) -> None:
    WorkerProcess.objects.filter(pk=pid).update(last_seen=now_ms, current_attempts=attempts)


def stopped(pid: str, *, now_ms: int) -> None:
    WorkerProcess.objects.filter(pk=pid).update(stopped_at=now_ms, last_seen=now_ms,
                                                current_attempts=[])


def live(*, now_ms: int, role: str | None = None, group: str | None = None) -> list[WorkerProcess]:
    rows = WorkerProcess.objects.filter(last_seen__gte=now_ms - GONE_AFTER_BEATS * BEAT_MS,
                                        stopped_at__isnull=True)
    if role:
        rows = rows.filter(role=role)
    if group:
        rows = rows.filter(group=group)
    return list(rows.order_by("role", "id"))


def summary(*, now_ms: int) -> list[dict[str, Any]]:
    """Processes seen recently (live or gone), for /healthz and the dashboard."""
    cutoff = now_ms - 20 * GONE_AFTER_BEATS * BEAT_MS
    rows = WorkerProcess.objects.filter(last_seen__gte=cutoff).order_by("role", "id")[:200]
    out = []
    for row in rows:
        alive = row.stopped_at is None and row.last_seen >= now_ms - GONE_AFTER_BEATS * BEAT_MS
        out.append({"id": row.id, "role": row.role, "group": row.group, "host": row.host,
                    "pid": row.pid, "concurrency": row.concurrency, "startedAt": row.started_at,
                    "lastSeen": row.last_seen, "live": alive,
                    "currentAttempts": row.current_attempts, "info": row.info})
    return out
