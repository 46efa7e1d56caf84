"""Synthetic job stores for bench/scale.py (T-5): realistic receipts, sealed and folded
with the real code, loaded with COPY.

Every job stream is sealed with `receipts.core.chain.seal` (so `store.verify` passes on
it), folded with `jobs.core.reducer.reduce` and turned into its read-model row with
`jobs.projector.row_for` (so the admin and the API read what the projector would have
written). Rows are written as COPY text blocks by worker processes (fork) and loaded by
the parent in chunks, with the secondary indexes dropped during the load and rebuilt
after it (from their own definitions), then ANALYZE.

Two scenarios:
- `mixed`: settled and active jobs. ~88 % settled (completed, failed, some after a retry,
  canceled) over the last 28 days (inside the 30-day retention window), ~12 % active
  (queued, leased, running) from the last two hours; commands on a few; 1-3 progress
  reports on some; one driver promise per job.
- `backlog`: a queue without workers: 40 % of the jobs queued (one receipt each, their
  driver promise timed out), the rest settled history as in `mixed`.
- `queue`: a deep backlog, cheap to build: 80 % of the jobs queued as in `backlog`, the
  rest settled (at 250k jobs: 200k queued).
- `queued`: every job queued, as a batch endpoint leaves them with no workers: batches of
  BATCH jobs of one agent sharing their `created_at` (one `enqueue_many`), over the last
  two days, each with its driver promise pending and deliverable. One receipt a job.
"""

from __future__ import annotations

import json
import random
from typing import Any

AGENTS = (  # (agent id, weight, kinds)
    ("factory", 30, ("factory.run", "factory.task.run", "factory.dispatch")),
    ("factory-monitor", 12, ("factory.task.monitor",)),
    (
        "codex",
        12,
        ("factory.task.run", "factory.integration.validate", "factory.integration.publish"),
    ),
    ("factory-control", 6, ("factory.objective.control", "factory.objective.audit")),
    ("bench-noop", 10, ("factory.dispatch",)),
    *((f"agent-{n:02d}", 1, ("factory.run", "factory.dispatch")) for n in range(30)),
)
LANES = (("collect", 60), ("chat", 30), ("steer", 5), ("follow_up", 5))
ERRORS = (
    "TimeoutError: the model did not answer within 600 s",
    "RuntimeError: git push rejected (non-fast-forward)",
    "ValueError: payload.prompt is empty",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
)
DAY = 86_400_000
HOUR = 3_600_000

# outcome -> share, per scenario
MIXED = (
    ("completed", 780),
    ("failed", 45),
    ("retry_completed", 35),
    ("canceled", 20),
    ("queued", 40),
    ("queued_retry", 10),
    ("leased", 20),
    ("running", 50),
)
BACKLOG = (
    ("completed", 500),
    ("failed", 40),
    ("retry_completed", 30),
    ("canceled", 30),
    ("queued", 400),
)
QUEUE = (
    ("completed", 150),
    ("failed", 20),
    ("retry_completed", 10),
    ("canceled", 20),
    ("queued", 800),
)
QUEUED = (("queued", 1),)
MIXES = {"mixed": MIXED, "backlog": BACKLOG, "queue": QUEUE, "queued": QUEUED}
BATCH = 100  # jobs per batch of the `queued` scenario (one agent, one created_at)
ACTIVE = frozenset({"queued", "queued_retry", "leased", "running"})


def _pick(rng: random.Random, table: tuple) -> Any:
    return rng.choices([t[0] for t in table], [t[1] for t in table])[0]


def plan(n: int, scenario: str, now: int, seed: int) -> list[tuple[int, str]]:
    """(created_at, outcome) per job, in created order (the table fills in time order)."""
    rng = random.Random(seed)
    table = MIXES[scenario]
    out = []
    if scenario == "queued":  # batches: one created_at per BATCH jobs
        for start in range(0, n, BATCH):
            created = now - rng.randrange(60_000, 2 * DAY)
            out += [(created, "queued")] * min(BATCH, n - start)
        out.sort()
        return out
    for _ in range(n):
        outcome = _pick(rng, table)
        if outcome in ACTIVE and scenario == "mixed":
            created = now - rng.randrange(60_000, 2 * HOUR)
        elif outcome in ACTIVE:  # a backlog built up over the last two days
            created = now - rng.randrange(60_000, 2 * DAY)
        else:
            created = now - rng.randrange(10 * 60_000, 28 * DAY)
        out.append((created, outcome))
    out.sort()
    return out


def _esc(value: Any) -> str:
    if value is None:
        return "\\N"
    text = value if isinstance(value, str) else str(value)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = (
            text.replace("\\", "\\\\")
            .replace("\t", "\\t")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
        )
    return text


def _line(values: list[Any]) -> str:
    return "\t".join(_esc(v) for v in values) + "\n"


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


RECEIPT_COLUMNS = (
    "seq",
    "stream",
    "stream_seq",
    "receipt_id",
    "ts",
    "prev",
    "hash",
    "event_type",
    "body",
    "context",
    "sealed",
    "hints",
    "event_id",
)
STREAM_COLUMNS = ("name", "head", "receipt_count", "last_ts", "updated_at")
JOB_COLUMNS = (
    "id",
    "agent_id",
    "lane",
    "kind",
    "status",
    "session_key",
    "organization_id",
    "objective_id",
    "worker_group",
    "attempt",
    "lease_until",
    "created_at",
    "updated_at",
    "state",
)
PROMISE_COLUMNS = (
    "id",
    "function",
    "job_id",
    "attempt",
    "target_group",
    "dispatch_key",
    "state",
    "timeout_at",
    "created_at",
    "settled_at",
    "worker_id",
    "result",
    "available_at",
    "ordered_at",
)


def build_chunk(args: tuple[int, list[tuple[int, str]], int, int, str, int]) -> dict[str, Any]:
    """Seal, fold and render `items` (jobs number `first`..). Receipt lines come without
    their leading seq column (the parent numbers them in load order)."""
    from jobs.core.reducer import reduce
    from jobs.core.timing import TimingSettings, lease_ms_for
    from jobs.core.vocabulary import job_stream
    from jobs.projector import row_for
    from receipts.core.chain import base36, seal

    first, items, n_total, seed, scenario, now = args
    rng = random.Random(seed * 1_000_003 + first)
    from django.conf import settings

    timing = TimingSettings.from_config(settings.RECEIPT)
    n_orgs = max(5, n_total // 500)
    n_sessions = max(10, n_total // 20)
    n_objectives = max(5, n_total // 40)
    receipts: list[str] = []
    streams: list[str] = []
    jobs: list[str] = []
    promises: list[str] = []
    agent_weights = [a[1] for a in AGENTS]
    for offset, (created, outcome) in enumerate(items):
        index = first + offset
        if scenario == "queued":  # a batch is one agent's (its created_at names the batch)
            agent, _, kinds = random.Random(created).choices(AGENTS, agent_weights)[0]
        else:
            agent, _, kinds = rng.choices(AGENTS, agent_weights)[0]
        kind = rng.choice(kinds)
        job_id = f"{base36(created)}-{rng.getrandbits(48):012x}"
        stream = job_stream(job_id)
        org = f"org-{int(rng.paretovariate(1.2)) % n_orgs:04d}"
        payload: dict[str, Any] = {
            "kind": kind,
            "authContext": {"userId": f"user-{rng.randrange(5000)}", "organizationId": org},
            "prompt": f"job {index}: "
            + "summarise the ticket and propose a fix " * rng.randint(1, 4),
        }
        session = None
        if rng.random() < 0.3:
            session = f"chat:{rng.randrange(n_sessions)}"
        objective = task = None
        if (
            kind.startswith(("factory.task", "factory.objective", "factory.integration"))
            or rng.random() < 0.1
        ):
            objective = f"obj-{rng.randrange(n_objectives):06d}"
            payload["objectiveId"] = objective
            task = f"task-{rng.randrange(20)}"
            payload["taskId"] = task
        lane = _pick(rng, LANES)
        lease_ms = lease_ms_for(agent, payload, timing)
        max_attempts = 3
        context: dict[str, Any] = {"jobId": job_id, "organizationId": org}
        if objective:
            context["objectiveId"] = objective
            context["taskId"] = task
        events: list[tuple[int, list[dict[str, Any]], dict[str, Any]]] = []  # (ts, bodies, ctx)
        events.append(
            (
                created,
                [
                    {
                        "type": "job.enqueued",
                        "jobId": job_id,
                        "agentId": agent,
                        "lane": lane,
                        "payload": payload,
                        "maxAttempts": max_attempts,
                        "sessionKey": session,
                        "singletonMode": "allow",
                        "leaseMs": lease_ms,
                    }
                ],
                {**context},
            )
        )
        t = created
        worker_group = None
        final_ts_cap = now - 1000
        promise_settled, worker = None, None

        def step(ms: int, cap: int = final_ts_cap) -> int:
            nonlocal t
            t = min(t + ms, cap)
            return t

        attempts = {"retry_completed": 2, "queued_retry": 1}.get(outcome, 1)
        if outcome == "queued":
            attempts = 0
        if outcome == "canceled" and rng.random() < 0.5:
            attempts = 0
        for attempt in range(1, attempts + 1):
            worker = (
                f"{agent}:host-{rng.randrange(8)}:{rng.randrange(1000, 60000)}/{rng.randrange(4)}"
            )
            ts = step(rng.randrange(20, 3000) if attempt == 1 else rng.randrange(1000, 60000))
            if promise_settled is None:
                promise_settled = ts
            until = ts + lease_ms
            fence = {"workerId": worker, "attempt": attempt}
            leased = {"type": "job.leased", "jobId": job_id, **fence, "leaseUntil": until}
            if outcome == "leased":  # delivered, the handler not started yet
                events.append((ts, [leased], dict(context)))
                break
            events.append(
                (
                    ts,
                    [
                        leased,
                        {"type": "job.heartbeat", "jobId": job_id, **fence, "leaseUntil": until},
                    ],
                    dict(context),
                )
            )
            for p in range(rng.choice((0, 0, 1, 2, 3))):
                ts = step(rng.randrange(500, 120_000))
                events.append(
                    (
                        ts,
                        [
                            {
                                "type": "job.progress",
                                "jobId": job_id,
                                **fence,
                                "progress": {"step": p + 1, "note": "working"},
                            }
                        ],
                        dict(context),
                    )
                )
            if rng.random() < 0.05:  # an operator steers it
                ts = step(rng.randrange(500, 60_000))
                command_id = f"cmd-{rng.getrandbits(64):016x}"
                events.append(
                    (
                        ts,
                        [
                            {
                                "type": "queue.command",
                                "jobId": job_id,
                                "commandId": command_id,
                                "command": "steer",
                                "payload": {"text": "focus on the failing test"},
                                "by": "admin:ops",
                                "lane": "steer",
                            }
                        ],
                        {**context, "actor": "admin:ops"},
                    )
                )
                ts = step(rng.randrange(100, 5000))
                events.append(
                    (
                        ts,
                        [
                            {
                                "type": "queue.command.consumed",
                                "jobId": job_id,
                                "commandIds": [command_id],
                                **fence,
                            }
                        ],
                        dict(context),
                    )
                )
            if outcome == "running":
                ts = step(rng.randrange(1000, 30_000))
                events.append(
                    (
                        ts,
                        [
                            {
                                "type": "job.heartbeat",
                                "jobId": job_id,
                                **fence,
                                "leaseUntil": ts + lease_ms,
                            }
                        ],
                        dict(context),
                    )
                )
                break
            ts = step(rng.randrange(1000, 600_000))
            last = attempt == attempts
            if outcome in ("completed", "retry_completed") and last:
                events.append(
                    (
                        ts,
                        [
                            {
                                "type": "job.completed",
                                "jobId": job_id,
                                **fence,
                                "result": {
                                    "ok": True,
                                    "summary": "done",
                                    "tokens": rng.randrange(10**5),
                                },
                            }
                        ],
                        dict(context),
                    )
                )
            elif outcome == "canceled":
                events.append(
                    (
                        ts,
                        [
                            {
                                "type": "job.canceled",
                                "jobId": job_id,
                                "reason": "abort requested",
                                "by": "admin:ops",
                                **fence,
                            }
                        ],
                        dict(context),
                    )
                )
            else:
                retry = not last or outcome == "queued_retry"
                events.append(
                    (
                        ts,
                        [
                            {
                                "type": "job.failed",
                                "jobId": job_id,
                                **fence,
                                "error": rng.choice(ERRORS),
                                "noRetry": not retry,
                                "willRetry": retry,
                            }
                        ],
                        dict(context),
                    )
                )
        if outcome == "canceled" and attempts == 0:
            ts = step(rng.randrange(1000, 600_000))
            events.append(
                (
                    ts,
                    [
                        {
                            "type": "job.canceled",
                            "jobId": job_id,
                            "reason": "singleton cancel",
                            "by": "admin:ops",
                        }
                    ],
                    {**context, "actor": "admin:ops"},
                )
            )
        # seal and fold
        state = None
        prev = None
        stream_seq = 0
        for ts, bodies, ctx in events:
            for body in bodies:
                receipt = seal(
                    stream=stream,
                    prev=prev,
                    body=body,
                    ts=ts,
                    random_hex16=f"{rng.getrandbits(64):016x}",
                    context=ctx,
                )
                stream_seq += 1
                state = reduce(state, receipt)
                receipts.append(
                    _line(
                        [
                            stream,
                            stream_seq,
                            receipt.id,
                            ts,
                            prev,
                            receipt.hash,
                            body["type"],
                            _dumps(body),
                            _dumps(ctx),
                            receipt.sealed,
                            None,
                            None,
                        ]
                    )
                )
                prev = receipt.hash
        assert state is not None
        row = row_for(state)
        worker_group = row["worker_group"]
        streams.append(_line([stream, prev, stream_seq, state.updated_at, state.updated_at]))
        jobs.append(
            _line(
                [
                    row["id"],
                    row["agent_id"],
                    row["lane"],
                    row["kind"],
                    row["status"],
                    row["session_key"],
                    row["organization_id"],
                    row["objective_id"],
                    worker_group,
                    row["attempt"],
                    row["lease_until"],
                    row["created_at"],
                    row["updated_at"],
                    _dumps(row["state"]),
                ]
            )
        )
        # the job's driver promise (D-1)
        driver_timeout = created + max(lease_ms, 60_000) * 2
        if state.status == "queued":
            if scenario == "queued":  # no workers ever ran, no sweep either
                pstate, settled = "pending", None
            elif scenario != "mixed" or outcome == "queued_retry":
                pstate, settled = "timedout", None
            else:
                pstate, settled = "pending", None
        else:
            pstate, settled = "resolved", promise_settled or state.updated_at
        promises.append(
            _line(
                [
                    job_id,
                    "driver",
                    job_id,
                    None,
                    "driver",
                    job_id,
                    pstate,
                    driver_timeout,
                    created,
                    settled,
                    worker.split("/")[0] if worker and settled else None,
                    None,
                    created if pstate == "pending" else driver_timeout,
                    created,  # its place in the take order (priority 0)
                ]
            )
        )
    return {
        "receipts": receipts,
        "streams": "".join(streams),
        "jobs": "".join(jobs),
        "promises": "".join(promises),
        "count": len(items),
    }
