"""Receipt's delivery figures, one figure per fresh process (bench/run_delivery runs it).

    .venv/bin/python bench/delivery_figures.py FIGURE [--database-url URL] [--broker orm|redis://..]
                                               [--n N] [--seed S] [--enqueue-kind KIND]

FIGURE is one of:
  drain           N no-op jobs enqueued and dispatched (untimed), then a driver and a chat
                  runworker with 2 workers each; launch -> every job completed (delivery.py).
  enqueue_single  10 warm-up enqueues, then N `jobs.queue.enqueue()` calls, perf_counter
                  around the loop (caller rate); the clock then runs on until every job has
                  its driver promise in jobs_delivery_promise (dispatched rate).
  enqueue_bulk    10 warm-up enqueues, then ONE `jobs.queue.enqueue_many()` call with N
                  requests (build_request included: the caller must validate), timed until
                  every job has its driver promise (dispatched rate; caller rate beside it).
  latency         enqueue -> handler start on an idle stack, N samples after 5 warm-ups.
Prints "RESULT <json>" on stdout (the peers' child.py convention), progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import delivery
from noise import Noise

WARMUP = 10
FIGURES = ("drain", "enqueue_single", "enqueue_bulk", "latency")


def enqueue_payload(kind: str, i: int) -> dict:
    return {"kind": kind, "authContext": {"userId": "bench", "organizationId": "bench"}, "i": i}


def _counts() -> dict:
    jobs = delivery.sql("SELECT count(*) FROM jobs_job")[0][0]
    return {"jobs_after": jobs, "dispatched_after": delivery.dispatched()}


def _warmed_up(kind: str) -> Noise:
    """Empty tables, WARMUP jobs enqueued and dispatched (untimed), a checkpoint, and the
    foreign-CPU meter started."""
    from jobs import queue

    delivery.reset()
    for k in range(WARMUP):
        queue.enqueue("bench-noop", enqueue_payload(kind, 900_000_000 + k))
    delivery.wait_dispatched(WARMUP, 60)
    delivery.sql("CHECKPOINT")
    return Noise(delivery.server_roots())


def enqueue_single(n: int, kind: str) -> dict:
    from jobs import queue

    noise = _warmed_up(kind)
    started = time.perf_counter()
    t_mono = time.monotonic()
    for i in range(n):
        queue.enqueue("bench-noop", enqueue_payload(kind, i))
    caller = time.perf_counter() - started
    t_done = delivery.wait_dispatched(n + WARMUP, 300)
    total = t_done - t_mono
    fields = noise.done()
    rec = {
        "test": "enqueue_single",
        "n": n,
        "kind": kind,
        "elapsed_s": caller,
        "caller_per_s": n / caller,
        "dispatched_per_s": n / total,
        "dispatch_lag_s": total - caller,
        "expected": n + WARMUP,
        **_counts(),
        **fields,
    }
    rec["ok"] = rec["jobs_after"] == rec["expected"] == rec["dispatched_after"]
    return rec


def enqueue_bulk(n: int, kind: str) -> dict:
    from jobs import queue

    noise = _warmed_up(kind)
    started = time.perf_counter()
    t_mono = time.monotonic()
    queue.enqueue_many(
        [queue.build_request("bench-noop", enqueue_payload(kind, i)) for i in range(n)]
    )
    caller = time.perf_counter() - started
    t_done = delivery.wait_dispatched(n + WARMUP, 600)
    total = t_done - t_mono
    fields = noise.done()
    rec = {
        "test": "enqueue_bulk",
        "n": n,
        "kind": kind,
        "elapsed_s": total,
        "caller_per_s": n / caller,
        "dispatched_per_s": n / total,
        "dispatch_lag_s": total - caller,
        "expected": n + WARMUP,
        **_counts(),
        **fields,
    }
    rec["ok"] = rec["jobs_after"] == rec["expected"] == rec["dispatched_after"]
    return rec


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("figure", choices=FIGURES)
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--broker", default="orm")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1001)
    parser.add_argument("--enqueue-kind", default="factory.dispatch")
    parser.add_argument("--logs", default=str(delivery.RESULTS / "delivery-logs"))
    args = parser.parse_args()
    # SIGTERM from the supervisor: unwind, so the finally blocks stop the runworkers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    delivery.setup_django(args.database_url, args.broker)
    if args.figure == "drain":
        rec = delivery.drain(args.n, logs)
    elif args.figure == "latency":
        rec = delivery.latency(args.n, logs, seed=args.seed)
    elif args.figure == "enqueue_single":
        rec = enqueue_single(args.n, args.enqueue_kind)
    else:
        rec = enqueue_bulk(args.n, args.enqueue_kind)
    from jobs.runtime import dispatch

    if getattr(dispatch, "OUTBOX", None) is not None:
        dispatch.OUTBOX.stop()
    delivery.reset()  # leave no queued work behind for the next figure or another bench
    rec["broker"] = "orm" if args.broker == "orm" else "redis"
    sys.stdout.write("RESULT " + json.dumps(rec) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip atexit work (the outbox is stopped, nothing else is pending)


if __name__ == "__main__":
    main()
