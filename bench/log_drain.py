"""What the store-wide log and its checkpoints cost the drain, and what they store.

    .venv/bin/python bench/log_drain.py [--database-url URL] [--n 1000] [--reps 2]
                                        [--variants off,on,busy]
    .venv/bin/python bench/log_drain.py --smoke         # off and busy, N=20

Each repetition runs bench/delivery.py's drain (N no-op jobs enqueued and dispatched
untimed, then a driver and a chat runworker with 2 workers each; jobs/s from their
launch until every job is completed) once per variant, the order rotated from one
repetition to the next: `off`, RECEIPT_LOG_ENABLED=0 (no log loop); `on`, the defaults
(the log extended every 5 s in each runworker, a checkpoint every minute with new
receipts); `busy`, the log extended and a checkpoint made every second. Target: `on`
reaches at least 95 % of `off`, in the same run.

After the drains the log is caught up in this process and the bytes it stores are
reported beside the receipts' own: the tiles' table (with its index and TOAST) per leaf,
and the raw hashes and positions per leaf.
Output: the tables on stdout, JSON lines in bench/results/log_drain-<stamp>.jsonl,
progress on stderr. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import delivery
import smoke

VARIANTS = {
    "off": {"RECEIPT_LOG_ENABLED": "0"},
    "on": {"RECEIPT_LOG_ENABLED": "1"},
    "busy": {
        "RECEIPT_LOG_ENABLED": "1",
        "RECEIPT_LOG_INTERVAL_MS": "1000",
        "RECEIPT_CHECKPOINT_INTERVAL_MS": "1000",
    },
}
KEYS = sorted({key for env in VARIANTS.values() for key in env})


def one_drain(n: int, variant: str) -> dict[str, Any]:
    for key in KEYS:
        os.environ.pop(key, None)
    os.environ.update(VARIANTS[variant])  # the runworkers the drain launches inherit it
    record = delivery.drain(n, delivery.LOGS)
    [(size, checkpoints)] = delivery.sql(
        "SELECT COALESCE((SELECT size FROM receipt_log_head), 0), "
        "(SELECT count(*) FROM receipt_log_checkpoint)"
    )
    record.update(log_leaves_at_end=size, checkpoints=checkpoints)
    return record


def storage() -> dict[str, Any]:
    """Bytes per receipt of the receipts and of the log, the log caught up first."""
    from receipts import log

    while log.extend(now_ms=int(time.time() * 1000), wait_s=1.0, blocking=True).added:
        pass
    delivery.sql("VACUUM ANALYZE receipt_log_tile")
    [(receipts, receipt_bytes, leaves, tile_bytes, hash_bytes, seq_bytes)] = delivery.sql(
        "SELECT (SELECT count(*) FROM receipt_receipt), "
        "pg_total_relation_size('receipt_receipt'), "
        "(SELECT size FROM receipt_log_head), "
        "pg_total_relation_size('receipt_log_tile'), "
        "(SELECT sum(length(hashes)) FROM receipt_log_tile), "
        "(SELECT COALESCE(sum(length(seqs)), 0) FROM receipt_log_tile)"
    )
    return {
        "test": "log_storage",
        "receipts": receipts,
        "receipt_table_bytes_per_receipt": receipt_bytes / receipts,
        "leaves": leaves,
        "log_table_bytes_per_leaf": tile_bytes / leaves,
        "log_hash_bytes_per_leaf": hash_bytes / leaves,
        "log_position_bytes_per_leaf": seq_bytes / leaves,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url", default="postgres://root@127.0.0.1:5432/receipt_log_bench"
    )
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--variants", default="off,on,busy")
    args = smoke.parse(parser, {"n": 20, "reps": 1, "variants": "off,busy"})
    variants = args.variants.split(",")
    delivery.LOGS = Path(tempfile.mkdtemp(prefix="receipt-log-bench-"))
    os.environ.setdefault("RECEIPT_DATA_DIR", str(delivery.LOGS / "data"))
    delivery.setup_django(args.database_url, "orm")
    delivery.RESULTS.mkdir(parents=True, exist_ok=True)
    out = delivery.RESULTS / f"log_drain-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    rows: list[dict[str, dict[str, Any]]] = []
    for rep in range(args.reps):
        shift = rep % len(variants)
        figures: dict[str, dict[str, Any]] = {}
        for variant in variants[shift:] + variants[:shift]:
            record = one_drain(args.n, variant)
            record.update(rep=rep, variant=variant)
            print(json.dumps(record), file=sys.stderr, flush=True)
            with out.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
            figures[variant] = record
        rows.append(figures)
    for key in KEYS:
        os.environ.pop(key, None)
    stored = storage()
    with out.open("a") as handle:
        handle.write(json.dumps(stored) + "\n")
    report(rows, variants, stored, args, out)


def report(
    rows: list[dict[str, dict[str, Any]]],
    variants: list[str],
    stored: dict[str, Any],
    args: Any,
    out: Path,
) -> None:
    rate = "jobs_per_s_from_launch"
    others = [v for v in variants if v != "off"]
    print(f"\nDrain of {args.n} no-op jobs with the log off, on (defaults) and busy (1 s)\n")
    print(
        "| rep | "
        + " | ".join(f"{v} jobs/s" for v in variants)
        + " | "
        + " | ".join(f"{v} / off" for v in others)
        + " | checkpoints made |"
    )
    print("|---" * (1 + len(variants) + len(others) + 1) + "|")
    for rep, figures in enumerate(rows):
        print(
            f"| {rep} | "
            + " | ".join(f"{figures[v][rate]:.1f}" for v in variants)
            + " | "
            + " | ".join(f"{figures[v][rate] / figures['off'][rate]:.0%}" for v in others)
            + " | "
            + ", ".join(f"{v} {figures[v]['checkpoints']}" for v in others)
            + " |"
        )
    medians = {v: statistics.median(f[v][rate] for f in rows) for v in variants}
    print(
        "| median | "
        + " | ".join(f"{medians[v]:.1f}" for v in variants)
        + " | "
        + " | ".join(f"{medians[v] / medians['off']:.0%}" for v in others)
        + " | |"
    )
    print(
        f"\nStorage after the drains: {stored['receipts']} receipts at "
        f"{stored['receipt_table_bytes_per_receipt']:.0f} B each (table, indexes, TOAST); "
        f"the log {stored['log_table_bytes_per_leaf']:.1f} B per leaf (table, index, TOAST), "
        f"of which {stored['log_hash_bytes_per_leaf']:.1f} B hashes and "
        f"{stored['log_position_bytes_per_leaf']:.2f} B positions."
    )
    print(f"on / off, ratio of the medians: target >= 95 %. Records in {out}")


if __name__ == "__main__":
    main()
