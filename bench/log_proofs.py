"""Proof time of the store-wide log at a large leaf count, from the tiles in the database.

    .venv/bin/python bench/log_proofs.py [--database-url URL] [--leaves 10000000]
                                         [--proofs 2000] [--keep]
    .venv/bin/python bench/log_proofs.py --smoke    # 5,000 leaves, 20 proofs of each

Writes the tiles of a tree of --leaves leaves straight into receipt_log_tile (no
receipts: every level-0 tile holds the same 256 leaves, so every tile of a level is
the same and the tree is built in seconds, yet it is a consistent tree whose proofs
verify, stored row for row as a real log of that size is), then times, through
receipts.log.StoredTiles exactly as the API and the command line ask: inclusion proofs
of random leaves against the full tree, consistency proofs from random older sizes, and
the root of an older size. Each timed proof is one query for its tiles plus the folding;
every proof is then verified. Target: at most 10 ms a proof at 10 million leaves.

--database-url defaults to a bench database of its own, created if missing (SQLite:
sqlite:///path). Output: one line per figure on stdout, JSON lines in
bench/results/log_proofs-<stamp>.jsonl. Nothing asserts on time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import delivery
import smoke


def fill(leaves: int) -> float:
    """The tiles of a tree of `leaves` leaves; returns the seconds it took."""
    from receipts.core import log_tiles
    from receipts.core.log_tiles import TILE_HEIGHT, TILE_WIDTH
    from receipts.core.merkle import leaf_hash
    from receipts.models import LogHead, LogTile

    started = time.perf_counter()
    delivery.sql("TRUNCATE receipt_log_tile, receipt_log_head")
    leaf_row = [hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(TILE_WIDTH)]
    entries = b"".join(leaf_row)
    node = log_tiles.perfect_root([leaf_hash(x) for x in leaf_row])  # a full tile's root
    level, count, rows = 0, leaves, []
    while count:
        full, rest = divmod(count, TILE_WIDTH)
        for number in range(full + (1 if rest else 0)):
            width = TILE_WIDTH if number < full else rest
            seqs = None
            if level == 0:
                first = number * TILE_WIDTH + 1
                seqs = log_tiles.encode_seqs(range(first, first + width))
            rows.append(
                LogTile(
                    level=level,
                    number=number,
                    hashes=entries[: width * 32],
                    seqs=seqs,
                    first_seq=number * TILE_WIDTH + 1 if level == 0 else None,
                )
            )
            if len(rows) >= 2000:
                LogTile.objects.bulk_create(rows)
                rows = []
        # the next level: every complete tile of this level has the same root
        entries = node * TILE_WIDTH
        node = log_tiles.perfect_root([node] * TILE_WIDTH)
        level, count = level + 1, count >> TILE_HEIGHT
    LogTile.objects.bulk_create(rows)
    LogHead.objects.create(id=1, size=leaves, covered_seq=leaves)
    delivery.sql("VACUUM ANALYZE receipt_log_tile")
    return time.perf_counter() - started


def timed(label: str, samples: list[float]) -> dict:
    ordered = sorted(samples)
    figure = {
        "figure": label,
        "count": len(ordered),
        "mean_ms": statistics.fmean(ordered) * 1000,
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "max_ms": ordered[-1] * 1000,
    }
    print(
        f"{label:<28} mean {figure['mean_ms']:.2f} ms, p50 {figure['p50_ms']:.2f}, "
        f"p99 {figure['p99_ms']:.2f}, max {figure['max_ms']:.2f} ({len(ordered)})"
    )
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url", default="postgres://root@127.0.0.1:5432/receipt_log_proof_bench"
    )
    parser.add_argument("--leaves", type=int, default=10_000_000)
    parser.add_argument("--proofs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--keep", action="store_true", help="reuse the tiles of an earlier run")
    args = smoke.parse(parser, {"leaves": 5000, "proofs": 20})
    os.environ.setdefault("RECEIPT_DATA_DIR", "/tmp/receipt-log-proof-bench")
    delivery.setup_django(args.database_url, "orm")
    from receipts import log
    from receipts.core import merkle
    from receipts.core.merkle import leaf_hash

    n, rng = args.leaves, random.Random(args.seed)
    records = []
    if not (args.keep and log.head().size == n):
        spent = fill(n)
        print(f"tiles of {n:,} leaves written in {spent:.1f} s")
    [(rows, table_bytes)] = delivery.sql(
        "SELECT count(*), pg_total_relation_size('receipt_log_tile') FROM receipt_log_tile"
    )
    print(f"{rows:,} tiles, {table_bytes / n:.1f} bytes per leaf (table, index, TOAST)")
    records.append({"figure": "storage", "leaves": n, "tiles": rows, "bytes": table_bytes})
    source = log.StoredTiles()
    root = log.root(n)

    indexes = [rng.randrange(n) for _ in range(args.proofs)]
    samples, proofs = [], []
    for index in indexes:
        started = time.perf_counter()
        proofs.append(merkle.inclusion_proof(index, n, source))
        samples.append(time.perf_counter() - started)
    records.append(timed(f"inclusion proof, {n:,}", samples))
    leaf_tiles = {i: log.leaf_at(i) for i in indexes}
    for index, path in zip(indexes, proofs, strict=True):
        leaf = leaf_tiles[index]
        assert leaf is not None
        if merkle.inclusion_fault(index, n, leaf_hash(leaf), path, root) is not None:
            raise SystemExit(f"the inclusion proof of leaf {index} does not verify")

    olds = [rng.randrange(1, n) for _ in range(args.proofs)]
    samples, proofs = [], []
    for old in olds:
        started = time.perf_counter()
        proofs.append(merkle.consistency_proof(old, n, source))
        samples.append(time.perf_counter() - started)
    records.append(timed(f"consistency proof, {n:,}", samples))
    samples, roots = [], []
    for old in olds[: args.proofs // 4]:
        started = time.perf_counter()
        roots.append(merkle.root(old, source))
        samples.append(time.perf_counter() - started)
    records.append(timed("root of an older size", samples))
    for old, old_root, path in zip(olds, roots, proofs, strict=False):
        if merkle.consistency_fault(old, n, old_root, root, path) is not None:
            raise SystemExit(f"the consistency proof from {old} does not verify")
    print("every proof verified")
    delivery.RESULTS.mkdir(parents=True, exist_ok=True)
    out = delivery.RESULTS / f"log_proofs-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    with out.open("w") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in records)


if __name__ == "__main__":
    main()
