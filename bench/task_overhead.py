"""What Django's task framework adds to a Receipt job, in CPU, timed in one process.

    .venv/bin/python bench/task_overhead.py [--database-url URL] [--number 20000]
    .venv/bin/python bench/task_overhead.py --smoke     # 50 calls a round

- enqueue: `noop_task.enqueue(i)` with `jobs.queue.enqueue` replaced by a stub that
  returns a job enqueued before: everything the task API does around the queue's own
  enqueue (the framework's `Task.enqueue`, `validate_task`, the payload with its module
  path resolved and its arguments JSON-checked, the options, the `TaskResult`,
  `task_enqueued`). Beside it, the CPU of one real native `jobs.queue.enqueue` (its
  statement's round trip included, as a caller pays it).
- run: `run_task` (the handler of agent `django-task`: the task found by its module path,
  the running and finished `TaskResult`s, `task_started` / `task_finished`, the return
  value JSON-checked) against the native `bench-noop` handler; both write one marker line.

Every figure is the best of 5 rounds, so a busy machine moves it little; compare it with a
drain's CPU per job from bench/cpu_split.py. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
import timeit
from types import SimpleNamespace
from typing import cast
from unittest import mock

import delivery
import smoke


def best_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def native_enqueue_cpu_us(n: int) -> float:
    """process_time of real native enqueues, best of 3 rounds of n."""
    enqueue = delivery.enqueuer("native")
    rounds = []
    for _ in range(3):
        started = time.process_time()
        for i in range(n):
            enqueue(i)
        rounds.append((time.process_time() - started) / n * 1e6)
    return min(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", default="postgres://root@127.0.0.1:5432/receipt_bench")
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--native-n", type=int, default=500, help="real enqueues a round")
    args = smoke.parse(parser, {"number": 50, "native_n": 20})
    os.environ.setdefault("RECEIPT_LOG_LEVEL", "WARNING")  # as the drain's runworkers
    delivery.setup_django(args.database_url, "orm")
    os.environ["BENCH_MARKER"] = os.path.join(tempfile.mkdtemp(), "marker.log")
    from jobs import queue
    from jobs.handler_contract import HandlerContext
    from jobs.tasks import payload
    from jobs.tasks.handler import run_task

    handlers = importlib.import_module("bench.handlers")
    delivery.reset()
    body = payload.build(handlers.noop_task, (7,), {}, backend="default")
    enqueued = queue.enqueue(payload.AGENT_ID, body)
    native_job = queue.enqueue("bench-noop", delivery.payload(1)).job
    ctx = cast(HandlerContext, SimpleNamespace(attempt=1, worker_id="bench-worker"))
    after_complete = run_task(enqueued.job, ctx).after_complete
    assert after_complete is not None  # a successful task sends task_finished after it

    def run() -> None:
        done = run_task(enqueued.job, ctx).after_complete
        if done is not None:
            done()

    number = args.number
    with mock.patch.object(queue, "enqueue", new=lambda *_, **__: enqueued):
        task_layers = best_us(lambda: handlers.noop_task.enqueue(7), number)
    rec = {
        "enqueue_task_layers_us": task_layers,
        "enqueue_native_cpu_us": native_enqueue_cpu_us(args.native_n),
        "run_task_us": best_us(run, number),
        "run_native_handler_us": best_us(lambda: handlers.noop(native_job, ctx), number),
    }
    rec = {k: round(v, 1) for k, v in rec.items()}
    rec["enqueue_share"] = round(rec["enqueue_task_layers_us"] / rec["enqueue_native_cpu_us"], 3)
    delivery.reset()
    sys.stdout.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
