"""`manage.py receipts verify` reads the store's own checkpoints back: each linked to the
one before, signed by the configured key, still the root of the log's tree, and agreeing
with its index row. A rewrite of the checkpoints stream that was resealed to pass the
chain check is still found, on both databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from receipts import checkpoints, log_verify, store
from receipts.models import LogCheckpoint, LogTile, Stream
from receipts.models import Receipt as ReceiptRow
from tests.integration.receipts.test_checkpoints import (
    MINUTE,
    NOW,
    append,
    checkpoint_now,
    run,
    use_key,
)
from tests.integration.receipts.test_log_tamper import reseal

pytestmark = pytest.mark.django_db


@pytest.fixture
def three(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[checkpoints.Stored]:
    """Three signed checkpoints of a growing log."""
    use_key(monkeypatch, tmp_path)
    made = []
    for k in range(3):
        append(2, at=NOW + k * MINUTE)
        made.append(checkpoint_now(NOW + k * MINUTE))
    return made


def checkpoint_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("CHECKPOINT ")]


def test_an_untouched_chain_of_checkpoints_verifies(three):
    code, output = run("verify", "--strict")
    assert code == 0, output
    assert checkpoint_lines(output) == []
    assert "3 checkpoint(s), 0 faulty" in output
    code, output = run("verify", "--json")
    assert json.loads(output)["checkpoints"] == {
        "ok": True,
        "checked": 3,
        "findings": [],
        "moreFindings": 0,
    }


def test_a_prefix_that_does_not_cover_the_checkpoints_leaves_them_out(three):
    LogCheckpoint.objects.filter(number=2).delete()
    code, output = run("verify", "t/", "--strict")
    assert code == 0 and "checkpoint(s)" not in output, output
    code, output = run("verify", "checkpoints/", "--strict")
    assert code == 1
    assert checkpoint_lines(output) == [
        "CHECKPOINT checkpoint 2: has no index row: lookups by size or hash miss it"
    ]


def test_an_edited_index_row_is_found(three):
    LogCheckpoint.objects.filter(number=3).update(tree_size=1)
    assert [f.to_wire() for f in log_verify.own_checkpoints().findings] == [
        {
            "where": "checkpoint 3",
            "reason": "its index row says another size, hash, time or key",
        }
    ]


def test_an_index_row_of_no_checkpoint_is_found(three):
    LogCheckpoint.objects.create(
        number=9, tree_size=99, hash="0" * 64, timestamp_ms=NOW, key_id=None
    )
    found = log_verify.own_checkpoints()
    assert [(f.where, f.reason) for f in found.findings] == [
        ("checkpoint 9", "is indexed but not on the checkpoints stream")
    ]


def test_a_resealed_rewrite_of_a_checkpoint_passes_the_chain_but_not_the_audit(three):
    """An attacker with the database but not the key rewrites checkpoint 2 to claim another
    tree, and reseals the stream after it so that its chain and stream row agree again."""
    rows = list(ReceiptRow.objects.filter(stream=checkpoints.STREAM).order_by("stream_seq"))
    forged = dict(rows[1].body)
    forged["checkpoint"] = {**forged["checkpoint"], "rootHash": "ab" * 32}
    head = reseal(rows[1], prev=rows[0].hash, body=forged)
    head = reseal(rows[2], prev=head)
    Stream.objects.filter(name=checkpoints.STREAM).update(head=head)
    assert store.verify(checkpoints.STREAM).ok  # the chain and its stream row agree

    code, output = run("verify", "--strict")
    assert code == 1, output
    assert "BROKEN" not in output
    lines = checkpoint_lines(output)
    assert "CHECKPOINT checkpoint 2: the log's tree no longer gives its root" in lines
    assert any(
        line.startswith("CHECKPOINT checkpoint 2: ") and "signature" in line for line in lines
    )
    assert "CHECKPOINT checkpoint 2: its index row says another size, hash, time or key" in lines
    assert "CHECKPOINT checkpoint 3: previous does not name the checkpoint before it" in lines


def test_a_rewritten_tile_of_the_log_no_longer_gives_the_checkpoints_roots(three):
    tile = LogTile.objects.get(level=0, number=0)
    hashes = bytes(tile.hashes)
    LogTile.objects.filter(level=0, number=0).update(hashes=b"\x00" * 32 + hashes[32:])
    found = log_verify.own_checkpoints()
    assert [(f.where, f.reason) for f in found.findings] == [
        (f"checkpoint {n}", "the log's tree no longer gives its root") for n in (1, 2, 3)
    ]
