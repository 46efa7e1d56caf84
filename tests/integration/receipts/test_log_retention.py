"""Retention keeps the log's proofs working (issue 36 item 4): a prune removes a stream's
receipts but not its leaves, the tombstone names them, and inclusion proofs of what
was kept, consistency proofs of older checkpoints and `verify --against` a checkpoint
from before the prune all still hold."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs import queue, retention
from jobs.core.retention import Windows
from jobs.core.state import Fence
from receipts import checkpoints, log, proofs, store
from receipts.core import log_tiles
from receipts.core.log_proofs import consistency_fault, inclusion_fault
from receipts.core.retention import DAY_MS
from receipts.models import Receipt as ReceiptRow
from receipts.models import Tombstone

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]

NOW = 1_900_000_000_000
WINDOWS = Windows(default_days=30, watchdog_days=2, control_days=7)


def settled(*, days_ago: float) -> str:
    at = NOW - int(days_ago * DAY_MS)
    payload = {"kind": "factory.run", "authContext": {"userId": "u-1", "organizationId": "o"}}
    job_id = queue.enqueue("factory", payload, now_ms=at).job.job_id
    queue.lease(job_id, worker_id="w", now_ms=at)
    queue.complete(job_id, {"ok": True}, fence=Fence("w", 1), now_ms=at)
    return job_id


def checkpoint(at: int) -> checkpoints.Stored:
    log.extend(now_ms=at)
    made = checkpoints.make(now_ms=at, force=True)
    assert made is not None
    return made


def leaves_of(stream: str) -> list[int]:
    seqs = (
        ReceiptRow.objects.filter(stream=stream)
        .order_by("stream_seq")
        .values_list("seq", flat=True)
    )
    found = log.leaf_indexes(seqs)
    return [found[s] for s in seqs]


def verify_against(cp: checkpoints.Stored, tmp_path: Path) -> tuple[int, str]:
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps(cp.to_wire()))
    out = StringIO()
    try:
        call_command("receipts", "verify", "--against", str(kept), stdout=out)
    except CommandError as error:
        return error.returncode, out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def pruned(tmp_path: Path) -> dict[str, Any]:
    """Two old jobs interleaved with a kept one, a checkpoint, then a prune."""
    old_a = settled(days_ago=40)
    kept = settled(days_ago=1)
    old_b = settled(days_ago=45)
    before = checkpoint(NOW)
    leaves = {job: leaves_of(f"jobs/{job}") for job in (old_a, old_b)}
    old_hashes = {job: [r.hash for r in store.read(f"jobs/{job}")] for job in (old_a, old_b)}
    report = retention.prune(now_ms=NOW, windows=WINDOWS)
    assert (report.acted, report.errors) == (2, [])
    return {
        "before": before,
        "kept": kept,
        "old": (old_a, old_b),
        "leaves": leaves,
        "hashes": old_hashes,
    }


def test_the_tombstone_names_its_streams_leaves(pruned):
    for job in pruned["old"]:
        tombstone = Tombstone.objects.get(stream=f"jobs/{job}")
        named = [i for a, b in log_tiles.parse_ranges(tombstone.leaves) for i in range(a, b + 1)]
        assert named == pruned["leaves"][job]
        assert len(named) == tombstone.receipt_count
    assert store.verify_many(["retention/jobs"])["retention/jobs"].ok


def test_kept_receipts_still_prove_their_inclusion_in_old_and_new_checkpoints(pruned):
    after = checkpoint(NOW + 60_000)
    for cp in (pruned["before"], after):
        for n in range(1, 4):
            proof = proofs.inclusion(proofs.locate(f"jobs/{pruned['kept']}#{n}"), cp)
            assert inclusion_fault(proof, cp.checkpoint) is None


def test_an_old_checkpoint_is_still_extended_after_the_prune(pruned, tmp_path):
    after = checkpoint(NOW + 60_000)
    proof = proofs.consistency(pruned["before"], after)
    assert consistency_fault(proof, pruned["before"].checkpoint, after.checkpoint) is None
    code, output = verify_against(pruned["before"], tmp_path)
    assert code == 0, output
    assert "6 removed by retention" in output


def test_a_pruned_receipt_is_still_proved_by_its_stream_position(pruned):
    job = pruned["old"][1]
    located = proofs.locate(f"jobs/{job}#2")
    assert located.leaf == pruned["hashes"][job][1]
    proof = proofs.inclusion(located, pruned["before"])
    assert inclusion_fault(proof, pruned["before"].checkpoint) is None


def test_a_tombstone_claiming_other_leaves_is_found(pruned, tmp_path):
    job = pruned["old"][0]
    other = pruned["leaves"][pruned["old"][1]]
    Tombstone.objects.filter(stream=f"jobs/{job}").update(
        leaves=log_tiles.ranges_text(log_tiles.ranges(other))
    )
    code, output = verify_against(pruned["before"], tmp_path)
    assert code == 1
    assert f"LOG tombstone of jobs/{job}: leaf {other[-1]} is not its head" in output
    assert "RETENTION retention/jobs: tombstones of batch" in output  # its batch hash too


def test_a_prune_extends_the_log_over_its_streams_first():
    old = settled(days_ago=40)
    assert log.head().size == 0  # the loop has not run
    retention.prune(now_ms=NOW, windows=WINDOWS)
    tombstone = Tombstone.objects.get(stream=f"jobs/{old}")
    assert tombstone.leaves == "0-2"
    assert log.head().size >= 3
