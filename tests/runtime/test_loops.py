"""T-8, L-6: time-critical loops are never queued behind slow ones.

A runworker's maintenance loops (retention, redrive, sweeps) share one thread; lease
expiry and gone-holder release run on the lease keeper's thread instead. Here a
runworker works through a retention pass over 10,000 settled streams (slowed further by
a pause after each batch) while another runworker, holding a running job, is SIGKILLed:
the job's lease is released within 30 s, while the retention pass still runs.
"""

from __future__ import annotations

import dataclasses
import secrets
import signal
import time
from functools import partial

import pytest
from django.conf import settings

from jobs.core.reducer import reduce
from jobs.core.vocabulary import job_stream
from jobs.models import Job, LoopRun, WorkerProcess
from jobs.projector import row_for
from receipts import store
from receipts.core.chain import Receipt, base36, seal
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow
from tests.conftest import BACKEND, wait_for
from tests.runtime.helpers import enqueue, wait_status

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.django_db(transaction=True),
    # Which thread a loop runs on does not depend on the database: one leg is enough, and
    # the SQLite leg's single write lock makes the retention pass the harder neighbour.
    pytest.mark.skipif(BACKEND != "sqlite", reason="runs once, in the SQLite leg"),
]

DEFAULT_LEASE_MS = 300_000  # production's: only the release can end this attempt early
DAY_MS = 86_400_000
STREAMS = 10_000
RELEASED_WITHIN_S = 30  # T-8


def settled_streams(n: int, *, at_ms: int) -> None:
    """`n` canceled job streams at `at_ms`, written in bulk: each a real sealed chain
    (enqueued, canceled) with its stream row and the job row its fold gives."""
    receipts, streams, jobs = [], [], []
    for _ in range(n):
        job_id = f"{base36(at_ms)}-{secrets.token_hex(8)}"
        stream = job_stream(job_id)
        context = {"jobId": job_id, "organizationId": "org-1"}
        chain: list[Receipt] = []
        for body in (
            {
                "type": "job.enqueued",
                "jobId": job_id,
                "agentId": "factory",
                "lane": "collect",
                "payload": {
                    "kind": "factory.run",
                    "authContext": {"userId": "u-1", "organizationId": "org-1"},
                },
                "maxAttempts": 2,
                "sessionKey": None,
                "singletonMode": "allow",
                "leaseMs": DEFAULT_LEASE_MS,
            },
            {"type": "job.canceled", "jobId": job_id, "reason": "old", "by": "test"},
        ):
            chain.append(
                seal(
                    stream=stream,
                    prev=chain[-1].hash if chain else None,
                    body=body,
                    ts=at_ms,
                    random_hex16=secrets.token_hex(8),
                    context=context,
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
        assert state is not None and state.status == "canceled"
        streams.append(
            StreamRow(
                name=stream, head=chain[-1].hash, receipt_count=2, last_ts=at_ms, updated_at=at_ms
            )
        )
        jobs.append(Job(**row_for(state)))
    StreamRow.objects.bulk_create(streams, batch_size=2000)
    ReceiptRow.objects.bulk_create(receipts, batch_size=2000)
    Job.objects.bulk_create(jobs, batch_size=2000)


def retention_runs(process_pid: int) -> LoopRun | None:
    process = WorkerProcess.objects.filter(pid=process_pid).first()
    if process is None:
        return None
    return LoopRun.objects.filter(loop="retention", process_id=process.pk).first()


def test_a_gone_holder_is_released_while_a_retention_pass_runs(stack, monkeypatch):
    monkeypatch.setattr(
        settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, job_lease_ms=DEFAULT_LEASE_MS)
    )
    stack.env["JOB_LEASE_MS"] = str(DEFAULT_LEASE_MS)
    driver = stack.start("driver", name="driver")
    holder = stack.start("chat", name="holder")
    job = enqueue("test-sleep", sleepMs=600_000)
    wait_for(lambda: stack.marks("start", job.job_id), timeout=30, message="the job to start")
    for pid in (driver.pid, holder.pid):  # their startup retention passes are over
        wait_for(partial(retention_runs, pid), timeout=30, message="startup retention")
    driver.send_signal(signal.SIGTERM)  # only the runworker under test may release the lease
    driver.wait(timeout=30)
    settled_streams(STREAMS, at_ms=int(time.time() * 1000) - 40 * DAY_MS)

    pruner = stack.start("control", name="pruner", RECEIPT_FAULTS="retention_batch")
    wait_for(lambda: stack.marks("fault"), timeout=60, message="the retention pass's first batch")
    stack.kill("holder")
    killed_at = time.time()
    released = wait_status(job.job_id, "queued", "failed", timeout=RELEASED_WITHIN_S)
    assert time.time() - killed_at <= RELEASED_WITHIN_S
    assert retention_runs(pruner.pid) is None, "released only after the retention pass"
    [expired] = [r for r in store.read(job.stream) if r.type == "job.lease_expired"]
    assert released.attempt == 1 and "is gone" in expired.body["reason"]
    assert Job.objects.filter(status="canceled").count() < STREAMS  # the pass is pruning
