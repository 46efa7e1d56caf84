"""`factory.task.monitor` on `factory-monitor` (O-9).

While its task job runs it records `monitor.checkpoint` receipts (liveness, last
progress, output tails) every RECEIPT_FACTORY_MONITOR_INTERVAL_MS (10 s); it records a
last one and ends when the task job settles. While the task job waits in the queue
(not started yet, or requeued for a retry) it only watches: a checkpoint would say
nothing new and move the objective's head every 10 s. A monitor never outlives its own
execution timeout: near its deadline it hands over to a continuation monitor job.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from jobs import queue
from jobs.core.state import JobState
from jobs.handler_contract import HandlerContext, JobResult
from objectives import services

MISSING_GRACE_S = 60.0
HANDOVER_MARGIN_S = 2.0  # time left for the last checkpoint and the handover itself


def handle(job: JobState, ctx: HandlerContext) -> JobResult:
    payload = job.payload if isinstance(job.payload, dict) else {}
    objective_id, task_id = payload.get("objectiveId"), payload.get("taskId")
    task_job_id = payload.get("taskJobId")
    if not all(isinstance(x, str) for x in (objective_id, task_id, task_job_id)):
        return JobResult.failure("monitor needs objectiveId, taskId and taskJobId", no_retry=True)
    assert isinstance(objective_id, str) and isinstance(task_id, str)
    assert isinstance(task_job_id, str)
    interval_s = settings.RECEIPT.factory_monitor_interval_ms / 1000
    checkpoints, waited = 0, 0.0
    while True:
        task_job = queue.get(task_job_id)
        if task_job is None:
            if waited > MISSING_GRACE_S:
                return JobResult.success({"status": "missing", "checkpoints": checkpoints})
        elif task_job.status != "queued":
            checkpoints += services.task_checkpointed(
                objective_id, task_id, task_job, monitor_job_id=job.job_id
            )
            if task_job.is_terminal:
                return JobResult.success(
                    {
                        "status": "settled",
                        "taskJobStatus": task_job.status,
                        "checkpoints": checkpoints,
                    }
                )
        if ctx.remaining_s() < interval_s + HANDOVER_MARGIN_S:
            return _hand_over(job, payload, checkpoints)
        if ctx.aborted.wait(interval_s):
            return JobResult.failure(f"monitor stopped: {ctx.abort_reason}")
        waited += interval_s


def _hand_over(job: JobState, payload: dict[str, Any], checkpoints: int) -> JobResult:
    generation = int(payload.get("generation") or 1) + 1
    base = job.job_id.rsplit("-c", 1)[0] if payload.get("generation") else job.job_id
    next_id = f"{base}-c{generation}"
    queue.enqueue(
        job.agent_id,
        {**payload, "generation": generation},
        job_id=next_id,
        lane=job.lane,
        max_attempts=job.max_attempts,
    )
    return JobResult.success({"status": "handed_over", "next": next_id, "checkpoints": checkpoints})
