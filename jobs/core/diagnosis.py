"""Why is this job not running, or not done? (D-12) A pure function of gathered facts.

Every blocker is a code plus a sentence an operator can act on; facts are returned too,
so the answer can be checked rather than trusted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jobs.core import names
from jobs.core.contracts import routed_group
from jobs.core.groups import DECLARED_IN
from jobs.core.state import JobState
from jobs.core.vocabulary import RETRYABLE_STATUSES


@dataclass(frozen=True)
class PendingDelivery:
    id: str
    function: str  # driver | execute
    created_at: int
    timeout_at: int


@dataclass(frozen=True)
class HeldDelivery:
    """A delivery a limit holds back: a cap (`running` of `of` run under `key`) or a rate
    (`rate`, due again at `due_at`)."""

    limit: str
    kind: str  # cap | rate
    due_at: int
    key: str | None = None
    running: int = 0
    of: int = 0
    rate: str | None = None


COUNT_CAP = 1000  # counts gathered for diagnosis stop here; more reads "1000+"
BUSY_SHOWN = 3  # busy jobs named in a sentence


@dataclass(frozen=True)
class Capacity:
    """A worker group's slots against its work, as the shell counted them.

    `busy` and `queued_ahead` are bounded counts: the shell stops at COUNT_CAP + 1, so
    any value above COUNT_CAP means "more than COUNT_CAP".
    """

    group: str
    busy: int  # leased or running jobs routed to the group
    slots: int  # concurrency summed over the group's live processes
    busy_jobs: tuple[str, ...] = ()  # the oldest few busy job ids
    queued_ahead: int = 0  # queued jobs of the group enqueued before this one

    @property
    def saturated(self) -> bool:
        return self.slots > 0 and self.busy >= self.slots

    def to_wire(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "busy": min(self.busy, COUNT_CAP),
            "slots": self.slots,
            "busyJobs": list(self.busy_jobs),
            "queuedAhead": min(self.queued_ahead, COUNT_CAP),
            "capped": self.busy > COUNT_CAP or self.queued_ahead > COUNT_CAP,
            "saturated": self.saturated,
        }


def bounded_count(n: int, cap: int = COUNT_CAP) -> str:
    """A count that stopped at `cap` + 1, for people: 12, 1000, 1000+."""
    return f"{cap}+" if n > cap else str(n)


def slot_state(*, busy: int, slots: int) -> str:
    """A worker group at a glance: no live process, saturated, or how many slots are free."""
    if slots <= 0:
        return "no live process"
    if busy >= slots:
        return "saturated"
    return f"{slots - busy} free"


def capacity_detail(capacity: Capacity) -> str:
    """'codex 1/1 busy with j-7; 3 queued ahead': who holds the slots, who waits first."""
    group, busy = capacity.group, capacity.busy
    named = capacity.busy_jobs[:BUSY_SHOWN]
    holders = f" with {', '.join(named)}" if named else ""
    if named and busy > len(named):  # the rest, still bounded: 1001 busy reads "997+ more"
        holders += f" and {bounded_count(busy - len(named), COUNT_CAP - len(named))} more"
    return (
        f"waiting for a free {group} slot: {group} {bounded_count(busy)}/{capacity.slots} "
        f"busy{holders}; {bounded_count(capacity.queued_ahead)} queued ahead"
    )


@dataclass(frozen=True)
class Facts:
    job: JobState
    now_ms: int
    has_handler: bool
    live_processes: dict[str, int]  # cluster name -> live runworker processes
    pending: tuple[PendingDelivery, ...] = ()
    last_driver_start_ms: int | None = None
    min_age_ms: int = 30_000
    cooldown_ms: int = 15_000
    session_peers: tuple[str, ...] = ()  # other active jobs on the same session key
    generations_exhausted: bool = False  # every delivery generation (D-3) was used
    capacity: Capacity | None = None  # the routed group's slots, when the shell gathered them
    # The lease holder's runworker when the registry no longer sees it: (id, ms unseen).
    holder_gone: tuple[str, int] | None = None
    # Every worker group the deployment has (built-in and declared); None: not gathered.
    groups: tuple[str, ...] | None = None
    # The routed group's pause, when it is paused: (by, at ms).
    paused: tuple[str, int] | None = None
    held: HeldDelivery | None = None  # its delivery, held back by a limit
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Blocker:
    code: str
    detail: str

    def to_wire(self) -> dict[str, str]:
        return {"code": self.code, "detail": self.detail}


def held_detail(held: HeldDelivery, now: int) -> str:
    if held.kind == "cap":
        whose = f"key {held.key}" if held.key is not None else "the limit"
        return (
            f"held by the concurrency cap {held.limit}: {held.running} of {held.of} "
            f"running for {whose}; it starts as soon as one of them stops"
        )
    return (
        f"held by the rate limit {held.limit} ({held.rate}): due again at "
        f"{utc_text(held.due_at)} (in {human_ms(held.due_at - now)})"
    )


def human_ms(ms: int | float | None) -> str:
    """A duration for people: 850 ms, 12.0 s, 3m 05s, 2h 10m, 3d 4h (dashboard.js agrees)."""
    if ms is None:
        return "—"
    ms = max(0, int(ms))
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def utc_text(ms: int) -> str:
    """A moment for people, in UTC to the second: 2026-12-06 12:04:10 UTC."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def retried_detail(job: JobState) -> str:
    """'retried by alice at 2026-12-06 12:04:10 UTC after attempt 2 (boom); attempts 3 to 4
    are its new budget': the job's latest retry, for diagnosis and the job page."""
    if job.retried_by is None or job.retried_at is None:
        return "never retried"
    done = job.retried_after_attempt
    first, last = done + 1, done + job.max_attempts
    budget = f"attempt {first} is" if first == last else f"attempts {first} to {last} are"
    after = f"after attempt {done}" if done else "before any attempt ran"
    error = f" ({job.last_error})" if job.last_error else ""
    return (
        f"retried by {job.retried_by} at {utc_text(job.retried_at)} {after}{error}; "
        f"{budget} its new budget"
    )


def retrying_detail(job: JobState, due: int, now: int) -> str:
    """'retrying at 2026-12-06 12:04:10 UTC (in 8s) after attempt 2 failed: boom'."""
    error = f": {job.last_error}" if job.last_error else ""
    return (
        f"retrying at {utc_text(due)} (in {human_ms(due - now)}) "
        f"after attempt {job.attempt} failed{error}"
    )


def diagnose(facts: Facts) -> list[Blocker]:
    return list(_blockers(facts))


def _blockers(facts: Facts) -> Iterator[Blocker]:
    job, now = facts.job, facts.now_ms
    group = routed_group(job.agent_id, job.kind, job.queue)
    if job.is_terminal:
        reason = job.last_error or job.cancel_reason or "completed"
        again = "it will not run again"
        if job.status in RETRYABLE_STATUSES:
            again += " unless retried"
        yield Blocker("terminal", f"job is {job.status} ({reason}); {again}")
        return
    if job.retried_by is not None and job.attempt == job.retried_after_attempt:
        yield Blocker("retried", retried_detail(job))
    if not facts.has_handler:
        yield Blocker(
            "no_handler",
            f"no handler is registered for agent '{job.agent_id}': "
            f"a worker will fail it with No handler for agent "
            f"'{job.agent_id}'",
        )
    if job.abort_requested:
        yield Blocker(
            "abort_requested",
            f"abort requested ({job.abort_reason or 'no reason'}); the worker "
            "stops it at its next heartbeat",
        )
    if facts.groups is not None and group not in facts.groups:
        yield Blocker(
            "undeclared_group",
            f"the job runs on worker group '{group}', which this deployment no longer "
            f"declares (it has {', '.join(facts.groups)}): declare it again in "
            f"{DECLARED_IN}, or cancel the job and enqueue it elsewhere",
        )
    worker_cluster = names.worker_cluster(group)
    if facts.live_processes.get(worker_cluster, 0) == 0:
        yield Blocker(
            "no_live_process",
            f"no live runworker process serves group '{group}': "
            f"start `manage.py runworker --role {group}`",
        )
    if job.status == "queued" and facts.live_processes.get("driver", 0) == 0:
        yield Blocker(
            "no_live_driver",
            "no live driver process: start `manage.py runworker --role driver`",
        )
    if job.holds_lease:
        until = job.lease_until or 0
        if until <= now:
            yield Blocker(
                "lease_expired",
                f"lease of attempt {job.attempt} ({job.worker_id}) "
                f"passed {human_ms(now - until)} ago; the lease "
                "expiry loop will requeue or fail it",
            )
        elif facts.holder_gone is not None:
            process, unseen = facts.holder_gone
            yield Blocker(
                "holder_gone",
                f"attempt {job.attempt} is held by {job.worker_id}, "
                f"but its process {process} is gone (unseen for "
                f"{human_ms(unseen)}); its lease is released "
                "within seconds and the job runs again",
            )
        else:
            yield Blocker(
                "running",
                f"attempt {job.attempt} is held by {job.worker_id}; "
                f"lease expires in {human_ms(until - now)}",
            )
        return
    due = job.scheduled_for(now)
    if due is not None and job.attempt > 0:  # a retry policy's backoff
        yield Blocker("retrying", retrying_detail(job, due, now))
        return
    if due is not None:  # G-3: nothing below matters before its time
        yield Blocker(
            "scheduled",
            f"scheduled for {utc_text(due)} (in {human_ms(due - now)}); it is not "
            "dispatched before then",
        )
        return
    # queued. A paused queue comes first: nothing of the group starts until it is resumed.
    if facts.paused is not None:
        who, since = facts.paused
        yield Blocker(
            "queue_paused",
            f"queue paused by {who} at {utc_text(since)}: the group's jobs stay queued "
            f"until it is resumed (`manage.py jobs queues resume {group}`)",
        )
    if facts.held is not None:
        yield Blocker("held_by_limit", held_detail(facts.held, now))
    # A saturated group comes next: it is why a pending delivery does not move.
    # Without a live process the group has no slots and `no_live_process` already says so.
    capacity = facts.capacity
    if capacity is not None and capacity.saturated:
        yield Blocker("waiting_for_capacity", capacity_detail(capacity))
    if job.attempts_used >= job.max_attempts:
        yield Blocker(
            "attempts_exhausted", f"{job.attempts_used} of {job.max_attempts} attempts used"
        )
    for promise in facts.pending:
        yield Blocker(
            "delivery_pending",
            f"{promise.function} delivery {promise.id} pending for "
            f"{human_ms(now - promise.created_at)} (times out in "
            f"{human_ms(max(0, promise.timeout_at - now))})",
        )
    if not facts.pending and facts.generations_exhausted:
        yield Blocker(
            "delivery_exhausted",
            "every delivery generation was used and the job is still queued; "
            "the queued redrive no longer picks it up: redrive it by hand "
            f"(admin 'Redrive now', or `manage.py jobs redrive {job.job_id}`)",
        )
    elif not facts.pending:
        age = now - job.updated_at
        waits = []
        if age < facts.min_age_ms:
            waits.append(f"min age {human_ms(facts.min_age_ms - age)}")
        if facts.last_driver_start_ms is not None:
            since = now - facts.last_driver_start_ms
            if since < facts.cooldown_ms:
                waits.append(f"cooldown {human_ms(facts.cooldown_ms - since)}")
        if waits:
            yield Blocker(
                "redrive_pending",
                f"no delivery in flight; the queued redrive picks it up after "
                f"{' and '.join(waits)}",
            )
        else:
            yield Blocker(
                "awaiting_redrive",
                "no delivery in flight; the next queued redrive pass will start one",
            )
    if facts.session_peers:
        yield Blocker(
            "singleton_peers",
            f"other active jobs share session key '{job.session_key}': "
            f"{', '.join(facts.session_peers[:5])}",
        )
    return
