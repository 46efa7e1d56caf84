"""The queue service (J-6 to J-11): the only writer of job receipts.

Every operation locks the job's stream, reads the job's state from the read model (equal
to the fold of its receipts, S-5), decides, and appends. Worker-side writes take the
attempt fence and return a typed outcome instead of raising when it is lost.
Enqueue never dispatches inside its transaction (D-2): listeners registered with
`on_commit_listeners` run after commit. `mutation_listeners` hear about every write
after its commit (the durable ledger W-3 and objective reconciliation O-8 follow it).
"""

from __future__ import annotations

import gc
import logging
import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from django.db import IntegrityError, connection, transaction

from jobs.core import bodies
from jobs.core.contracts import routed_group
from jobs.core.scheduling import due_at
from jobs.core.state import Command, Fence, FenceOutcome, JobState
from jobs.core.timing import TimingSettings, lease_ms_for
from jobs.core.vocabulary import (
    ACTIVE_STATUSES,
    COMMAND_TYPES,
    JOB_ENQUEUED,
    JOB_STREAM_PREFIX,
    LEASED_STATUSES,
    job_stream,
)
from jobs.core.wire import command_to_wire
from jobs.errors import InvalidRequest, JobIdTaken, JobNotFound, JobTerminal, SessionKeyConflict
from jobs.models import Job
from jobs.projector import CACHE_KEY, load_state, state_from_rows, state_read
from jobs.timing_config import current_timing
from jobs.validation import MAX_BY, EnqueueRequest, check_payload_size, check_text, warnings_for
from jobs.validation import build_request as build_request
from observability.logs import log_event
from receipts.clock import now_ms as wall_clock_ms
from receipts.core.chain import base36
from receipts.db import gathering, pipelined_transaction
from receipts.errors import ExpectedPrevMismatch
from receipts.store import (
    Joined,
    NewStream,
    StreamHandle,
    append_new_streams,
    chunk_bounds,
    open_stream,
    send_new_streams,
)

SINGLETON_CANCEL_REASON = "singleton cancel"
ABORT_REQUESTED_REASON = "abort requested"

# Listeners run after an enqueue commits (D-2: the dispatch pass wakes here), with the
# jobs it created and whether their deliveries were already opened by the enqueue's own
# statement (`joined_dispatch`).
on_commit_listeners: list[Callable[[list[JobState], bool], None]] = []
# Set by the runtime where a new job's delivery can open in the enqueue's own statement
# (PostgreSQL with the database broker: the promise row is the task, its wake-up a NOTIFY,
# both delivered only on commit): for [(job id, lease ms, priority, runAt or None)], (an
# INSERT with one JSON parameter, that parameter). At most one.
joined_dispatch: list[
    Callable[[list[tuple[str, int, int, int | None]]], tuple[str, Sequence[Any]]]
] = []
# Listeners run after any job write commits, once per write: (type of the write's last
# receipt, the job after the write, that receipt's body). A write may append several
# receipts (a lease with its first heartbeat): listeners should read the job, not count
# receipt types. Best-effort: a listener's exception is logged, never reaches the writer.
mutation_listeners: list[Callable[[str, JobState, dict[str, Any]], None]] = []
logger = logging.getLogger("receipt.queue")


class Outcome(StrEnum):
    """What a queue write did (J-11). Only APPLIED wrote a receipt."""

    APPLIED = "applied"
    FENCE_LOST = "fence_lost"  # the lease belongs to another worker or attempt
    TERMINAL = "terminal"  # the job already settled
    MISSING = "missing"  # no such job
    NOT_QUEUED = "not_queued"  # lease: somebody else holds the job
    NOT_DUE = "not_due"  # expire_lease: the lease has not passed


_FROM_FENCE = {
    FenceOutcome.OK: Outcome.APPLIED,
    FenceOutcome.LOST: Outcome.FENCE_LOST,
    FenceOutcome.TERMINAL: Outcome.TERMINAL,
    FenceOutcome.MISSING: Outcome.MISSING,
}


@dataclass(frozen=True)
class WriteResult:
    outcome: Outcome
    job: JobState | None
    commands: tuple[Command, ...] = ()

    @property
    def applied(self) -> bool:
        return self.outcome is Outcome.APPLIED


@dataclass(frozen=True)
class EnqueueResult:
    job: JobState
    created: bool
    steered: bool = False
    warnings: list[str] = field(default_factory=list)
    dispatched: bool = False  # its delivery opened in the enqueue's own statement


# ---- locking --------------------------------------------------------------------------


@contextmanager
def _locked(
    job_id: str, *, new: bool = False, known: JobState | None = None, assume: bool = False
) -> Iterator[tuple[StreamHandle, JobState | None]]:
    """Lock the job's stream and read its state (call inside transaction.atomic). `new`:
    a freshly generated id, whose stream and row almost surely do not exist yet. `known`:
    the job as the caller last wrote or read it; when the locked stream still ends at its
    head, nothing was appended since and it is the state (no read), else the row is read.
    `assume` (with `known`, inside `pipelined()` on PostgreSQL): it is the state, not
    waited for; the transaction fails as it commits if the stream moved (`open_stream`)."""
    read = None if new or known is not None else state_read(job_id)
    held = (known.head, known.receipt_count) if assume and known and known.head else None
    with open_stream(
        job_stream(job_id), savepoint=False, read=read, new=new, assume=held
    ) as handle:
        if not handle.existed:
            state = None
        elif known is not None and (handle.head, handle.count) == (
            known.head,
            known.receipt_count,
        ):
            state = known
        else:  # read under the lock; a generated id that exists after all reads it now
            state = state_from_rows(handle.read) if read else load_state(job_id)
        handle.cache[CACHE_KEY] = state
        yield handle, state
    if handle.appended and mutation_listeners:
        after, body = handle.cache.get(CACHE_KEY), handle.appended[-1].body
        if after is not None:
            _once_committed(lambda: _notify(body["type"], after, body))


def _once_committed(hook: Callable[[], None]) -> None:
    gathered = gathering()  # one statement: it commits as the block ends
    if gathered is not None:
        gathered.after(hook)
    else:
        transaction.on_commit(hook)


def _notify(kind: str, job: JobState, body: dict[str, Any]) -> None:
    for listener in list(mutation_listeners):
        try:
            listener(kind, job, body)
        except Exception as error:  # never fails the write that already committed
            log_event(
                logger,
                "queue.mutation_listener_failed",
                f"listener {getattr(listener, '__name__', listener)} failed on {kind} "
                f"of {job.job_id}: {error}",
                level=logging.WARNING,
                jobId=job.job_id,
            )


def _state(handle: StreamHandle) -> JobState:
    state = handle.cache[CACHE_KEY]
    assert state is not None
    return state


def _context(job: JobState, by: str | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {"jobId": job.job_id}
    if job.organization_id:
        context["organizationId"] = job.organization_id
    if job.objective_id:
        context["objectiveId"] = job.objective_id
    if job.task_id:
        context["taskId"] = job.task_id
    if by:
        context["actor"] = by
    return context


def _lock_session(session_key: str) -> None:
    # Serialise singleton enqueues on one key so two cannot both find it empty (J-7).
    # SQLite needs nothing: IMMEDIATE transactions already hold the database write lock.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [f"receipt:session:{session_key}"],
            )


def new_job_id(now: int) -> str:
    return f"{base36(now)}-{secrets.token_hex(6)}"


def new_command_id() -> str:
    return f"cmd-{secrets.token_hex(8)}"


# ---- enqueue (J-6 to J-9) ----------------------------------------------------------------


def enqueue(
    agent_id: Any, payload: Any, *, now_ms: int | None = None, **options: Any
) -> EnqueueResult:
    """Validate and enqueue one job; see `build_request` for the options."""
    return enqueue_many([build_request(agent_id, payload, **options)], now_ms=now_ms)[0]


def enqueue_many(
    requests: Sequence[EnqueueRequest],
    *,
    now_ms: int | None = None,
    organization: str | None = None,
) -> list[EnqueueResult]:
    """Enqueue validated requests in one transaction (batch enqueue, T-1), in order.

    Runs of plain requests (no job id: the id is generated; no singleton decision) are
    written set-based (`_enqueue_fresh`); any other request takes the per-request path
    where it stands, so it sees every job enqueued before it in the batch.

    `organization`: the caller is bound to it (Q-2). A known jobId of another
    organization's job (J-6 would return it) or a singleton session key with another
    organization's active jobs (J-7/J-8 would act on them) is refused, and the whole call
    rolls back: JobIdTaken / SessionKeyConflict, naming the request's index.
    """
    with _collector_paused(len(requests)):
        return _enqueue_many(requests, wall_clock_ms() if now_ms is None else now_ms, organization)


# Below this many requests a batch allocates too little for the cyclic collector to matter.
_PAUSE_COLLECTOR_FROM = 64


@contextmanager
def _collector_paused(size: int) -> Iterator[None]:
    """Every object a batch builds (receipts, bodies, folds, rows) lives until the call
    returns, so the cyclic garbage collector, run by allocation counts, walks them and
    every long-lived object of the process again and again and frees nothing: about a
    fifth of a large batch's CPU. It is paused for the call; reference counting frees as
    usual, and any cycle left behind is collected after."""
    if size < _PAUSE_COLLECTOR_FROM or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _enqueue_many(
    requests: Sequence[EnqueueRequest], now: int, organization: str | None
) -> list[EnqueueResult]:
    if organization is None and all(map(_plain, requests)):
        # Nothing to lock or decide: the store's own transaction (on PostgreSQL one
        # statement, outside a caller's transaction one round trip) is the whole write.
        fresh = _enqueue_fresh(requests, now)
        _after_commit(fresh)
        return fresh
    results: list[EnqueueResult] = []
    # Not pipelined: a taken id is caught here and redone under a savepoint, and statements
    # prepared after a failure inside one pipeline do not exist on the server.
    with transaction.atomic():
        run: list[EnqueueRequest] = []
        for index, request in enumerate(requests):
            if _plain(request):
                run.append(request)
                continue
            results += _enqueue_fresh(run, now)
            run = []
            if organization is not None:
                _refuse_foreign_session(index, request, organization)
            results.append(_enqueue_locked(request, now))
        results += _enqueue_fresh(run, now)
        if organization is not None:
            _refuse_foreign_jobs(requests, results, organization)
        _after_commit(results)
    return results


def _plain(request: EnqueueRequest) -> bool:
    """No job id (a new one is generated) and no singleton decision to take."""
    return request.job_id is None and (
        request.session_key is None or request.singleton_mode == "allow"
    )


def _after_commit(results: list[EnqueueResult]) -> None:
    """D-2: the dispatch pass wakes once the created jobs are committed (at once when they
    are), told which of them the enqueue's statement dispatched."""
    if not on_commit_listeners:
        return
    for dispatched in (True, False):
        jobs = [r.job for r in results if r.created and r.dispatched is dispatched]
        if jobs:
            transaction.on_commit(
                lambda jobs=jobs, dispatched=dispatched: [
                    listener(jobs, dispatched) for listener in on_commit_listeners
                ]
            )


def _refuse_foreign_session(index: int, request: EnqueueRequest, organization: str) -> None:
    if not request.session_key or request.singleton_mode == "allow":
        return
    _lock_session(request.session_key)  # the lock the enqueue takes (reentrant)
    if (
        Job.objects.filter(session_key=request.session_key, status__in=ACTIVE_STATUSES)
        .exclude(organization_id=organization)
        .exists()
    ):
        raise SessionKeyConflict(request.session_key, index=index)


def _refuse_foreign_jobs(
    requests: Sequence[EnqueueRequest], results: list[EnqueueResult], organization: str
) -> None:
    for index, (request, result) in enumerate(zip(requests, results, strict=True)):
        if result.job.organization_id != organization:
            if request.job_id is not None:
                raise JobIdTaken(request.job_id, index=index)
            raise SessionKeyConflict(request.session_key or "", index=index)


def _enqueue_fresh(requests: Sequence[EnqueueRequest], now: int) -> list[EnqueueResult]:
    """Plain requests with new ids: nothing to lock or decide, so every job stream is
    opened at once: the same receipts and rows as `_enqueue_locked`, a statement per chunk
    of jobs instead of four per job.

    On PostgreSQL the run is one pipelined transaction (`store.send_new_streams`): each
    chunk's statement is sent as soon as it is sealed, the results are built while the
    server writes, and the call waits for the server once, for the COMMIT. Nothing reads
    a receipt's global seq."""
    if not requests:
        return []
    try:
        results, written = _open_fresh(requests, now)
    except (ExpectedPrevMismatch, IntegrityError):  # a generated id that exists (2^-48)
        with transaction.atomic():  # that run rolled back: redo it with fresh ids
            return [_enqueue_locked(request, now) for request in requests]
    if written:

        def notify() -> None:
            for job, body in written:
                _notify(JOB_ENQUEUED, job, body)

        transaction.on_commit(notify)
    return results


def _open_fresh(
    requests: Sequence[EnqueueRequest], now: int
) -> tuple[list[EnqueueResult], list[tuple[JobState, dict[str, Any]]]]:
    """The results of `_enqueue_fresh`, and what the mutation listeners are to hear."""
    timing = current_timing()
    prefix, randomness = base36(now), secrets.token_hex(6 * len(requests))
    warned = {agent: warnings_for(agent) for agent in {r.agent_id for r in requests}}
    results: list[EnqueueResult] = []
    written: list[tuple[JobState, dict[str, Any]]] = []
    bounds = chunk_bounds(len(requests))
    # One chunk needs no transaction of its own: its statement is one (one round trip).
    with pipelined_transaction() if len(bounds) > 1 else nullcontext():
        for start, end in bounds:
            part = requests[start:end]
            new = [
                _fresh(f"{prefix}-{randomness[12 * i : 12 * i + 12]}", request, timing, now)
                for i, request in enumerate(part, start)  # ids as new_job_id(now)
            ]
            joined: list[bool] = []  # whether the store took the deliveries into its statement
            delivered = _joined(new, joined) if joined_dispatch else None
            handles = send_new_streams(new, now_ms=now, joined=delivered)
            if handles is None:
                handles = append_new_streams(new, now_ms=now, joined=delivered)
            for handle, request in zip(handles, part, strict=True):
                job = _state(handle)
                results.append(
                    EnqueueResult(
                        job,
                        created=True,
                        warnings=list(warned[request.agent_id]),
                        dispatched=bool(joined),
                    )
                )
                if mutation_listeners:
                    written.append((job, handle.appended[-1].body))
    return results, written


def _fresh(job_id: str, request: EnqueueRequest, timing: TimingSettings, now: int) -> NewStream:
    """The stream of a new job and its `job.enqueued`, as `_enqueue_locked` writes them."""
    body = _enqueued(job_id, request, timing, now)
    return NewStream(JOB_STREAM_PREFIX + job_id, body, _enqueue_context(job_id, request))


def _enqueued(
    job_id: str, request: EnqueueRequest, timing: TimingSettings, now: int
) -> dict[str, Any]:
    """The body of a new job's `job.enqueued` receipt (J-1): its `queue` is recorded only
    when it moves the job off its default route, and a `runAt` not ahead of `now` is left
    out (G-3: it means now)."""
    default = routed_group(request.agent_id, request.payload.get("kind"))
    queue = request.queue if request.queue != default else None
    return bodies.enqueued(
        job_id,
        agent_id=request.agent_id,
        lane=request.lane,
        payload=request.payload,
        max_attempts=request.max_attempts,
        session_key=request.session_key,
        singleton_mode=request.singleton_mode,
        lease_ms=lease_ms_for(request.agent_id, request.payload, timing, group=queue or default),
        queue=queue,
        run_at=due_at(request.run_at, now),
        priority=request.priority,
    )


def _joined(new: list[NewStream], used: list[bool]) -> Joined:
    """The new jobs' deliveries as rows of the enqueue's own statement; `used` records
    that the store took them."""
    dispatch = joined_dispatch[0]

    def rows(positions: Sequence[int]) -> tuple[str, Sequence[Any]]:
        used.append(True)
        return dispatch([_delivery_of(new[p].body) for p in positions])

    return rows


def _delivery_of(body: dict[str, Any]) -> tuple[str, int, int, int | None]:
    """What a new job's driver promise needs of its `job.enqueued` body."""
    return body["jobId"], body["leaseMs"], body.get("priority", 0), body.get("runAt")


def _enqueue_locked(request: EnqueueRequest, now: int) -> EnqueueResult:
    warnings = warnings_for(request.agent_id)
    if request.session_key and request.singleton_mode != "allow":
        _lock_session(request.session_key)
    if request.job_id is not None:
        existing = load_state(request.job_id)
        if existing is not None:  # J-6: returned unchanged, never disturbed
            return EnqueueResult(existing, created=False, warnings=warnings)
    if request.session_key and request.singleton_mode != "allow":
        steered = _apply_singleton(request, now)
        if steered is not None:
            return EnqueueResult(steered, created=False, steered=True, warnings=warnings)
    job_id = request.job_id or new_job_id(now)
    with _locked(job_id, new=request.job_id is None) as (handle, state):
        if state is not None:  # a concurrent enqueue with the same explicit id won
            return EnqueueResult(state, created=False, warnings=warnings)
        body = _enqueued(job_id, request, current_timing(), now)
        context = _enqueue_context(job_id, request)
        handle.append(body, now_ms=now, context=context)
        return EnqueueResult(_state(handle), created=True, warnings=warnings)


def _enqueue_context(job_id: str, request: EnqueueRequest) -> dict[str, Any]:
    context: dict[str, Any] = {"jobId": job_id}
    auth = request.payload.get("authContext")
    if isinstance(auth, dict) and isinstance(auth.get("organizationId"), str):
        context["organizationId"] = auth["organizationId"]
    for key in ("objectiveId", "taskId"):
        if isinstance(request.payload.get(key), str):
            context[key] = request.payload[key]
    if request.by:
        context["actor"] = request.by
    return context


def _session_jobs(session_key: str) -> list[str]:
    """Active job ids on a session key, newest first."""
    return list(
        Job.objects.filter(session_key=session_key, status__in=ACTIVE_STATUSES)
        .order_by("-created_at", "-id")
        .values_list("id", flat=True)
    )


def _apply_singleton(request: EnqueueRequest, now: int) -> JobState | None:
    """J-7/J-8/J-9. Returns the steered job for `steer` when one was active."""
    assert request.session_key is not None
    job_ids = _session_jobs(request.session_key)
    for job_id in sorted(job_ids):  # J-9 first; stable lock order
        _expire_if_due(job_id, now)
    active = _session_jobs(request.session_key)
    if request.singleton_mode == "steer":
        if not active:
            return None
        payload = {**request.payload, "fromSessionKey": request.session_key, "fromEnqueue": True}
        with _locked(active[0]) as (handle, job):
            if job is None or job.is_terminal:
                return None  # it settled since the scan: the new job is created instead
            _append_command(handle, job, "steer", payload, by=request.by, now=now)
            return _state(handle)
    for job_id in sorted(active):  # cancel
        with _locked(job_id) as (handle, job):
            if job is None or job.is_terminal:
                continue
            if job.status == "queued":
                handle.append(
                    bodies.canceled(job_id, reason=SINGLETON_CANCEL_REASON, by=request.by),
                    now_ms=now,
                    context=_context(job, request.by),
                )
            else:
                payload = {"reason": SINGLETON_CANCEL_REASON}
                _append_command(handle, job, "abort", payload, by=request.by, now=now)
    return None


# ---- commands (J-10) -----------------------------------------------------------------------


def _append_command(
    handle: StreamHandle, job: JobState, command: str, payload: Any, *, by: str | None, now: int
) -> dict[str, Any]:
    body = bodies.command(
        job.job_id, command_id=new_command_id(), command=command, payload=payload, by=by
    )
    handle.append(body, now_ms=now, context=_context(job, by))
    if command == "abort" and connection.vendor == "postgresql":
        # wakes the lease keepers at commit: the handler hears of it within a second
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify('receipt_abort', %s)", [job.job_id])
    return body


@dataclass(frozen=True)
class CommandResult:
    job: JobState
    command: dict[str, Any]  # wire form {id, command, lane, payload, by, createdAt, consumedAt}
    canceled: bool = False  # abort on a queued job canceled it outright


def command(
    job_id: str,
    command_type: str,
    payload: Any = None,
    *,
    by: str | None = None,
    reason: str | None = None,
    now_ms: int | None = None,
) -> CommandResult:
    """steer / follow_up / abort a job (J-10). Raises JobNotFound, JobTerminal, InvalidRequest."""
    if command_type not in COMMAND_TYPES:
        raise InvalidRequest(
            "invalid_command",
            f"command must be one of {', '.join(COMMAND_TYPES)}; got {command_type!r}",
        )
    check_text("invalid_by", "by", by, MAX_BY, required=False)
    check_text("invalid_reason", "reason", reason, 2000, required=False)
    if payload is not None:
        check_payload_size(payload)
    now = wall_clock_ms() if now_ms is None else now_ms
    with transaction.atomic(), _locked(job_id) as (handle, job):
        if job is None:
            raise JobNotFound(job_id)
        if job.is_terminal:
            if command_type == "abort":
                raise JobTerminal(
                    job_id,
                    job.status,
                    message=f"job {job_id} is already {job.status}; nothing to abort",
                )
            raise JobTerminal(job_id, job.status)
        if command_type == "abort":
            why = reason or ABORT_REQUESTED_REASON
            if job.status == "queued":
                handle.append(
                    bodies.canceled(job_id, reason=why, by=by),
                    now_ms=now,
                    context=_context(job, by),
                )
                wire = {
                    "id": None,
                    "command": "abort",
                    "lane": None,
                    "payload": {"reason": why},
                    "by": by,
                    "createdAt": now,
                    "consumedAt": now,
                }
                return CommandResult(_state(handle), wire, canceled=True)
            payload = {**(payload if isinstance(payload, dict) else {}), "reason": why}
        elif payload is None:
            payload = {}
        body = _append_command(handle, job, command_type, payload, by=by, now=now)
        state = _state(handle)
        sent = next(c for c in state.commands if c.id == body["commandId"])
        return CommandResult(state, command_to_wire(sent))


def steer(job_id: str, payload: Any, *, by: str | None = None) -> CommandResult:
    return command(job_id, "steer", payload, by=by)


def follow_up(job_id: str, payload: Any, *, by: str | None = None) -> CommandResult:
    return command(job_id, "follow_up", payload, by=by)


def abort(job_id: str, *, reason: str | None = None, by: str | None = None) -> CommandResult:
    return command(job_id, "abort", None, by=by, reason=reason)


# ---- an operator's retry (issue 34) --------------------------------------------------------


@dataclass(frozen=True)
class RetryWrite:
    """What `retry` did: the job after it, or why it wrote nothing (`refusal`, a code of
    `bodies.retry_refusal`, or "missing")."""

    job: JobState | None
    refusal: str | None = None

    @property
    def applied(self) -> bool:
        return self.refusal is None


def retry(
    job_id: str,
    *,
    by: str,
    include_canceled: bool = False,
    reason: str | None = None,
    now_ms: int | None = None,
) -> RetryWrite:
    """Return a failed job (a canceled one with `include_canceled`) to the queue with a
    fresh budget of attempts: `job.retried` with `by`. A refusal is an outcome, so a
    bulk retry's batch transaction survives it; starting the delivery is the caller's
    (`jobs.retry`). Joins the caller's transaction without a savepoint."""
    check_text("invalid_by", "by", by, MAX_BY, required=True)
    check_text("invalid_reason", "reason", reason, 2000, required=False)
    now = wall_clock_ms() if now_ms is None else now_ms
    with transaction.atomic(savepoint=False), _locked(job_id) as (handle, job):
        if job is None:
            return RetryWrite(None, "missing")
        refusal = bodies.retry_refusal(job, include_canceled=include_canceled)
        if refusal is not None:
            return RetryWrite(job, refusal)
        body = bodies.retried(job, by=by, reason=reason)
        handle.append(body, now_ms=now, context=_context(job, by))
        return RetryWrite(_state(handle))


# ---- worker side (fenced, J-11) -------------------------------------------------------------


def lease(
    job_id: str,
    *,
    worker_id: str,
    now_ms: int | None = None,
    lease_ms: int | None = None,
    start: bool = False,
    expect_attempt: int | None = None,
) -> WriteResult:
    """Take the next attempt of a queued job.

    With `start`, the first heartbeat is written in the same append (leased -> running),
    which is what a worker about to run the handler does: one transaction, not two.
    With `expect_attempt`, the lease is taken only as that attempt number (a delivery
    for attempt n never leases attempt n+1).
    """
    now = wall_clock_ms() if now_ms is None else now_ms
    with _worker_txn(), _locked(job_id) as (handle, job):
        if job is None:
            return WriteResult(Outcome.MISSING, None)
        if job.is_terminal:
            return WriteResult(Outcome.TERMINAL, job)
        if job.status != "queued":
            return WriteResult(Outcome.NOT_QUEUED, job)
        attempt = job.attempt + 1
        if expect_attempt is not None and attempt != expect_attempt:
            return WriteResult(Outcome.NOT_QUEUED, job)
        until = now + (lease_ms or job.lease_ms or current_timing().job_lease_ms)
        events = bodies.leased(job_id, Fence(worker_id, attempt), lease_until=until, start=start)
        return _applied(handle, job, events, now)


def _applied(
    handle: StreamHandle, job: JobState, events: Any, now: int, by: str | None = None
) -> WriteResult:
    """Append `events` to the locked job's stream: the write applied, the job after it."""
    handle.append(events, now_ms=now, context=_context(job, by))
    return WriteResult(Outcome.APPLIED, _state(handle))


def _worker_txn() -> Any:
    """Worker-side writes join the caller's transaction without a savepoint (two round
    trips saved on the hot path); a failure aborts the caller's whole transaction, which
    is what every caller wants (the attempt machine retries it as a unit)."""
    if gathering() is not None:  # the block is one statement, its own transaction
        return nullcontext()
    return transaction.atomic(savepoint=False)


class Start(StrEnum):
    """How a delivered attempt may begin (D-5), decided under the job's lock."""

    LEASED = "leased"  # queued -> leased and running under the new fence, one append
    MISSING = "missing"
    TERMINAL = "terminal_state"
    STALE = "stale_attempt"
    LEASE_LOST = "lease_lost"
    UNCLAIMED = "unclaimed"  # the delivery's claim was refused: nothing is decided
    HELD = "held"  # a limit refused the start (the gate's verdict): the job stays queued


def start_attempt(
    job_id: str,
    *,
    worker_id: str,
    attempt: int,
    now_ms: int | None = None,
    claimed: Callable[[], bool] | None = None,
    assumed: JobState | None = None,
    gate: Callable[[JobState], str | None | object] | None = None,
    clock: Callable[[], int] | None = None,
) -> tuple[Start, JobState | None]:
    """Begin attempt `attempt` as `worker_id` (D-5): lease a queued job with its first
    heartbeat in one append.

    Redelivered work (the job already leased for this attempt) never starts a second
    handler: under another holder it is `lease_lost`; under this very worker id a sibling
    process of the same runworker is running it (the claim of the promise already
    refused the same delivery twice), so it is `stale_attempt`.

    `claimed`: the outcome of the delivery's claim, sent before and known once the lock
    is held (they travel together); a refused claim decides and writes nothing.

    `assumed`: the job as the delivery saw it, decided on without waiting for the lock
    (see `_locked`); a stream that moved since fails the transaction as it commits.

    `gate`: asked under the lock, once the job may start: the limit key the attempt runs
    under (a str, or None), or anything else to refuse the start (`Start.HELD`).

    `clock`: read once more when the gate started the attempt under a cap's key. Its lock
    may have waited for a stopping job of the key to commit; stamped with the time taken
    before, the lease would read as begun before that job ended, more running than the
    cap at once in the receipts.
    """
    now = wall_clock_ms() if now_ms is None else now_ms
    with _worker_txn(), _locked(job_id, known=assumed, assume=True) as (handle, job):
        if claimed is not None and not claimed():
            return Start.UNCLAIMED, job
        if job is None:
            return Start.MISSING, None
        if job.is_terminal:
            return Start.TERMINAL, job
        if job.attempt > attempt or (job.attempt == attempt and job.status == "queued"):
            return Start.STALE, job
        if job.status == "queued":
            if job.attempt != attempt - 1:
                return Start.STALE, job
            verdict = gate(job) if gate is not None else None
            if verdict is not None and not isinstance(verdict, str):
                return Start.HELD, job
            if verdict is not None and clock is not None:
                now = max(now, clock())  # got the cap's key: stamped from then on
            until = now + (job.lease_ms or current_timing().job_lease_ms)
            fence = Fence(worker_id, attempt)
            events = bodies.leased(job_id, fence, lease_until=until, start=True, limit_key=verdict)
            handle.append(events, now_ms=now, context=_context(job))
            return Start.LEASED, _state(handle)
        if Fence(worker_id, attempt).check(job) is FenceOutcome.OK:
            return Start.STALE, job
        return Start.LEASE_LOST, job


def release_lease(
    job_id: str, *, holder: Fence, reason: str, now_ms: int | None = None
) -> WriteResult:
    """Expire the lease of a holder known to be gone (its process died or its runworker
    stopped), before `leaseUntil`: fenced, so a newer attempt is never touched (L-2)."""
    now = wall_clock_ms() if now_ms is None else now_ms
    with transaction.atomic(), _locked(job_id) as (handle, job):
        outcome = _FROM_FENCE[holder.check(job)]
        if outcome is not Outcome.APPLIED:
            return WriteResult(outcome, job)
        assert job is not None
        return _applied(handle, job, bodies.lease_expired(job, reason=reason), now)


def _fenced(
    job_id: str,
    fence: Fence,
    now_ms: int | None,
    make_body: Callable[[JobState, int], dict[str, Any] | None],
    known: JobState | None = None,
) -> WriteResult:
    now = wall_clock_ms() if now_ms is None else now_ms
    assume = known is not None and gathering() is not None  # one statement: never waits
    with _worker_txn(), _locked(job_id, known=known, assume=assume) as (handle, job):
        outcome = _FROM_FENCE[fence.check(job)]
        if outcome is not Outcome.APPLIED:
            return WriteResult(outcome, job)
        assert job is not None
        body = make_body(job, now)
        if body is None:
            return WriteResult(Outcome.APPLIED, job)
        return _applied(handle, job, body, now)


def heartbeat(job_id: str, *, fence: Fence, now_ms: int | None = None) -> WriteResult:
    """Extend the lease (and promote leased -> running). The result's job tells the worker
    whether an abort was requested."""

    def body(job: JobState, now: int) -> dict[str, Any]:
        until = now + (job.lease_ms or current_timing().job_lease_ms)
        return bodies.heartbeat(job_id, fence, lease_until=until)

    return _fenced(job_id, fence, now_ms, body)


def progress(job_id: str, data: Any, *, fence: Fence, now_ms: int | None = None) -> WriteResult:
    check_payload_size(data)
    return _fenced(
        job_id,
        fence,
        now_ms,
        lambda job, now: bodies.progress(job_id, fence, data),
    )


def complete(
    job_id: str,
    result: Any = None,
    *,
    fence: Fence,
    now_ms: int | None = None,
    known: JobState | None = None,
) -> WriteResult:
    """Settle the attempt completed. `known`: the job as the worker last saw it (see
    `_locked`), which spares the read when nothing happened to it since."""
    check_payload_size(result)
    return _fenced(
        job_id,
        fence,
        now_ms,
        lambda job, now: bodies.completed(job_id, fence, result),
        known,
    )


def fail(
    job_id: str,
    error: str,
    *,
    fence: Fence,
    no_retry: bool = False,
    result: Any = None,
    now_ms: int | None = None,
    known: JobState | None = None,
    retry_at: int | None = None,
) -> WriteResult:
    """Fail the attempt; it is retried (J-4) unless `no_retry` or attempts are used up,
    no sooner than `retry_at` when given (a retry policy's backoff). `known`: as for
    `complete`."""
    if result is not None:
        check_payload_size(result)

    return _fenced(
        job_id,
        fence,
        now_ms,
        lambda job, now: bodies.failed(
            job, fence, error, no_retry=no_retry, result=result, retry_at=retry_at
        ),
        known,
    )


def cancel(
    job_id: str,
    *,
    reason: str,
    by: str | None = None,
    fence: Fence | None = None,
    now_ms: int | None = None,
    known: JobState | None = None,
) -> WriteResult:
    """Cancel a job: fenced by a worker honouring an abort, or unfenced on a queued job.

    An unfenced cancel never hits work in flight: a leased or running job answers
    NOT_QUEUED and the caller sends an abort command instead (J-10). `known`: as for
    `complete` (fenced only).
    """
    if fence is not None:
        return _fenced(
            job_id,
            fence,
            now_ms,
            lambda job, now: bodies.canceled(job_id, reason=reason, by=by, fence=fence),
            known,
        )
    now = wall_clock_ms() if now_ms is None else now_ms
    with transaction.atomic(), _locked(job_id) as (handle, job):
        if job is None:
            return WriteResult(Outcome.MISSING, None)
        if job.is_terminal:
            return WriteResult(Outcome.TERMINAL, job)
        if job.status != "queued":
            return WriteResult(Outcome.NOT_QUEUED, job)
        return _applied(handle, job, bodies.canceled(job_id, reason=reason, by=by), now, by)


def consume_commands(
    job_id: str, *, fence: Fence, types: Sequence[str] | None = None, now_ms: int | None = None
) -> WriteResult:
    """Hand the worker its pending commands (optionally of some types) and mark them consumed."""
    taken: list[Command] = []

    def body(job: JobState, now: int) -> dict[str, Any] | None:
        taken.extend(c for c in job.pending_commands if types is None or c.command in types)
        if not taken:
            return None
        return bodies.commands_consumed(job_id, fence, [c.id for c in taken])

    result = _fenced(job_id, fence, now_ms, body)
    return WriteResult(result.outcome, result.job, tuple(taken) if result.applied else ())


def _expire_if_due(job_id: str, now: int) -> WriteResult:
    with _locked(job_id) as (handle, job):
        if job is None:
            return WriteResult(Outcome.MISSING, None)
        if job.is_terminal:
            return WriteResult(Outcome.TERMINAL, job)
        if job.status not in LEASED_STATUSES or job.lease_until is None or job.lease_until > now:
            return WriteResult(Outcome.NOT_DUE, job)
        return _applied(handle, job, bodies.lease_expired(job), now)


def expire_lease(job_id: str, *, now_ms: int | None = None) -> WriteResult:
    """J-4/L-2: expire the active lease if it has passed (requeue or fail)."""
    now = wall_clock_ms() if now_ms is None else now_ms
    with transaction.atomic():
        return _expire_if_due(job_id, now)


# ---- reads ---------------------------------------------------------------------------------


def get(job_id: str) -> JobState | None:
    return load_state(job_id)


def require(job_id: str) -> JobState:
    job = load_state(job_id)
    if job is None:
        raise JobNotFound(job_id)
    return job
