"""`factory.run` on agent `factory` (O-12): one chat turn.

With `objectiveId` the turn's message is noted on that objective and it is reacted;
otherwise an objective is created from the payload (as `create`). The turn is recorded
as `run.started` / `run.completed` on `agents/factory/runs/<runId>` (runId: the
payload's, else the job id), idempotently per job. RECEIPT_FACTORY_RUN_HANDLER may name
a replacement handler (dotted path, same signature).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from jobs.core.state import JobState
from jobs.core.vocabulary import validate_job_id
from jobs.errors import JobsError
from jobs.handler_contract import HandlerContext, JobResult
from objectives import services
from objectives.core.vocabulary import run_stream
from objectives.errors import ObjectivesError
from objectives.handlers.dispatch import actor, create_from
from objectives.ledger import run_id_of
from receipts import store


def handle(job: JobState, ctx: HandlerContext) -> JobResult:
    path = settings.RECEIPT.factory_run_handler
    if path:
        replacement: Any = import_string(path)
        result: JobResult = replacement(job, ctx)
        return result
    return default(job, ctx)


def default(job: JobState, ctx: HandlerContext) -> JobResult:
    payload = job.payload if isinstance(job.payload, dict) else {}
    run_id = run_id_of(job)
    try:
        validate_job_id(run_id)
    except ValueError as error:
        return JobResult.failure(f"runId: {error}", no_retry=True)
    stream = run_stream(run_id)
    objective_id = payload.get("objectiveId")
    store.append(
        stream,
        {"type": "run.started", "runId": run_id, "jobId": job.job_id, "objectiveId": objective_id},
        event_id=f"{job.job_id}:started",
    )
    message = payload.get("message") or payload.get("prompt")
    try:
        if isinstance(objective_id, str):
            if message:
                services.note(
                    objective_id, str(message), by=actor(job), organization_id=job.organization_id
                )
            state = services.react(objective_id, by=actor(job), organization_id=job.organization_id)
            objective_id, created = state.objective_id, False
        else:
            out = create_from(job, {**payload, "prompt": payload.get("prompt") or message})
            objective_id, created = out["objectiveId"], out["created"]
    except (ObjectivesError, JobsError) as error:
        return JobResult.failure(str(error), no_retry=True)
    store.append(
        stream,
        {
            "type": "run.completed",
            "runId": run_id,
            "jobId": job.job_id,
            "objectiveId": objective_id,
        },
        event_id=f"{job.job_id}:completed",
    )
    return JobResult.success(
        {"objectiveId": objective_id, "runId": run_id, "stream": stream, "created": created}
    )
