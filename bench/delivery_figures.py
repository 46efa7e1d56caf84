"""Receipt's delivery figures, one figure per fresh process (bench/run_delivery runs it).

    .venv/bin/python bench/delivery_figures.py FIGURE [--database-url URL] [--broker orm|redis://..]
                                               [--n N] [--seed S] [--enqueue-kind KIND]
    .venv/bin/python bench/delivery_figures.py FIGURE --smoke     # N=20

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
  task_drain, task_enqueue_single, task_latency
                  the same three through Django's task framework: `noop_task.enqueue(i)` of the
                  bench's `@task` (bench/handlers.py) on Receipt's backend instead of
                  `jobs.queue.enqueue`; the drain's untimed fill is 500 `.enqueue()` calls per
                  `transaction.atomic()` (the task API has no bulk enqueue).
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
import smoke
from noise import Noise

WARMUP = 10
FIGURES = ("drain", "enqueue_single", "enqueue_bulk", "latency")
TASK_PREFIX = "task_"  # task_<figure>: the figure through the task API
TASK_FIGURES = tuple(TASK_PREFIX + f for f in ("drain", "enqueue_single", "latency"))


def path_and_test(figure: str) -> tuple[str, str]:
    """("task", "drain") for task_drain, ("native", "drain") for drain."""
    if figure.startswith(TASK_PREFIX):
        return "task", figure.removeprefix(TASK_PREFIX)
    return "native", figure


def _counts() -> dict:
    jobs = delivery.sql("SELECT count(*) FROM jobs_job")[0][0]
    return {"jobs_after": jobs, "dispatched_after": delivery.dispatched()}


def _warmed_up(kind: str, path: str = "native") -> Noise:
    """Empty tables, WARMUP jobs enqueued on `path` and dispatched (untimed), a checkpoint,
    and the foreign-CPU meter started."""
    enqueue = delivery.enqueuer(path, kind)
    delivery.reset()
    for k in range(WARMUP):
        enqueue(900_000_000 + k)
    delivery.wait_dispatched(WARMUP, 60)
    delivery.sql("CHECKPOINT")
    return Noise(delivery.server_roots())


def enqueue_single(n: int, kind: str, path: str = "native") -> dict:
    enqueue = delivery.enqueuer(path, kind)
    noise = _warmed_up(kind, path)
    started = time.perf_counter()
    t_mono = time.monotonic()
    cpu = time.process_time()
    for i in range(n):
        enqueue(i)
    caller = time.perf_counter() - started
    cpu = time.process_time() - cpu
    t_done = delivery.wait_dispatched(n + WARMUP, 300)
    total = t_done - t_mono
    fields = noise.done()
    rec = {
        "test": "enqueue_single",
        "path": path,
        "n": n,
        "kind": "django.task" if path == "task" else kind,
        "elapsed_s": caller,
        "caller_per_s": n / caller,
        "caller_cpu_us": 1e6 * cpu / n,
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
        [queue.build_request("bench-noop", delivery.payload(i, kind)) for i in range(n)]
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
    parser.add_argument("figure", choices=FIGURES + TASK_FIGURES)
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--broker", default="orm")
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1001)
    parser.add_argument("--enqueue-kind", default="factory.dispatch")
    parser.add_argument("--logs", default=str(delivery.RESULTS / "delivery-logs"))
    args = smoke.parse(parser, {"n": 20})
    # SIGTERM from the supervisor: unwind, so the finally blocks stop the runworkers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    delivery.setup_django(args.database_url, args.broker)
    path, test = path_and_test(args.figure)
    if test == "drain":
        rec = delivery.drain(args.n, logs, path=path)
    elif test == "latency":
        rec = delivery.latency(args.n, logs, seed=args.seed, path=path)
    elif test == "enqueue_single":
        rec = enqueue_single(args.n, args.enqueue_kind, path)
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
