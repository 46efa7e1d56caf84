"""The invariants a simulation checks after every step (C-1, C-2), and the final
liveness check.

Per job whose stream changed during the step (found from the global receipt sequence,
so a write nobody expected is checked too):

- `chain`: the stream verifies (S-6) and the stream row's head and count match it.
- `read_model`: the job row equals the fold of the receipts (J-5, S-5).
- `settles_once`: no settling receipt (completed, failed, canceled, lease_expired) is
  appended to a job that already settled in its retry cycle; the fold would ignore it
  (J-3), the stream would still say the job settled twice.
- `settled_is_final`: nothing but an operator's retry (`job.retried`, which starts the
  job's next cycle) is appended to a settled job.
- `attempts_increase`: the attempts of the stream's leases rise strictly, across retries
  too, so no fence is ever used twice.
- `virtual_time`: receipt timestamps never go back, and the runtime never read the wall
  clock while given `now_ms`.
- `attempts_bounded`: 0 <= attempts used since the latest retry <= maxAttempts.

Per active job:

- `one_live_fence`: at most one running attempt holds a fence that matches the job's
  active lease (two attempts with a live fence would both be allowed to settle).
- `recoverable`: a queued job has a pending delivery, or an execute task in the broker
  a worker would still claim, or the queued redrive (L-1) can still start one once min
  age and cooldown pass (a free dispatch key or delivery generation, D-3); a leased or
  running job has a lease that expires within one lease period, so lease expiry (L-2)
  will reach it.

At the end, `liveness`: every job the run created is terminal, settled by exactly one
receipt per retry cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from jobs import selectors
from jobs.core.names import recovery_generation_id
from jobs.core.reducer import reduce
from jobs.core.state import FenceOutcome, JobState
from jobs.core.vocabulary import (
    JOB_CANCELED,
    JOB_COMPLETED,
    JOB_FAILED,
    JOB_LEASE_EXPIRED,
    JOB_LEASED,
    JOB_RETRIED,
    JOB_STREAM_PREFIX,
    job_id_from_stream,
    job_stream,
)
from jobs.projector import row_for
from jobs.runtime import promises
from jobs.runtime.dispatch import MAX_GENERATIONS, redrive_key
from jobs.simulation.world import World
from jobs.timing_config import current_timing
from receipts import store
from receipts.core.chain import Receipt
from receipts.core.chain import verify as verify_chain

SETTLING_TYPES = frozenset({JOB_COMPLETED, JOB_FAILED, JOB_CANCELED, JOB_LEASE_EXPIRED})
PAGE = 1000


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    job: str | None = None  # the job's index label (j3)

    def to_wire(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "message": self.message, "job": self.job}


def settlements(receipts: list[Receipt]) -> tuple[JobState | None, list[str], list[str]]:
    """Fold `receipts`; return the state, the types of the receipts that found the job
    already settled and were settling types, and those of any other type but the retry
    that starts the job's next cycle."""
    state: JobState | None = None
    again: list[str] = []
    after: list[str] = []
    for receipt in receipts:
        was_settled = state is not None and state.is_terminal
        state = reduce(state, receipt)
        if was_settled and receipt.type != JOB_RETRIED:
            (again if receipt.type in SETTLING_TYPES else after).append(receipt.type)
    return state, again, after


def lease_attempts(receipts: list[Receipt]) -> list[int]:
    """The attempt of every lease of the stream, in order."""
    return [int(r.body["attempt"]) for r in receipts if r.type == JOB_LEASED]


class Checker:
    def __init__(self, world: World) -> None:
        self.world = world
        self.after_seq = store.last_seq()

    # ---- per step ------------------------------------------------------------------------

    def check(self) -> Violation | None:
        """Check every invariant; also refresh `world.active` from the job rows."""
        for job_id in self._touched():
            violation = self._check_stream(job_id)
            if violation is not None:
                return violation
        if self.world.clock.wall_reads:
            return Violation(
                "virtual_time",
                f"the runtime read the wall clock {self.world.clock.wall_reads} time(s)",
            )
        states = self._active_states()
        self.world.active = [i for i in self.world.active if not states[i].is_terminal]
        return self._check_fences(states) or self._check_recoverable(states)

    def _touched(self) -> list[str]:
        streams: set[str] = set()
        while True:
            page = store.read_global(after_seq=self.after_seq, prefix=JOB_STREAM_PREFIX, limit=PAGE)
            streams.update(r.stream for r in page)
            if page:
                self.after_seq = page[-1].seq or self.after_seq
            if len(page) < PAGE:
                break
        job_ids = [job_id_from_stream(s) or s for s in streams]
        return sorted(job_ids, key=self.world.index_of)

    def _check_stream(self, job_id: str) -> Violation | None:
        label = self.world.job_label(job_id)

        def broken(kind: str, detail: str) -> Violation:
            return Violation(kind, f"{label}: {detail}", label)

        stream = job_stream(job_id)
        receipts = store.read(stream)
        verification = verify_chain(stream, receipts)
        if not verification.ok:
            return broken("chain", verification.describe())
        info = store.stream_info(stream)
        if info is None or info.head != verification.head or info.count != len(receipts):
            return broken("chain", f"stream row {info} does not match its {len(receipts)} receipts")
        for before, receipt in pairwise(receipts):
            if receipt.ts < before.ts:
                return broken(
                    "virtual_time",
                    f"receipt {receipt.stream_seq} "
                    f"({receipt.type}) at {receipt.ts} is before "
                    f"{before.ts}",
                )
        state, again, after = settlements(receipts)
        if again:
            return broken(
                "settles_once", f"settled by {state and state.settled_by}, then {', '.join(again)}"
            )
        if after:
            return broken(
                "settled_is_final",
                f"settled by {state and state.settled_by}, then {', '.join(after)}",
            )
        attempts = lease_attempts(receipts)
        if any(b <= a for a, b in pairwise(attempts)):
            return broken(
                "attempts_increase", f"leases took attempts {attempts}, which do not rise strictly"
            )
        row = selectors.job_row(job_id)
        expected = row_for(state) if state is not None else None
        if row != expected:
            fields = sorted(
                k for k in (expected or row or {}) if (row or {}).get(k) != (expected or {}).get(k)
            )
            return broken(
                "read_model",
                f"the job row differs from the fold of its receipts in {', '.join(fields)}",
            )
        if state is not None and not 0 <= state.attempts_used <= state.max_attempts:
            return broken(
                "attempts_bounded",
                f"attempt {state.attempt}, {state.attempts_used} of "
                f"{state.max_attempts} since its latest retry",
            )
        return None

    def _active_states(self) -> dict[int, JobState]:
        ids = [self.world.job_ids[i] for i in self.world.active]
        by_id = {job.job_id: job for job in selectors.states(ids)}
        return {i: by_id[self.world.job_ids[i]] for i in self.world.active}

    def _check_fences(self, states: dict[int, JobState]) -> Violation | None:
        for index, job in states.items():
            live = [
                a
                for a in self.world.attempts()
                if a.job_index == index and a.fence.check(job) is FenceOutcome.OK
            ]
            if len(live) > 1:
                return Violation(
                    "one_live_fence",
                    f"j{index}: {len(live)} running attempts hold "
                    f"the live fence: "
                    f"{', '.join(a.label() for a in live)}",
                    f"j{index}",
                )
        return None

    def _check_recoverable(self, states: dict[int, JobState]) -> Violation | None:
        now = self.world.clock.now_ms
        queued = {i: j for i, j in states.items() if j.status == "queued"}
        pending = promises.jobs_with_pending([j.job_id for j in queued.values()], now_ms=now)
        waiting = {i: j for i, j in queued.items() if j.job_id not in pending}
        keys = {i: _start_keys(j) for i, j in waiting.items()}
        taken = promises.existing([k for ks in keys.values() for k in ks])
        claimable = self._claimable({j.job_id: j for j in waiting.values()})
        timing = current_timing()
        for index, job in states.items():
            if (
                index in waiting
                and all(k in taken for k in keys[index])
                and job.job_id not in claimable
            ):
                return Violation(
                    "recoverable",
                    f"j{index}: queued with no pending delivery, and "
                    f"every delivery generation of its redrive key "
                    f"is used: nothing can start it again",
                    f"j{index}",
                )
            if job.holds_lease:
                lease_ms = job.lease_ms or timing.job_lease_ms
                if job.lease_until is None or job.lease_until > now + lease_ms:
                    return Violation(
                        "recoverable",
                        f"j{index}: {job.status} with lease until "
                        f"{job.lease_until}, now {now}, lease "
                        f"{lease_ms} ms",
                        f"j{index}",
                    )
        return None

    def _claimable(self, jobs: dict[str, JobState]) -> set[str]:
        """Jobs with an execute task in the broker that a worker would still claim and
        lease: its promise row is pending and unclaimed (a promise past its timeout that
        the sweep has not marked yet still is) and it is for the next attempt."""
        held = [
            t.promise_id
            for tasks in self.world.broker.queues.values()
            for t in tasks
            if not t.is_driver and self.world.job_ids[t.job] in jobs
        ]
        return {
            job_id
            for job_id, attempt in promises.unclaimed_attempts(held)
            if attempt == jobs[job_id].attempt + 1
        }

    # ---- at the end -----------------------------------------------------------------------

    def check_liveness(self) -> Violation | None:
        """Every job the run created is terminal and settled by exactly one receipt."""
        stuck = []
        for index, job_id in enumerate(self.world.job_ids):
            # The fold settles a job with exactly one receipt; `again` holds any other
            # settling receipt appended after it.
            state, again, _ = settlements(store.read(job_stream(job_id)))
            if state is None or not state.is_terminal:
                stuck.append(
                    f"j{index} {state.status if state else 'missing'}"
                    f"{_why(state, self.world.clock.now_ms)}"
                )
            elif again:
                return Violation(
                    "liveness",
                    f"j{index}: settled by {state.settled_by}, then {', '.join(again)}",
                    f"j{index}",
                )
        if stuck:
            return Violation(
                "liveness",
                f"{len(stuck)} job(s) never settled: {'; '.join(stuck[:10])}",
                stuck[0].split()[0],
            )
        return None


def _start_keys(job: JobState) -> list[str]:
    """The promise ids `start_driver` would try for the redrive of `job` (D-3, L-1)."""
    return [redrive_key(job)] + [
        recovery_generation_id(job.job_id, g) for g in range(1, MAX_GENERATIONS + 1)
    ]


def _why(state: JobState | None, now: int) -> str:
    if state is None:
        return ""
    pending = promises.pending_for_job(state.job_id, now_ms=now)
    return (
        f" (attempt {state.attempt}/{state.max_attempts}, lease until {state.lease_until}, "
        f"{len(pending)} pending deliveries)"
    )
