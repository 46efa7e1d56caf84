"""The store-wide log in the store (issue 36 item 2): every receipt a leaf in commit
order, added only below the stable horizon, stored as tiles whose roots and proofs are
RFC 9162's, on both databases."""

from __future__ import annotations

import pytest

from receipts import log, store
from receipts.core.merkle import MemoryTree, leaf_hash, receipt_leaf
from receipts.models import LogTile
from receipts.models import Receipt as ReceiptRow

pytestmark = pytest.mark.django_db

NOW = 1_900_000_000_000


def append_many(streams: int, each: int, *, prefix: str = "t/s") -> None:
    for round_ in range(each):
        for s in range(streams):
            store.append(f"{prefix}{s}", {"type": "t.step", "n": round_}, now_ms=NOW + round_)


def reference() -> MemoryTree:
    """The tree of every receipt's hash in seq order, built in memory."""
    tree = MemoryTree()
    for h in ReceiptRow.objects.order_by("seq").values_list("hash", flat=True):
        tree.append(leaf_hash(receipt_leaf(h)))
    return tree


def test_every_receipt_becomes_a_leaf_in_seq_order_and_the_root_is_rfc_9162s():
    append_many(3, 100)  # 300 leaves: 9 full level-0 tiles, a partial one, and above
    extension = log.extend(now_ms=NOW)
    assert (extension.added, extension.size) == (300, 300)
    assert extension.covered_seq == store.last_seq()
    tree = reference()
    assert log.root(300) == tree.root()
    assert log.root(17) == tree.root(17)
    assert set(LogTile.objects.values_list("level", "number")) == {
        *((0, n) for n in range(10)),
        (1, 0),
    }


def test_extending_again_appends_only_what_is_new_and_keeps_the_old_roots():
    append_many(2, 5)
    log.extend(now_ms=NOW)
    old_root = log.root(10)
    append_many(2, 140, prefix="t/u")
    assert log.extend(now_ms=NOW).added == 280
    assert log.extend(now_ms=NOW).added == 0
    assert log.root(10) == old_root
    assert log.root(290) == reference().root()


def test_a_pass_appends_at_most_its_limit_and_the_next_goes_on():
    append_many(1, 30)
    first = log.extend(now_ms=NOW, limit=12)
    assert (first.added, first.size) == (12, 12)
    assert first.covered_seq < store.last_seq()
    assert log.extend(now_ms=NOW, limit=100).size == 30
    assert log.root(30) == reference().root()


def test_each_receipt_finds_its_leaf_by_its_seq():
    append_many(2, 150)
    log.extend(now_ms=NOW)
    seqs = list(ReceiptRow.objects.order_by("seq").values_list("seq", flat=True))
    assert [log.leaf_index(s) for s in (seqs[0], seqs[31], seqs[32], seqs[-1])] == [
        0,
        31,
        32,
        299,
    ]
    assert log.leaf_indexes(seqs[250:260]) == {s: 250 + i for i, s in enumerate(seqs[250:260])}
    assert log.leaf_index(seqs[-1] + 1) is None
    h = ReceiptRow.objects.get(seq=seqs[3]).hash
    assert log.leaf_at(3) == bytes.fromhex(h)
    assert log.leaf_at(300) is None


def test_receipts_above_the_horizon_wait(monkeypatch):
    append_many(1, 4)
    seqs = list(ReceiptRow.objects.order_by("seq").values_list("seq", flat=True))
    # a writer still open below the newest seq: the horizon stops before what it may hold
    monkeypatch.setattr(log, "stable_horizon", lambda wait_s=0.0: seqs[1])
    assert log.extend(now_ms=NOW).size == 2
    monkeypatch.undo()
    assert log.extend(now_ms=NOW).size == 4


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_slow_transaction_never_leaves_a_hole():
    """A receipt committed after a later seq was already visible still gets its leaf in
    seq order: the log waits below the open writer instead of skipping its seq."""
    import threading

    from django.db import connections, transaction

    store.append("t/before", {"type": "t.step"}, now_ms=NOW)
    assert log.extend(now_ms=NOW).size == 1
    drawn, release = threading.Event(), threading.Event()

    def slow() -> None:
        try:
            with transaction.atomic():
                store.append("t/slow", {"type": "t.step"}, now_ms=NOW)
                drawn.set()
                release.wait(20)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow)
    thread.start()
    try:
        assert drawn.wait(20)
        store.append("t/fast", {"type": "t.step"}, now_ms=NOW)  # a later seq, committed first
        held = log.extend(now_ms=NOW)
        assert (held.added, held.size) == (0, 1)  # nothing past the open writer's seq
    finally:
        release.set()
        thread.join(20)
    assert log.extend(now_ms=NOW, wait_s=5).size == 3
    leaves = [log.leaf_at(i) or b"" for i in range(3)]
    streams = [ReceiptRow.objects.get(hash=leaf.hex()).stream for leaf in leaves]
    assert streams == ["t/before", "t/slow", "t/fast"]
