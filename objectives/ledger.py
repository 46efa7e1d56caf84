"""The durable ledger beside the receipts (W-1 .. W-3).

Rows follow queue mutations of kinds whose contract names a durable workflow
(`factory.run` -> `run`, `factory.objective.control` -> `objective-control`) or a durable
activity (`factory.task.run`). `on_job_mutation` is a queue mutation listener: it runs
after the receipt commit and is best-effort, so a failure logs `[durable <label>]
<message>` and never fails or rolls back the receipt mutation. Queue commands pass
straight through the queue and are only recorded here as signals, never waited on.
Ledger rows are bookkeeping: the receipt chain stays the authoritative state.

Keys (W-2): `factory/objective/<objectiveId>/control`,
`factory/run/<urlencoded stream>/<runId>`, `factory/codex/<jobId>`.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

from django.db import connection, transaction

from jobs.core.contracts import contract_for
from jobs.core.state import JobState
from objectives.core.vocabulary import run_stream
from objectives.models import Activity, ActivityAttempt, Signal, Workflow
from observability.logs import log_event

logger = logging.getLogger("receipt.durable")

_WORKFLOW_STATUS = {
    "queued": "pending",
    "leased": "running",
    "running": "running",
    "completed": "completed",
    "failed": "failed",
    "canceled": "canceled",
}
_ACTIVITY_STATUS = _WORKFLOW_STATUS


def control_key(objective_id: str) -> str:
    return f"factory/objective/{objective_id}/control"


def run_id_of(job: JobState) -> str:
    payload = job.payload if isinstance(job.payload, dict) else {}
    run_id = payload.get("runId")
    return run_id if isinstance(run_id, str) and run_id else job.job_id


def run_key(stream: str, run_id: str) -> str:
    return f"factory/run/{quote(stream, safe='')}/{run_id}"


def activity_key(job_id: str) -> str:
    return f"factory/codex/{job_id}"


def workflow_key_for(job: JobState) -> str | None:
    contract = contract_for(job.kind)
    if contract is None or contract.durable_workflow is None:
        return None
    if contract.durable_workflow == "objective-control":
        return control_key(job.objective_id) if job.objective_id else None
    run_id = run_id_of(job)
    return run_key(run_stream(run_id), run_id)


def on_job_mutation(kind: str, job: JobState, body: dict[str, Any]) -> None:
    contract = contract_for(job.kind)
    if contract is None or not (contract.durable_workflow or contract.durable_activity):
        return
    label = contract.durable_workflow or "codex"
    try:
        if contract.durable_workflow:
            _workflow(job, kind, body, contract.durable_workflow)
        if contract.durable_activity:
            _activity(job, kind, body)
    except Exception as error:  # W-3: best-effort, after the receipt commit
        log_event(
            logger,
            "durable.write_failed",
            f"[durable {label}] {error}",
            level=logging.WARNING,
            jobId=job.job_id,
            receiptType=kind,
        )


_UPSERT = """
INSERT INTO objectives_workflow AS w (key, name, status, revision, input, metadata, output,
    error, objective_id, job_id, job_created_at, position, created_at, updated_at, completed_at)
VALUES (%s, %s, %s, 1, {j}, {j}, {j}, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (key) DO UPDATE SET
    status = excluded.status,
    revision = CASE WHEN w.job_id = excluded.job_id THEN w.revision ELSE w.revision + 1 END,
    input = excluded.input, metadata = excluded.metadata, output = excluded.output,
    error = excluded.error, job_id = excluded.job_id, job_created_at = excluded.job_created_at,
    position = excluded.position, updated_at = excluded.updated_at,
    completed_at = excluded.completed_at
WHERE (w.job_created_at, w.job_id, w.position)
    < (excluded.job_created_at, excluded.job_id, excluded.position)
"""
# Ledger rows are bookkeeping beside the authoritative receipts (W-3: best-effort): on
# PostgreSQL their commits do not wait for the disk. A server crash may lose the last
# few, as a failed write would; a row catches up at its job's next mutation.
_NO_FLUSH = "SET LOCAL synchronous_commit TO off"
# Heartbeats, progress and consumed commands change nothing a workflow row shows unless
# the attempt or worker changed: this process skips re-writing what it wrote last.
_QUIET = frozenset({"job.heartbeat", "job.progress", "queue.command.consumed"})
_last_written: dict[str, tuple[Any, ...]] = {}
_LAST_WRITTEN_MAX = 10_000


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _workflow(job: JobState, kind: str, body: dict[str, Any], name: str) -> None:
    """One upsert per mutation (no read): the row moves only forward, ordered by (job
    created at, job id, receipts of the job); a new job of the key is a new revision."""
    key = workflow_key_for(job)
    if key is None:
        return
    now = job.updated_at
    if kind == "queue.command":
        Signal.objects.create(
            workflow_key=key,
            name=str(body.get("command")),
            job_id=job.job_id,
            payload=body.get("payload"),
            created_at=now,
        )
        return
    shown = (job.job_id, job.status, job.attempt, job.worker_id)
    if kind in _QUIET and _last_written.get(key) == shown:
        return
    metadata = {
        "jobId": job.job_id,
        "attempt": job.attempt,
        "workerId": job.worker_id,
        "agentId": job.agent_id,
        "kind": job.kind,
    }
    error = job.last_error or job.cancel_reason if job.status in ("failed", "canceled") else None
    params = [
        key,
        name,
        _WORKFLOW_STATUS[job.status],
        _dump(job.payload),
        _dump(metadata),
        _dump(job.result if job.status == "completed" else None),
        error,
        job.objective_id,
        job.job_id,
        job.created_at,
        job.receipt_count,
        now,
        now,
        now if job.is_terminal else None,
    ]
    upsert = _UPSERT.format(j="%s::jsonb" if connection.vendor == "postgresql" else "%s")
    with connection.cursor() as cursor:  # one round trip: both run in one implicit transaction
        if connection.vendor == "postgresql" and not connection.in_atomic_block:
            upsert = f"{_NO_FLUSH}; {upsert}"
        cursor.execute(upsert, params)
    if len(_last_written) > _LAST_WRITTEN_MAX:
        _last_written.clear()
    _last_written[key] = shown


def _activity(job: JobState, kind: str, body: dict[str, Any]) -> None:
    """The activity row and its attempt rows, from the job's state after the write (a write
    may append several receipts, e.g. a lease with its first heartbeat)."""
    key, now = activity_key(job.job_id), job.updated_at
    own_transaction = not connection.in_atomic_block  # never relax a caller's commit
    with transaction.atomic():
        if own_transaction and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(_NO_FLUSH)
        row, _ = Activity.objects.select_for_update().get_or_create(
            key=key,
            defaults={
                "job_id": job.job_id,
                "objective_id": job.objective_id,
                "created_at": now,
                "updated_at": now,
            },
        )
        if job.receipt_count <= row.position:
            return  # already applied a later mutation of this job
        row.position = job.receipt_count
        row.status = _ACTIVITY_STATUS[job.status]
        row.attempts = job.attempt
        row.updated_at = now
        if job.holds_lease:
            row.active_attempt, row.active_owner = job.attempt, job.worker_id
            row.last_heartbeat = now
        else:
            row.active_attempt = row.active_owner = None
        if kind == "job.progress":
            row.checkpoint_revision += 1
            row.checkpoint_output = body.get("progress")
            row.checkpoint_metadata = {
                "attempt": body.get("attempt"),
                "workerId": body.get("workerId"),
                "at": now,
            }
        if job.status == "completed":
            row.checkpoint_output = job.result
        row.save()
        _attempts(key, job, now)


def _attempts(key: str, job: JobState, now: int) -> None:
    if job.holds_lease:
        ActivityAttempt.objects.get_or_create(
            activity_key=key,
            attempt=job.attempt,
            defaults={"owner": job.worker_id, "status": "running", "started_at": now},
        )
    open_rows = ActivityAttempt.objects.filter(activity_key=key, ended_at__isnull=True)
    for attempt in open_rows:
        if job.holds_lease and attempt.attempt == job.attempt:
            continue
        status = "failed"
        if job.is_terminal and attempt.attempt == job.attempt:
            status = _ACTIVITY_STATUS[job.status]
        attempt.status = status
        attempt.error = (
            None if status == "completed" else (job.last_error or job.cancel_reason or "superseded")
        )
        attempt.ended_at = now
        attempt.save(update_fields=["status", "error", "ended_at"])


def rows_for_job(job: JobState) -> dict[str, Any]:
    """Ledger rows about one job, for the admin (W-3: shown beside the receipts): its
    workflow and the signals this job sent it, its activity and the activity's attempts."""
    key = activity_key(job.job_id)
    workflow = workflow_key_for(job)
    return {
        "workflow": Workflow.objects.filter(key=workflow).values().first() if workflow else None,
        "signals": list(
            Signal.objects.filter(workflow_key=workflow, job_id=job.job_id)
            .order_by("-id")
            .values()[:50]
        )
        if workflow
        else [],
        "activity": Activity.objects.filter(key=key).values().first(),
        "attempts": list(
            ActivityAttempt.objects.filter(activity_key=key).order_by("attempt").values()
        ),
    }


def rows_for_objective(objective_id: str) -> dict[str, Any]:
    key = control_key(objective_id)
    return {
        "workflow": Workflow.objects.filter(key=key).values().first(),
        "signals": list(Signal.objects.filter(workflow_key=key).order_by("-id").values()[:50]),
        "activities": list(
            Activity.objects.filter(objective_id=objective_id).order_by("created_at").values()[:200]
        ),
    }
