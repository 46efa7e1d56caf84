"""`factory.dispatch` on agent `factory` (O-11): one operator or client action.

Actions: create, react, note, promote, cancel, cleanup, archive, abort-job, steer,
follow-up (an absent action means create). Every action but create names an
`objectiveId` of the caller's organization (another organization's objective is "not
found"). Refusals fail the job non-retryably with the reason; nothing is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from jobs.core.state import JobState
from jobs.errors import JobsError
from jobs.handler_contract import HandlerContext, JobResult
from objectives import selectors, services
from objectives.core.intake import CREATE_KEYS
from objectives.errors import InvalidAction, ObjectivesError

Result = dict[str, Any]


def objective_id_for(job_id: str) -> str:
    """Deterministic, so a retried create finds the objective its first attempt made."""
    return "obj-" + hashlib.sha256(job_id.encode()).hexdigest()[:16]


def actor(job: JobState) -> str:
    payload = job.payload if isinstance(job.payload, dict) else {}
    auth = payload.get("authContext") if isinstance(payload.get("authContext"), dict) else {}
    user = auth.get("userId") if isinstance(auth, dict) else None
    return f"user:{user}" if user else f"job:{job.job_id}"


def create_from(job: JobState, payload: dict[str, Any]) -> Result:
    objective = payload.get("objective")
    raw = objective if isinstance(objective, dict) else payload
    spec = {k: raw[k] for k in CREATE_KEYS if k in raw}
    objective_id = payload.get("objectiveId") or objective_id_for(job.job_id)
    state, created = services.create(
        objective_id,
        spec,
        auth_context=payload["authContext"],
        by=actor(job),
        source_job_id=job.job_id,
    )
    return {"objectiveId": state.objective_id, "created": created, "status": state.status}


def _objective_id(payload: dict[str, Any]) -> str:
    objective_id = payload.get("objectiveId")
    if not isinstance(objective_id, str) or not objective_id:
        raise InvalidAction("objective_id_required", "this action needs an objectiveId")
    return objective_id


def _done(state: Any, **extra: Any) -> Result:
    return {"objectiveId": state.objective_id, "status": state.status, **extra}


def _command(kind: str) -> Callable[[JobState, dict[str, Any]], Result]:
    def act(job: JobState, payload: dict[str, Any]) -> Result:
        oid, org, by = _objective_id(payload), job.organization_id, actor(job)
        job_ids = [payload["jobId"]] if isinstance(payload.get("jobId"), str) else None
        if kind == "abort":
            if not job_ids:
                raise InvalidAction("job_id_required", "abort-job needs a jobId")
            services.job_command(
                oid, job_ids[0], "abort", by=by, organization_id=org, reason=payload.get("reason")
            )
            return {"objectiveId": oid, "jobIds": job_ids}
        body = payload.get("payload")
        if body is None:
            body = {"message": payload.get("message")}
        targets = job_ids or selectors.active_task_jobs(oid)
        if not targets:  # nothing running: the message reaches the objective instead
            message = body.get("message") if isinstance(body, dict) else None
            state = services.react(
                oid, by=by, message=message or f"{kind}: {body}", organization_id=org
            )
            return _done(state, jobIds=[], reacted=True)
        for target in targets:
            services.job_command(oid, target, kind, body, by=by, organization_id=org)
        return {"objectiveId": oid, "jobIds": targets}

    return act


ACTIONS: dict[str, Callable[[JobState, dict[str, Any]], Result]] = {
    "create": create_from,
    "react": lambda job, p: _done(
        services.react(
            _objective_id(p),
            by=actor(job),
            message=p.get("message"),
            tasks=p.get("tasks"),
            organization_id=job.organization_id,
        )
    ),
    "note": lambda job, p: _done(
        services.note(
            _objective_id(p),
            p.get("text") or p.get("message") or "",
            by=actor(job),
            organization_id=job.organization_id,
        )
    ),
    "promote": lambda job, p: _done(
        services.promote(_objective_id(p), by=actor(job), organization_id=job.organization_id)
    ),
    "cancel": lambda job, p: _done(
        services.cancel(
            _objective_id(p),
            by=actor(job),
            organization_id=job.organization_id,
            reason=p.get("reason") or services.STOPPED_BY_USER,
            spare_job_id=job.job_id,
        )
    ),
    "cleanup": lambda job, p: _done(
        services.cleanup(_objective_id(p), by=actor(job), organization_id=job.organization_id)
    ),
    "archive": lambda job, p: _done(
        services.archive(_objective_id(p), by=actor(job), organization_id=job.organization_id)
    ),
    "abort-job": _command("abort"),
    "steer": _command("steer"),
    "follow-up": _command("follow_up"),
}


def handle(job: JobState, ctx: HandlerContext) -> JobResult:
    payload = job.payload if isinstance(job.payload, dict) else {}
    action = payload.get("action") or "create"
    act = ACTIONS.get(action)
    if act is None:
        return JobResult.failure(
            f"unknown factory.dispatch action {action!r}; expected one of {', '.join(ACTIONS)}",
            no_retry=True,
        )
    try:
        return JobResult.success({"action": action, **act(job, payload)})
    except (ObjectivesError, JobsError) as error:
        return JobResult.failure(
            str(error), no_retry=True, result={"code": getattr(error, "code", "error")}
        )
