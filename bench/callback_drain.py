"""A slow callback receiver holds no worker: the drain with and without a callback URL.

    .venv/bin/python bench/callback_drain.py [--database-url URL] [--n 1000] [--reps 2]
                                             [--sleep-s 5] [--variants none,slow,fast]
    .venv/bin/python bench/callback_drain.py --smoke      # none and slow (0.5 s), N=20

Each repetition runs bench/delivery.py's drain (N no-op jobs enqueued and dispatched
untimed, then a driver and a chat runworker with 2 workers each; jobs/s from their
launch until every job is completed) once per variant, the order rotated from one
repetition to the next: `none`, no callback URL; `slow`, `RECEIPT_EVENT_CALLBACK_URL`
pointing at a receiver in this process that sleeps --sleep-s seconds before answering
each post (as long as the 5 s post timeout: the hung receiver of issue 31); optionally
`fast`, a receiver that answers at once (what the outbox itself costs). With a URL every
job records `dispatched` and `completed` callbacks, and the runworkers' senders post them
while the drain runs. Target: the drain with the slow receiver reaches at least 90 % of
the drain without a URL, in the same run.

Reported per repetition: each drain's jobs/s, the ratios to `none`, and the callbacks the
slow receiver had taken when its drain finished (posts received; rows by state); then
the medians and the ratio of the medians.
Output: the table on stdout, JSON lines in bench/results/callback_drain-<stamp>.jsonl,
progress on stderr. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import delivery
import smoke

URL_ENV = "RECEIPT_EVENT_CALLBACK_URL"


class SlowReceiver:
    """Takes every post and answers 200 after `sleep_s` (the sender's post times out
    first when sleep_s >= its 5 s timeout)."""

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s
        self.posts = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.posts += 1
                time.sleep(receiver.sleep_s)
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:  # the sender gave up first
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self._server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/receipt"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def callback_rows() -> dict[str, int]:
    return dict(delivery.sql("SELECT state, count(*) FROM jobs_callback GROUP BY state"))


def one_drain(n: int, url: str | None, receiver: SlowReceiver | None) -> dict[str, Any]:
    if url is None:
        os.environ.pop(URL_ENV, None)
    else:
        os.environ[URL_ENV] = url  # the runworkers the drain launches inherit it
    posts_before = receiver.posts if receiver else 0
    record = delivery.drain(n, delivery.LOGS)
    record["callback_url"] = url is not None
    if receiver is not None:
        record["posts_received"] = receiver.posts - posts_before
        record["callback_rows"] = callback_rows()  # as the drain's runworkers left them
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url", default="postgres://root@127.0.0.1:5432/receipt_callback_bench"
    )
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--sleep-s", type=float, default=5.0)
    parser.add_argument(
        "--variants",
        default="none,slow",
        help="drains per repetition, order rotated each repetition: none (no URL), slow "
        "(the sleeping receiver), fast (a receiver that answers at once: the outbox's own cost)",
    )
    args = smoke.parse(parser, {"n": 20, "reps": 1, "sleep_s": 0.5})
    variants = args.variants.split(",")
    # Logs, marker files and data of this run only: another bench may be running beside it.
    delivery.LOGS = Path(tempfile.mkdtemp(prefix="receipt-callback-bench-"))
    os.environ.setdefault("RECEIPT_DATA_DIR", str(delivery.LOGS / "data"))
    delivery.setup_django(args.database_url, "orm")
    delivery.RESULTS.mkdir(parents=True, exist_ok=True)
    out = delivery.RESULTS / f"callback_drain-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    receivers = {"slow": SlowReceiver(args.sleep_s), "fast": SlowReceiver(0.0)}
    rows: list[dict[str, dict[str, Any]]] = []
    try:
        for rep in range(args.reps):
            shift = rep % len(variants)
            figures: dict[str, dict[str, Any]] = {}
            for variant in variants[shift:] + variants[:shift]:
                receiver = receivers.get(variant)
                record = one_drain(args.n, receiver.url if receiver else None, receiver)
                record.update(rep=rep, variant=variant, receiver_sleep_s=args.sleep_s)
                print(json.dumps(record), file=sys.stderr, flush=True)
                with out.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
                figures[variant] = record
            rows.append(figures)
    finally:
        os.environ.pop(URL_ENV, None)
        for receiver in receivers.values():
            receiver.stop()
    report(rows, variants, args, out)


def report(
    rows: list[dict[str, dict[str, Any]]], variants: list[str], args: Any, out: Path
) -> None:
    rate = "jobs_per_s_from_launch"
    print(f"\nDrain of {args.n} no-op jobs; the slow receiver sleeps {args.sleep_s:g} s per post\n")
    others = [v for v in variants if v != "none"]
    print(
        "| rep | "
        + " | ".join(f"{v} jobs/s" for v in variants)
        + " | "
        + " | ".join(f"{v} / none" for v in others)
        + " | slow: posts taken, rows at the end |"
    )
    print("|---" * (1 + len(variants) + len(others) + 1) + "|")
    for rep, figures in enumerate(rows):
        slow = figures.get("slow", {})
        print(
            f"| {rep} | "
            + " | ".join(f"{figures[v][rate]:.1f}" for v in variants)
            + " | "
            + " | ".join(f"{figures[v][rate] / figures['none'][rate]:.0%}" for v in others)
            + f" | {slow.get('posts_received')}, {slow.get('callback_rows')} |"
        )
    medians = {v: statistics.median(f[v][rate] for f in rows) for v in variants}
    print(
        "| median | "
        + " | ".join(f"{medians[v]:.1f}" for v in variants)
        + " | "
        + " | ".join(f"{medians[v] / medians['none']:.0%}" for v in others)
        + " | |"
    )
    print(f"\nslow / none, ratio of the medians: target >= 90 %. Records in {out}")


if __name__ == "__main__":
    main()
