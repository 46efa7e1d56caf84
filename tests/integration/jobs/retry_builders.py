"""Builders for the retry tests (issue 34 item 3): failed jobs through the queue, and many
failed job streams written in bulk."""

from __future__ import annotations

import secrets
from typing import Any

from jobs import queue
from jobs.core.reducer import reduce
from jobs.core.state import Fence
from jobs.core.vocabulary import job_stream
from jobs.models import Job
from jobs.projector import row_for
from receipts.core.chain import Receipt, base36, seal
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow

T = 1_760_000_000_000  # before the wall clock: a retry "now" always comes after it


def job_payload(
    kind: str = "factory.run", org: str | None = "org-1", objective: str | None = None
) -> dict[str, Any]:
    auth = {"userId": "u-1", **({"organizationId": org} if org else {})}
    extra = {"objectiveId": objective, "taskId": "task-1"} if objective else {}
    return {"kind": kind, "authContext": auth, **extra}


def failed_job(
    agent: str = "factory",
    kind: str = "factory.run",
    *,
    org: str | None = "org-1",
    at_ms: int = T,
    max_attempts: int = 1,
    error: str = "boom",
    objective: str | None = None,
    **options: Any,
) -> str:
    """A job whose every attempt failed through the queue, as a worker fails it."""
    job = queue.enqueue(
        agent,
        job_payload(kind, org, objective),
        now_ms=at_ms,
        max_attempts=max_attempts,
        **options,
    ).job
    for n in range(1, max_attempts + 1):
        fence = Fence(f"chat:h:{n}", n)
        assert queue.lease(job.job_id, worker_id=fence.worker_id, now_ms=at_ms + n).applied
        assert queue.fail(job.job_id, error, fence=fence, now_ms=at_ms + n).applied
    assert queue.get(job.job_id).status == "failed"
    return job.job_id


def running_job(*, at_ms: int = T) -> tuple[str, Fence]:
    job = queue.enqueue("factory", job_payload(), now_ms=at_ms).job
    fence = Fence("chat:h:1", 1)
    assert queue.lease(job.job_id, worker_id=fence.worker_id, now_ms=at_ms + 1, start=True).applied
    return job.job_id, fence


def failed_streams(n: int, *, at_ms: int = T, kind: str = "factory.run") -> list[str]:
    """`n` failed job streams written in bulk: each a real sealed chain (enqueued, leased,
    failed) with its stream row and the job row its fold gives, one settled ms apart."""
    receipts, streams, jobs = [], [], []
    for index in range(n):
        job_id = f"{base36(at_ms)}-{secrets.token_hex(8)}"
        stream = job_stream(job_id)
        ts = at_ms + index
        chain: list[Receipt] = []
        for body in (
            {
                "type": "job.enqueued",
                "jobId": job_id,
                "agentId": "factory",
                "lane": "collect",
                "payload": job_payload(kind),
                "maxAttempts": 1,
                "sessionKey": None,
                "singletonMode": "allow",
                "leaseMs": 60_000,
            },
            {
                "type": "job.leased",
                "jobId": job_id,
                "workerId": "w",
                "attempt": 1,
                "leaseUntil": ts + 60_000,
            },
            {
                "type": "job.failed",
                "jobId": job_id,
                "workerId": "w",
                "attempt": 1,
                "error": "boom",
                "noRetry": False,
                "willRetry": False,
            },
        ):
            chain.append(
                seal(
                    stream=stream,
                    prev=chain[-1].hash if chain else None,
                    body=body,
                    ts=ts,
                    random_hex16=secrets.token_hex(8),
                    context={"jobId": job_id, "organizationId": "org-1"},
                    stream_seq=len(chain) + 1,
                )
            )
        state = None
        for position, receipt in enumerate(chain, start=1):
            state = reduce(state, receipt)
            receipts.append(
                ReceiptRow(
                    stream=stream,
                    stream_seq=position,
                    receipt_id=receipt.id,
                    ts=receipt.ts,
                    prev=receipt.prev,
                    hash=receipt.hash,
                    event_type=receipt.type,
                    body=receipt.body,
                    context=receipt.context,
                )
            )
        assert state is not None and state.status == "failed"
        streams.append(
            StreamRow(name=stream, head=chain[-1].hash, receipt_count=3, last_ts=ts, updated_at=ts)
        )
        jobs.append(Job(**row_for(state)))
    StreamRow.objects.bulk_create(streams, batch_size=2000)
    ReceiptRow.objects.bulk_create(receipts, batch_size=2000)
    Job.objects.bulk_create(jobs, batch_size=2000)
    return [job.id for job in jobs]
