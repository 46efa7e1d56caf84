"""The only writer of objective receipts (O-7, O-8, O-11).

Every mutation is a compare-and-append: read the fold and its head (the summary row,
which the projector keeps equal to the receipts), decide, then append with
`expected_prev=<that head>` and apply the decision's effects (idempotent enqueues with
deterministic job ids, aborts) in the same transaction. A moved head raises
`ExpectedPrevMismatch`; the whole decision is retried on the new head.

Control requests are an outbox on the stream (O-8): `objective.control.enqueue.requested`
is appended first; after that commits the control job is enqueued under the request's
deterministic job id and `objective.control.enqueued` is appended. A crash in between is
repaired by the outbox redrive (L-3, `objectives.outbox`).
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from jobs import queue
from jobs import selectors as job_selectors
from jobs.core.state import JobState
from jobs.errors import JobNotFound, JobTerminal
from objectives import selectors
from objectives.core import reports
from objectives.core import vocabulary as v
from objectives.core.control import Abort, Effect, Enqueue, control_requested
from objectives.core.dag import PlanError, validate_plan
from objectives.core.intake import IntakeError, read_input
from objectives.core.reducer import apply
from objectives.core.reports import CommandRun
from objectives.core.state import ObjectiveState
from objectives.core.wire import to_wire
from objectives.errors import InvalidAction, ObjectiveContention, ObjectiveNotFound
from objectives.projector import CACHE_KEY
from observability.logs import log_event
from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from receipts.errors import ExpectedPrevMismatch

logger = logging.getLogger("receipt.objectives")
MAX_ATTEMPTS = 40
STOPPED_BY_USER = "stopped by the user"
CONTROL_MAX_ATTEMPTS = 3


@dataclass
class Mutation:
    events: list[dict[str, Any]]
    effects: Sequence[Effect] = ()
    result: Any = None
    guard: Callable[[], None] | None = None  # runs in the transaction, before the append
    after_commit: list[Callable[[], object]] = field(default_factory=list)  # results unused


@dataclass(frozen=True)
class Written:
    state: ObjectiveState | None
    appended: int
    result: Any = None


class Retry(Exception):
    """Raised by a guard to decide again on fresh state (e.g. the slot was just taken)."""


Decide = Callable[[ObjectiveState | None], Mutation | None]


def mutate(
    objective_id: str,
    decide: Decide,
    *,
    actor: str | None = None,
    job_id: str | None = None,
) -> Written:
    """Compare-and-append the events `decide` returns for the fold it was given."""
    stream = v.objective_stream(objective_id)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        state, head = selectors.load(objective_id)
        mutation = decide(state)
        if mutation is None or not mutation.events:
            return Written(state, 0, mutation.result if mutation else None)
        context = _context(state, objective_id, mutation.events, actor, job_id)
        try:
            with transaction.atomic():
                if mutation.guard is not None:
                    mutation.guard()
                with store.open_stream(stream) as handle:
                    handle.append(mutation.events, expected_prev=head, context=context)
                    after = handle.cache.get(CACHE_KEY)
                apply_effects(mutation.effects)
        except (ExpectedPrevMismatch, Retry):
            time.sleep(random.uniform(0, min(0.1, 0.005 * attempt)))
            continue
        for callback in mutation.after_commit:
            try:
                callback()
            except Exception as error:  # the receipts stand; the outbox redrive (L-3)
                log_event(
                    logger,
                    "factory.after_commit_failed",  # or watchdog recovers
                    f"after-commit step of {objective_id} failed: {error}",
                    level=logging.WARNING,
                    objectiveId=objective_id,
                )
        return Written(after, len(mutation.events), mutation.result)
    raise ObjectiveContention(objective_id, MAX_ATTEMPTS)


def _context(
    state: ObjectiveState | None,
    objective_id: str,
    events: list[dict[str, Any]],
    actor: str | None,
    job_id: str | None,
) -> dict[str, Any]:
    org = (
        state.organization_id
        if state
        else (events[0].get("authContext") or {}).get("organizationId")
    )
    given = {"organizationId": org, "actor": actor, "jobId": job_id}
    return {"objectiveId": objective_id, **{key: value for key, value in given.items() if value}}


def apply_effects(effects: Sequence[Effect]) -> None:
    """Idempotent enqueues (deterministic job ids, J-6) and aborts, in the caller's
    transaction: the receipts that record them and the jobs commit together."""
    for effect in effects:
        if isinstance(effect, Enqueue):
            queue.enqueue(
                effect.agent_id,
                effect.payload,
                job_id=effect.job_id,
                lane=effect.lane,
                max_attempts=effect.max_attempts,
            )
        elif isinstance(effect, Abort):
            abort_job(effect.job_id, reason=effect.reason, by="factory-control")


def abort_job(job_id: str, *, reason: str, by: str | None) -> bool:
    try:
        queue.abort(job_id, reason=reason, by=by)
        return True
    except (JobTerminal, JobNotFound):
        return False


# ---- control requests (O-8) ------------------------------------------------------------


def _started(job_id: str) -> bool:
    """Has the control job of a request begun a pass (so it may have read stale facts)?"""
    job = queue.get(job_id)
    return job is not None and not (job.status == "queued" and job.attempt == 0)


def control_request_events(
    state: ObjectiveState, reason: str, *, source: str | None = None, force: bool = False
) -> tuple[list[dict[str, Any]], str | None]:
    """The outbox receipt for a new control request, or none when a pending request whose
    job has not started yet will see everything this one would (it coalesces)."""
    if state.is_terminal and state.audit.status in ("requested", "recorded"):
        return [], None  # nothing left for control to do
    if not force:
        waiting = [r for r in state.pending_requests if not _started(r.job_id)]
        if waiting:
            return [], waiting[-1].job_id
    body = control_requested(state.objective_id, state.control_requests_total + 1, reason, source)
    return [body], body["jobId"]


def request_control(
    objective_id: str,
    reason: str,
    *,
    source: str | None = None,
    events: Sequence[dict[str, Any]] = (),
) -> str | None:
    """Ask for a control pass (recording `events` with the request); the job id serving it."""

    def decide(state: ObjectiveState | None) -> Mutation | None:
        if state is None:
            return None
        extra = [] if state.is_terminal else list(events)
        request, job_id = control_request_events(state, reason, source=source)
        return Mutation(
            [*extra, *request],
            result=job_id,
            after_commit=[lambda: ensure_control_enqueued(objective_id)],
        )

    return mutate(objective_id, decide).result


def ensure_control_enqueued(objective_id: str) -> list[str]:
    """Enqueue every recorded-but-not-enqueued control request, then record it (O-8).
    Idempotent: the job ids are deterministic and the receipt is compare-and-appended."""
    state = selectors.get(objective_id)
    if state is None or not state.unenqueued_requests:
        return []
    todo = list(state.unenqueued_requests)
    for request in todo:
        queue.enqueue(
            v.CONTROL_AGENT,
            {
                "kind": v.KIND_CONTROL,
                "objectiveId": state.objective_id,
                "requestId": request.id,
                "reason": request.reason,
                "authContext": dict(state.auth_context),
            },
            job_id=request.job_id,
            lane="collect",
            max_attempts=CONTROL_MAX_ATTEMPTS,
        )
    wanted = {r.id for r in todo}

    def decide(current: ObjectiveState | None) -> Mutation | None:
        if current is None:
            return None
        return Mutation(
            [
                {"type": v.CONTROL_ENQUEUED, "requestId": r.id, "jobId": r.job_id}
                for r in current.unenqueued_requests
                if r.id in wanted
            ]
        )

    mutate(objective_id, decide)
    return [r.job_id for r in todo]


# ---- creation (O-11 create) -------------------------------------------------------------


def create(
    objective_id: str,
    raw: dict[str, Any],
    *,
    auth_context: dict[str, Any],
    by: str | None,
    source_job_id: str | None = None,
) -> tuple[ObjectiveState, bool]:
    """Create the objective (idempotent on its id) and request its first control pass."""
    if not v.is_objective_id(objective_id):
        raise InvalidAction(
            "invalid_objective_id",
            f"objectiveId {objective_id!r} must be "
            f"1..{v.OBJECTIVE_ID_MAX} letters, digits, '.', '_' or '-'",
        )
    try:
        spec = read_input(raw)
    except IntakeError as error:
        raise InvalidAction("invalid_objective", str(error)) from None
    body = {
        "type": v.OBJECTIVE_CREATED,
        "objectiveId": objective_id,
        "title": spec.title,
        "prompt": spec.prompt,
        "mode": spec.mode,
        "severity": spec.severity,
        "checks": [to_wire(c) for c in spec.checks],
        "tasks": spec.tasks,
        "policy": to_wire(spec.policy),
        "channel": spec.channel,
        "scope": spec.scope,
        "evidence": spec.evidence,
        "doneWhen": spec.done_when,
        "publishCommand": spec.publish_command,
        "authContext": dict(auth_context),
        "createdBy": by,
        "sourceJobId": source_job_id,
    }
    request = control_requested(objective_id, 1, "created", None)

    def decide(state: ObjectiveState | None) -> Mutation | None:
        if state is not None:
            return Mutation([], result=False)
        return Mutation(
            [body, request],
            result=True,
            after_commit=[lambda: ensure_control_enqueued(objective_id)],
        )

    written = mutate(objective_id, decide, actor=by, job_id=source_job_id)
    state = written.state or selectors.get(objective_id)
    assert state is not None
    if not written.result and state.organization_id != auth_context.get("organizationId"):
        raise InvalidAction(
            "objective_id_taken",
            f"objectiveId {objective_id} is taken by another organization",
            status=409,
        )
    return state, bool(written.result)


# ---- operator actions (O-11, U-5) ---------------------------------------------------------


def _operator(
    objective_id: str,
    events: Callable[[ObjectiveState], list[dict[str, Any]]],
    *,
    by: str | None,
    organization_id: str | None,
    reason: str | None = None,  # also request a control pass, for this reason
    allow_terminal: bool = False,
) -> ObjectiveState:
    selectors.visible(objective_id, organization_id=organization_id)

    def decide(state: ObjectiveState | None) -> Mutation | None:
        if state is None:
            raise ObjectiveNotFound(objective_id)
        if state.is_terminal and not allow_terminal:
            raise InvalidAction(
                "objective_terminal", f"objective {objective_id} is {state.status}", status=409
            )
        out = events(state)
        if reason is not None:
            out += control_request_events(state, reason)[0]
        return Mutation(out, after_commit=[lambda: ensure_control_enqueued(objective_id)])

    written = mutate(objective_id, decide, actor=by)
    return written.state or selectors.visible(objective_id)


def note(
    objective_id: str, text: str, *, by: str | None, organization_id: str | None = None
) -> ObjectiveState:
    if not isinstance(text, str) or not text.strip() or len(text) > 20_000:
        raise InvalidAction("invalid_note", "a note needs text of 1..20000 characters")
    return _operator(
        objective_id,
        lambda s: [{"type": v.NOTE_ADDED, "text": text, "by": by}],
        by=by,
        organization_id=organization_id,
        allow_terminal=True,
    )


def react(
    objective_id: str,
    *,
    by: str | None,
    message: str | None = None,
    tasks: Any = None,
    organization_id: str | None = None,
) -> ObjectiveState:
    """Wake control; on a blocked objective this unblocks it (O-2, O-11). Supplied tasks
    are checked as a plan first (`dag.validate_plan`), so a bad plan is refused here with
    its reason and nothing is written, rather than blocking the objective later."""
    if tasks is not None:
        try:
            validate_plan(tasks)
        except PlanError as error:
            raise InvalidAction("invalid_tasks", str(error)) from None

    def events(state: ObjectiveState) -> list[dict[str, Any]]:
        if tasks is not None and state.tasks:
            raise InvalidAction(
                "already_planned",
                f"objective {objective_id} already has a "
                "plan; tasks can only be supplied before planning",
                status=409,
            )
        body: dict[str, Any] = {"type": v.REACT_REQUESTED, "by": by}
        if message:
            body["message"] = message
        if tasks is not None:
            body["tasks"] = tasks
        return [body]

    return _operator(objective_id, events, by=by, reason="react", organization_id=organization_id)


def promote(
    objective_id: str, *, by: str | None, organization_id: str | None = None
) -> ObjectiveState:
    return _operator(
        objective_id,
        lambda s: [{"type": v.PROMOTE_REQUESTED, "by": by}],
        by=by,
        reason="promote",
        organization_id=organization_id,
    )


def archive(
    objective_id: str, *, by: str | None, organization_id: str | None = None
) -> ObjectiveState:
    return _operator(
        objective_id,
        lambda s: [] if s.archived else [{"type": v.ARCHIVED, "archived": True, "by": by}],
        by=by,
        organization_id=organization_id,
        allow_terminal=True,
    )


def cancel(
    objective_id: str,
    *,
    by: str | None,
    reason: str = STOPPED_BY_USER,
    organization_id: str | None = None,
    spare_job_id: str | None = None,
) -> ObjectiveState:
    """O-11: record the cancel, abort the objective's active jobs (`stopped by the user`),
    then cancel the objective. The request is recorded first so no control pass
    dispatches new work while the jobs are being stopped."""
    state = selectors.visible(objective_id, organization_id=organization_id)
    if state.is_terminal:
        return state
    _operator(
        objective_id,
        lambda s: []
        if s.cancel_requested or s.is_terminal
        else [{"type": v.CANCEL_REQUESTED, "by": by, "reason": reason}],
        by=by,
        organization_id=organization_id,
        allow_terminal=True,
    )
    aborted = [
        job_id
        for job_id in job_selectors.active_objective_job_ids(objective_id)
        if job_id != spare_job_id and abort_job(job_id, reason=STOPPED_BY_USER, by=by)
    ]

    def decide(current: ObjectiveState | None) -> Mutation | None:
        if current is None or current.is_terminal:
            return None
        events = [{"type": v.CANCELED, "by": by, "reason": reason, "abortedJobIds": aborted}]
        events += control_request_events(apply(current, events[0], 0), "canceled")[0]
        return Mutation(events, after_commit=[lambda: ensure_control_enqueued(objective_id)])

    written = mutate(objective_id, decide, actor=by)
    return written.state or selectors.visible(objective_id)


def workspace(objective_id: str) -> Path:
    """The objective's workspace: under RECEIPT_WORKSPACE_DIR, never the data directory
    (Q-5). Objective ids are path-safe (`vocabulary.is_objective_id`)."""
    return Path(str(settings.RECEIPT.workspace_dir)) / objective_id


def logs(objective_id: str) -> Path:
    """The objective's command output (stdout/stderr), kept by the worker beside the
    workspaces and out of the commands' reach: the worker writes there."""
    return Path(str(settings.RECEIPT.workspace_dir)) / ".logs" / objective_id


def cleanup(
    objective_id: str, *, by: str | None, organization_id: str | None = None
) -> ObjectiveState:
    state = selectors.visible(objective_id, organization_id=organization_id)
    if not state.is_terminal:
        raise InvalidAction(
            "objective_active",
            f"objective {objective_id} is {state.status}; "
            "cancel it before cleaning up its workspace",
            status=409,
        )
    path = workspace(objective_id)
    shutil.rmtree(path, ignore_errors=True)  # never follows a link the commands left
    shutil.rmtree(logs(objective_id), ignore_errors=True)
    return _operator(
        objective_id,
        # the path relative to the workspace root: receipts name no server directory
        lambda s: [{"type": v.WORKSPACE_CLEANED, "by": by, "path": path.name}],
        by=by,
        organization_id=organization_id,
        allow_terminal=True,
    )


def job_command(
    objective_id: str,
    job_id: str,
    command: str,
    payload: Any = None,
    *,
    by: str | None,
    reason: str | None = None,
    organization_id: str | None = None,
) -> queue.CommandResult:
    """abort-job / steer / follow-up on one of the objective's jobs (O-11)."""
    selectors.visible(objective_id, organization_id=organization_id)
    job = queue.get(job_id)
    if job is None or job.objective_id != objective_id:
        raise InvalidAction(
            "job_not_in_objective",
            f"job {job_id} does not belong to objective {objective_id}",
            status=404,
        )
    sent = queue.command(job_id, command, payload, by=by, reason=reason)
    _operator(
        objective_id,
        lambda s: [{"type": v.JOB_COMMAND_SENT, "jobId": job_id, "command": command, "by": by}],
        by=by,
        organization_id=organization_id,
        allow_terminal=True,
    )
    return sent


# ---- facts reported by Factory's own jobs -----------------------------------------------------


def job_settled(
    job_id: str, *, objective_id: str, task_id: str | None, status: str, kind: str | None
) -> str | None:
    """A reconcile-on-settle job settled or lost its lease (O-8): record it, ask control."""
    events: list[dict[str, Any]] = []
    if task_id and kind == v.KIND_TASK_RUN and status in ("completed", "failed", "canceled"):
        events.append(
            {"type": v.TASK_JOB_SETTLED, "taskId": task_id, "jobId": job_id, "jobStatus": status}
        )
    reason = "job_settled" if status in ("completed", "failed", "canceled") else "lease_expired"
    return request_control(objective_id, reason, source=job_id, events=events)


def _report(objective_id: str, body: dict[str, Any], *, job_id: str) -> bool:
    """Compare-and-append a job's report while it still applies; True when appended."""

    def decide(state: ObjectiveState | None) -> Mutation:
        applies = state is not None and reports.applies(state, body)
        return Mutation([body] if applies else [], result=applies)

    return bool(mutate(objective_id, decide, job_id=job_id).result)


def task_checkpointed(
    objective_id: str, task_id: str, task_job: JobState, *, monitor_job_id: str
) -> bool:
    """A monitor's `monitor.checkpoint` on a run of the objective's task (O-9)."""
    last = job_selectors.last_progress(task_job.job_id)
    body = reports.checkpoint(
        task_id,
        selectors.fact_of(task_job),
        monitor_job_id=monitor_job_id,
        progress_at=last.at if last else None,
        progress=last.report if last else None,
        now_ms=wall_clock_ms(),
        staleness=selectors.staleness(),
    )
    return _report(objective_id, body, job_id=monitor_job_id)


def validation_started(objective_id: str, job_id: str, checks: list[str]) -> bool:
    return _report(objective_id, reports.validating(job_id, checks), job_id=job_id)


def validated(objective_id: str, job_id: str, results: list[dict[str, Any]]) -> bool:
    return _report(objective_id, reports.validated(job_id, results), job_id=job_id)


def validation_failed(
    objective_id: str, job_id: str, run: CommandRun, results: list[dict[str, Any]]
) -> bool:
    return _report(objective_id, reports.validation_failed(job_id, run, results), job_id=job_id)


def publish_finished(objective_id: str, job_id: str, run: CommandRun | None) -> str | None:
    """The publish job's verdict (O-13): the receipt type recorded, None if superseded."""
    body = reports.publish_verdict(job_id, run)
    return str(body["type"]) if _report(objective_id, body, job_id=job_id) else None


def audit_recorded(
    objective_id: str, job_id: str, *, summary: dict[str, Any], artifact: str, head: str | None
) -> bool:
    """O-10: appended on exactly the `head` the audit read. If that moved, the audit is
    recorded superseded and control asked for another round instead: False."""
    body = reports.audit_recorded(job_id, summary=summary, artifact=artifact, head=head)
    context = _context(selectors.get(objective_id), objective_id, [body], None, job_id)
    try:
        store.append(v.objective_stream(objective_id), body, expected_prev=head, context=context)
        return True
    except ExpectedPrevMismatch:
        _report(objective_id, reports.audit_superseded(job_id), job_id=job_id)
        request_control(objective_id, "audit_superseded", source=job_id)
        return False


def release_slots() -> list[str]:
    """Request control for the objectives waiting longest, one per free repo slot."""
    free = settings.RECEIPT.repo_slot_concurrency - selectors.held_slots()
    woken = []
    for objective_id in selectors.waiting_for_slot(max(0, free)):
        try:
            request_control(objective_id, "slot_released")
            woken.append(objective_id)
        except Exception as error:  # per item: one bad objective must not stop the rest
            log_event(
                logger,
                "factory.slot_wake_failed",
                f"waking {objective_id} failed: {error}",
                level=logging.WARNING,
                objectiveId=objective_id,
            )
    return woken
