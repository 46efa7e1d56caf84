"""The objective fold (O-1 .. O-3, O-8, O-10, O-13) over `factory/objectives/<id>`.

Pure: `reduce(state, receipt)`; `apply(state, body, ts)` is the same without chain
bookkeeping, which the control pass uses to look ahead. Rules decided here:

- Only `objective.created` may start a stream; any other first receipt raises
  `InvariantError("Invariant: no objective <id> for <type>")`.
- Status-changing receipts never move a terminal objective; the outbox, audit, archive,
  notes and checkpoints still apply after it settled.
- A task outcome decides the task: `approved` approves; `blocked` blocks; `aborted` (an
  operator aborted its job) blocks it with "aborted by <who>: <reason>" until a react
  runs it again; anything else (changes_requested, partial, failed, canceled) sends the
  task back to `ready` until `maxCandidatePassesPerTask` passes since the last react,
  then blocks it with the last stderr tail (else stdout tail) in the reason.
- `integration.validation.failed` and `integration.publish.failed` block the objective
  (O-13). A react on a blocked objective unblocks it: blocked tasks become ready with a
  fresh pass budget, a failed validation or publication is retried, the time budget
  restarts. The repo slot is held until the objective settles.
- Unknown receipt types change only bookkeeping (count, head, updatedAt).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final

from objectives.core import vocabulary as v
from objectives.core.intake import Check
from objectives.core.policy import Policy
from objectives.core.state import (
    Audit,
    Checkpoint,
    ControlRequest,
    JobRef,
    Note,
    ObjectiveState,
    Task,
    TaskRun,
)
from objectives.core.wire import from_wire
from receipts.core.chain import Receipt

MAX_NOTES: Final = 100
KEEP_CONSUMED_REQUESTS: Final = 20
TAIL_IN_REASON: Final = 1500
ABORT_REQUESTED: Final = "abort requested"  # the queue's reason when an abort gives none

Body = dict[str, Any]


class InvariantError(Exception):
    code = "objective_invariant"


def reduce(state: ObjectiveState | None, receipt: Receipt) -> ObjectiveState | None:
    """Apply one receipt, with the stream bookkeeping (count, head, updatedAt)."""
    after = apply(state, receipt.body, receipt.ts, stream=receipt.stream)
    return replace(
        after,
        receipt_count=(state.receipt_count if state else 0) + 1,
        head=receipt.hash,
        updated_at=receipt.ts,
    )


def apply(state: ObjectiveState | None, body: Body, ts: int, *, stream: str = "") -> ObjectiveState:
    kind = str(body.get("type"))
    if state is None:
        if kind != v.OBJECTIVE_CREATED:
            oid = body.get("objectiveId") or v.objective_id_from_stream(stream) or "?"
            raise InvariantError(f"Invariant: no objective {oid} for {kind}")
        return _created(body, ts)
    handler = _APPLY.get(kind)
    if handler is None:
        return state
    if state.is_terminal and kind in _STATUS_CHANGING:
        return state
    return handler(state, body, ts)


# ---- creation and planning ------------------------------------------------------------


def _created(b: Body, ts: int) -> ObjectiveState:
    raw_auth = b.get("authContext")
    auth: dict[str, Any] = raw_auth if isinstance(raw_auth, dict) else {}
    return ObjectiveState(
        objective_id=str(b["objectiveId"]),
        title=str(b.get("title") or ""),
        prompt=b.get("prompt"),
        mode=b.get("mode") or v.DEFAULT_MODE,
        severity=int(b.get("severity") or v.DEFAULT_SEVERITY),
        organization_id=auth.get("organizationId"),
        user_id=auth.get("userId"),
        auth_context=auth,
        channel=b.get("channel"),
        scope=b.get("scope"),
        evidence=b.get("evidence"),
        done_when=b.get("doneWhen"),
        publish_command=b.get("publishCommand"),
        input_tasks=b.get("tasks"),
        checks=tuple(from_wire(Check, c) for c in b.get("checks") or []),
        policy=from_wire(Policy, b.get("policy") or {}),
        created_by=b.get("createdBy"),
        active_since=ts,
        created_at=ts,
        updated_at=ts,
    )


def _planned(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    if s.status != "planning":
        return s
    tasks = tuple(
        Task(
            id=t["id"],
            title=t["title"],
            command=t.get("command"),
            prompt=t.get("prompt"),
            depends_on=tuple(t.get("dependsOn") or ()),
            timeout_ms=t.get("timeoutMs"),
            executor=t.get("executor"),
            status_at=ts,
        )
        for t in b.get("tasks") or []
    )
    s = replace(s, tasks=tasks, plan_revision=s.plan_revision + 1, plan_source=b.get("source"))
    if s.mode == "investigation":
        return replace(s, status="collecting_evidence", phase=v.PHASE_EXECUTE)
    if s.slot_held:
        return replace(s, status="executing", phase=v.PHASE_EXECUTE)
    return replace(s, status="waiting_for_slot", phase=v.PHASE_SLOT)


def _slot_waiting(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    if s.status not in ("planning", "waiting_for_slot"):
        return s
    return replace(s, status="waiting_for_slot", phase=v.PHASE_SLOT)


def _slot_acquired(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    if s.status not in ("planning", "waiting_for_slot"):
        return replace(s, slot_held=True)
    return replace(s, slot_held=True, status="executing", phase=v.PHASE_EXECUTE)


# ---- tasks ----------------------------------------------------------------------------


def _with_task(s: ObjectiveState, task_id: Any, change: Callable[[Task], Task]) -> ObjectiveState:
    return replace(s, tasks=tuple(change(t) if t.id == task_id else t for t in s.tasks))


def _ready(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    ids = set(b.get("taskIds") or [])
    return replace(
        s,
        tasks=tuple(
            replace(t, status="ready", status_at=ts) if t.id in ids and t.status == "pending" else t
            for t in s.tasks
        ),
    )


def _dispatched(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    run = TaskRun(
        pass_no=int(b["pass"]),
        job_id=str(b["jobId"]),
        monitor_job_id=b.get("monitorJobId"),
        dispatched_at=ts,
    )
    s = _with_task(
        s,
        b.get("taskId"),
        lambda t: replace(t, status="running", status_at=ts, runs=(*t.runs, run)),
    )
    started = [(run.job_id, v.KIND_TASK_RUN)]
    if run.monitor_job_id:
        started.append((run.monitor_job_id, v.KIND_MONITOR))
    refs = [
        JobRef(job_id=job_id, kind=kind, phase=v.PHASE_EXECUTE, task_id=b.get("taskId"), at=ts)
        for job_id, kind in started
    ]
    return _add_refs(s, refs)


def _add_refs(s: ObjectiveState, refs: list[JobRef]) -> ObjectiveState:
    known = {r.job_id for r in s.jobs}
    return replace(s, jobs=(*s.jobs, *(r for r in refs if r.job_id not in known)))


def _job_settled(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    def change(t: Task) -> Task:
        run = t.open_run
        if run is None or run.job_id != b.get("jobId") or t.status != "running":
            return t
        return replace(t, status="reviewing", status_at=ts)

    return _with_task(s, b.get("taskId"), change)


def _outcome(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    limit = s.policy.max_candidate_passes_per_task

    def change(t: Task) -> Task:
        run = t.open_run
        if run is None or run.job_id != b.get("jobId"):
            return t
        outcome = str(b.get("outcome") or v.FAILED_OUTCOME)
        settled = replace(
            run,
            settled_at=ts,
            outcome=outcome,
            job_status=b.get("jobStatus"),
            summary=b.get("summary"),
            exit_code=b.get("exitCode"),
            stdout_tail=b.get("stdoutTail"),
            stderr_tail=b.get("stderrTail"),
            completion=b.get("completion"),
            error=b.get("error"),
        )
        t = replace(t, runs=(*t.runs[:-1], settled), status_at=ts)
        if outcome == "approved":
            return replace(t, status="approved", blocked_reason=None)
        if outcome == "blocked":
            why = settled.summary or "the task reported blocked"
            return replace(t, status="blocked", blocked_reason=f"task '{t.id}' blocked: {why}")
        if outcome == v.ABORTED_OUTCOME:  # an operator who aborts means stop
            who = b.get("abortedBy") or "unknown"
            why = b.get("abortReason") or ABORT_REQUESTED
            return replace(t, status="blocked", blocked_reason=f"aborted by {who}: {why}")
        if t.passes_used >= limit:
            return replace(t, status="blocked", blocked_reason=_exhausted(t, settled, limit))
        return replace(t, status="ready")

    return _with_task(s, b.get("taskId"), change)


def _exhausted(task: Task, run: TaskRun, limit: int) -> str:
    tail = (run.stderr_tail or "").strip() or (run.stdout_tail or "").strip() or (run.error or "")
    exit_note = f", exit {run.exit_code}" if run.exit_code is not None else ""
    reason = (
        f"task '{task.id}' failed {task.passes_used} of {limit} candidate passes "
        f"(last: {run.outcome}{exit_note})"
    )
    return f"{reason}; stderr tail: {tail[-TAIL_IN_REASON:]}" if tail else reason


def _checkpoint(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    point = Checkpoint(
        job_id=str(b.get("jobId")),
        at=ts,
        liveness=str(b.get("liveness")),
        last_progress_at=b.get("lastProgressAt"),
        stdout_tail=b.get("stdoutTail"),
        stderr_tail=b.get("stderrTail"),
        job_status=b.get("jobStatus"),
    )
    return _with_task(
        s,
        b.get("taskId"),
        lambda t: replace(t, last_checkpoint=point, checkpoints=t.checkpoints + 1),
    )


# ---- operator receipts ----------------------------------------------------------------


def _blocked(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    return replace(
        s,
        status="blocked",
        blocked_reason=b.get("reason"),
        blocked_kind=b.get("kind"),
        blocked_at=ts,
    )


def _note(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    note = Note(at=ts, by=b.get("by"), text=str(b.get("text") or ""))
    return replace(s, notes=(*s.notes, note)[-MAX_NOTES:])


def _react(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    s = replace(s, reacts=s.reacts + 1)
    if b.get("message"):
        s = _note(s, {"by": b.get("by"), "text": b["message"]}, ts)
    if b.get("tasks") is not None and not s.tasks:
        s = replace(s, input_tasks=b["tasks"])
    if s.status != "blocked":
        return s
    tasks = tuple(
        replace(t, status="ready", status_at=ts, blocked_reason=None, pass_base=len(t.runs))
        if t.status == "blocked"
        else t
        for t in s.tasks
    )
    integration = s.integration
    if integration.status == "failed":
        integration = replace(integration, status="none", failure=None)
    elif integration.status == "publish_failed":
        integration = replace(integration, status="validated")
    s = replace(
        s,
        tasks=tasks,
        integration=integration,
        blocked_reason=None,
        blocked_kind=None,
        blocked_at=None,
        active_since=ts,
    )
    status, phase = _resume(s)
    return replace(s, status=status, phase=phase)


def _resume(s: ObjectiveState) -> tuple[str, str]:
    if not s.tasks:
        return "planning", v.PHASE_PLAN
    if s.integration.status in ("validated", "publish_requested", "promoted"):
        return "integrating", v.PHASE_PROMOTION
    if s.integration.status in ("requested", "validating"):
        return "integrating", v.PHASE_VALIDATE
    if s.mode == "investigation":
        return "collecting_evidence", v.PHASE_EXECUTE
    if not s.slot_held:
        return "waiting_for_slot", v.PHASE_SLOT
    return "executing", v.PHASE_EXECUTE


def _archived(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    return replace(s, archived=bool(b.get("archived", True)))


def _set(**changes: Any) -> Callable[[ObjectiveState, Body, int], ObjectiveState]:
    """A receipt that sets the same fields to the same values whatever it carries."""
    return lambda s, b, ts: replace(s, **changes)


def _terminal(status: str) -> Callable[[ObjectiveState, Body, int], ObjectiveState]:
    def settle(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
        summary = b.get("summary") if status == "completed" else s.result_summary
        return replace(
            s,
            status=status,
            phase=v.PHASE_AUDIT,
            slot_held=False,
            completed_at=ts,
            terminal_reason=b.get("reason"),
            result_summary=summary,
        )

    return settle


def _synthesized(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    return replace(
        s, status="synthesizing", phase=v.PHASE_SYNTHESIZE, result_summary=b.get("summary")
    )


# ---- integration (O-13) ---------------------------------------------------------------


def _integration_requested(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    job_id = str(b["jobId"])
    s = replace(
        s,
        status="integrating",
        phase=v.PHASE_VALIDATE,
        integration=replace(
            s.integration,
            round=int(b.get("round") or s.integration.round + 1),
            status="requested",
            validate_job_id=job_id,
            failure=None,
            results=None,
        ),
    )
    return _add_refs(
        s, [JobRef(job_id=job_id, kind=v.KIND_VALIDATE, phase=v.PHASE_VALIDATE, at=ts)]
    )


def _with_integration(s: ObjectiveState, **changes: Any) -> ObjectiveState:
    return replace(s, integration=replace(s.integration, **changes))


def _is_validate_job(s: ObjectiveState, b: Body) -> bool:
    return b.get("jobId") is None or b.get("jobId") == s.integration.validate_job_id


def _validating(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    if not _is_validate_job(s, b) or s.integration.status != "requested":
        return s
    return _with_integration(s, status="validating")


def _validated(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    if not _is_validate_job(s, b) or s.status not in ("executing", "integrating"):
        return s
    tasks = tuple(
        replace(t, status="integrated", status_at=ts) if t.status == "approved" else t
        for t in s.tasks
    )
    return replace(
        s,
        tasks=tasks,
        status="integrating",
        phase=v.PHASE_PROMOTION,
        integration=replace(s.integration, status="validated", results=b.get("results")),
    )


def _validation_failed(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    if not _is_validate_job(s, b) or s.integration.status not in ("requested", "validating"):
        return s
    failure = {k: b.get(k) for k in ("check", "exitCode", "outputTail", "reason")}
    s = _with_integration(s, status="failed", failure=failure, results=b.get("results"))
    return _blocked(s, {"reason": b.get("reason"), "kind": "validation"}, ts)


def _publish_requested(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    job_id = str(b["jobId"])
    s = replace(
        s,
        status="promoting",
        phase=v.PHASE_PUBLISH,
        integration=replace(
            s.integration,
            status="publish_requested",
            publish_job_id=job_id,
            publish_round=int(b.get("round") or s.integration.publish_round + 1),
        ),
    )
    return _add_refs(s, [JobRef(job_id=job_id, kind=v.KIND_PUBLISH, phase=v.PHASE_PUBLISH, at=ts)])


def _promoted(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    if b.get("jobId") not in (None, s.integration.publish_job_id):
        return s
    output = {k: b.get(k) for k in ("command", "exitCode", "outputTail")}
    return _with_integration(s, status="promoted", publish_output=output, promoted_at=ts)


def _publish_failed(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    if b.get("jobId") not in (None, s.integration.publish_job_id):
        return s
    output = {k: b.get(k) for k in ("command", "exitCode", "outputTail", "reason")}
    s = _with_integration(s, status="publish_failed", publish_output=output)
    return _blocked(s, {"reason": b.get("reason"), "kind": "publish"}, ts)


# ---- control outbox (O-8) and audit (O-10) ----------------------------------------------


def _control_requested(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    request = ControlRequest(
        id=int(b["requestId"]),
        job_id=str(b["jobId"]),
        reason=str(b.get("reason") or "requested"),
        source=b.get("source"),
        requested_at=ts,
    )
    return replace(
        s,
        control_requests=(*s.control_requests, request),
        control_requests_total=max(s.control_requests_total, request.id),
    )


def _control_enqueued(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    return replace(
        s,
        control_requests=tuple(
            replace(r, enqueued_at=ts)
            if r.id == b.get("requestId") and r.enqueued_at is None
            else r
            for r in s.control_requests
        ),
    )


def _control_pass(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    ids = set(b.get("requestIds") or [])
    requests = [
        replace(r, consumed_at=ts, consumed_by=b.get("jobId"), enqueued_at=r.enqueued_at or ts)
        if r.id in ids and r.consumed_at is None
        else r
        for r in s.control_requests
    ]
    keep = {r.id for r in requests if r.consumed_at is not None}
    keep = set(sorted(keep)[-KEEP_CONSUMED_REQUESTS:])
    requests = [r for r in requests if r.consumed_at is None or r.id in keep]
    return replace(
        s, control_requests=tuple(requests), control_passes=s.control_passes + 1, last_pass_at=ts
    )


def _audit_requested(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    job_id = str(b["jobId"])
    s = replace(
        s,
        audit=Audit(
            round=int(b.get("round") or s.audit.round + 1), job_id=job_id, status="requested"
        ),
    )
    return _add_refs(s, [JobRef(job_id=job_id, kind=v.KIND_AUDIT, phase=v.PHASE_AUDIT, at=ts)])


def _audit_recorded(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    return replace(
        s,
        phase=v.PHASE_DONE,
        audit=replace(
            s.audit,
            status="recorded",
            summary=b.get("summary"),
            artifact=b.get("artifact"),
            recorded_at=ts,
        ),
    )


def _audit_superseded(s: ObjectiveState, b: Body, ts: int) -> ObjectiveState:
    if b.get("jobId") != s.audit.job_id or s.audit.status == "recorded":
        return s
    return replace(s, audit=replace(s.audit, status="superseded"))


_APPLY: Final[dict[str, Callable[[ObjectiveState, Body, int], ObjectiveState]]] = {
    v.OBJECTIVE_PLANNED: _planned,
    v.SLOT_WAITING: _slot_waiting,
    v.SLOT_ACQUIRED: _slot_acquired,
    v.TASKS_READY: _ready,
    v.TASK_DISPATCHED: _dispatched,
    v.TASK_JOB_SETTLED: _job_settled,
    v.TASK_OUTCOME: _outcome,
    v.MONITOR_CHECKPOINT: _checkpoint,
    v.OBJECTIVE_BLOCKED: _blocked,
    v.NOTE_ADDED: _note,
    v.REACT_REQUESTED: _react,
    v.PROMOTE_REQUESTED: _set(promote_requested=True),
    v.ARCHIVED: _archived,
    v.CANCEL_REQUESTED: _set(cancel_requested=True),
    v.CANCELED: _terminal("canceled"),
    v.FAILED: _terminal("failed"),
    v.COMPLETED: _terminal("completed"),
    v.EVIDENCE_READY: _set(status="evidence_ready", phase=v.PHASE_SYNTHESIZE),
    v.SYNTHESIZED: _synthesized,
    v.INTEGRATION_REQUESTED: _integration_requested,
    v.INTEGRATION_VALIDATING: _validating,
    v.INTEGRATION_VALIDATED: _validated,
    v.INTEGRATION_VALIDATION_FAILED: _validation_failed,
    v.PUBLISH_REQUESTED: _publish_requested,
    v.INTEGRATION_PROMOTED: _promoted,
    v.PUBLISH_FAILED: _publish_failed,
    v.CONTROL_REQUESTED: _control_requested,
    v.CONTROL_ENQUEUED: _control_enqueued,
    v.CONTROL_PASS: _control_pass,
    v.AUDIT_REQUESTED: _audit_requested,
    v.AUDIT_RECORDED: _audit_recorded,
    v.AUDIT_SUPERSEDED: _audit_superseded,
    v.WORKSPACE_CLEANED: _set(workspace_cleaned=True),
}

# Receipts that move the objective's status or plan: inert once it settled.
_STATUS_CHANGING: Final = frozenset(
    {
        v.OBJECTIVE_PLANNED,
        v.SLOT_WAITING,
        v.SLOT_ACQUIRED,
        v.TASKS_READY,
        v.TASK_DISPATCHED,
        v.OBJECTIVE_BLOCKED,
        v.REACT_REQUESTED,
        v.PROMOTE_REQUESTED,
        v.CANCEL_REQUESTED,
        v.CANCELED,
        v.FAILED,
        v.COMPLETED,
        v.EVIDENCE_READY,
        v.SYNTHESIZED,
        v.INTEGRATION_REQUESTED,
        v.INTEGRATION_VALIDATED,
        v.INTEGRATION_VALIDATION_FAILED,
        v.PUBLISH_REQUESTED,
        v.PUBLISH_FAILED,
    }
)
