"""Properties of the store-wide log over random histories (issue 36 item 6): whatever the
order of appends, extensions, checkpoints and prunes, every inclusion and consistency
proof verifies, every checkpoint is still extended, and any single-row tamper before the
latest checkpoint is caught by `verify --against` it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from receipts import checkpoints, log, log_verify, proofs, store
from receipts.core.log_proofs import consistency_fault, inclusion_fault
from receipts.core.retention import Tombstone
from receipts.models import Receipt as ReceiptRow

pytestmark = pytest.mark.django_db

NOW = 1_900_000_000_000
STREAMS = ["t/a", "t/b", "t/c", "t/d"]

step = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(STREAMS), st.integers(1, 4)),
    st.tuples(st.just("extend"), st.integers(1, 30)),
    st.tuples(st.just("checkpoint")),
    st.tuples(st.just("prune"), st.sampled_from(STREAMS)),
)


class Rollback(Exception):
    """Ends an example, undoing what it wrote."""


@dataclass
class History:
    now: int = NOW
    pruned: dict[str, int] = field(default_factory=dict)  # stream -> receipts it had

    def run(self, action: tuple) -> None:
        self.now += 1000
        if action[0] == "append":
            _, stream, n = action
            if stream not in self.pruned:
                store.append(stream, [{"type": "t.step"}] * n, now_ms=self.now)
        elif action[0] == "extend":
            log.extend(now_ms=self.now, limit=action[1])
        elif action[0] == "checkpoint":
            log.extend(now_ms=self.now)
            checkpoints.make(now_ms=self.now, force=True)
        elif action[0] == "prune":
            self.prune(action[1])

    def prune(self, stream: str) -> None:
        info = store.stream_info(stream)
        if info is None or info.head is None or stream in self.pruned:
            return
        tombstone = Tombstone(
            stream=stream,
            family="t",
            receipt_count=info.count,
            head=info.head,
            final_status="completed",
            settled_at_ms=self.now,
            pruned_at_ms=self.now,
        )
        with transaction.atomic():
            store.remove_streams(
                [tombstone],
                retention_stream="retention/t",
                windows_days={},
                now_ms=self.now,
                by="t",
            )
        self.pruned[stream] = info.count


def _made() -> list[checkpoints.Stored]:
    latest = checkpoints.latest()
    return [] if latest is None else [checkpoints.by_number(n) for n in range(1, latest.number + 1)]


def _check_proofs(history: History) -> checkpoints.Stored:
    final = checkpoints.make(now_ms=history.now + 1, force=True) or checkpoints.latest()
    assert final is not None
    log.extend(now_ms=history.now + 1, limit=10_000)  # its own receipt too
    made = _made()
    for old in made:
        proof = proofs.consistency(old, final)
        assert consistency_fault(proof, old.checkpoint, final.checkpoint) is None
        assert log_verify.against(old.checkpoint).ok, log_verify.against(old.checkpoint).findings
    kept = ReceiptRow.objects.values_list("stream", "stream_seq")
    names = [f"{s}#{n}" for s, n in kept] + [
        f"{s}#{n}" for s, count in history.pruned.items() for n in range(1, count + 1)
    ]
    for name in names:
        located = proofs.locate(name)
        if located.index < final.checkpoint.tree_size:
            included = proofs.inclusion(located, final)
            assert inclusion_fault(included, final.checkpoint) is None, name
    return final


def _tamper(kind: str, target: ReceiptRow) -> None:
    rows = ReceiptRow.objects.filter(seq=target.seq)
    if kind == "edit body":
        rows.update(body={"type": "t.forged"})
    elif kind == "edit sealed":
        rows.update(sealed=target.sealed + " ")  # the same JSON, another text
    elif kind == "delete":
        rows.delete()
    elif kind == "move":
        rows.update(stream="t/elsewhere")
    elif kind == "rehash":
        rows.update(hash="f" * 64)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(step, min_size=1, max_size=14),
    st.sampled_from(["edit body", "edit sealed", "delete", "move", "rehash"]),
    st.data(),
)
def test_every_proof_verifies_and_every_single_row_tamper_is_caught(actions, tamper, data):
    try:
        with transaction.atomic():
            history = History()
            store.append("t/a", {"type": "t.step"}, now_ms=history.now)
            for action in actions:
                history.run(action)
            log.extend(now_ms=history.now + 1, limit=10_000)
            final = _check_proofs(history)
            covered = list(
                ReceiptRow.objects.filter(seq__lte=log.head().covered_seq)
                .exclude(stream="checkpoints/log")  # its newest may be past the checkpoint
                .order_by("seq")
            )
            in_tree = [
                r for r in covered if (log.leaf_index(r.seq) or 0) < final.checkpoint.tree_size
            ]
            target = data.draw(st.sampled_from(in_tree))
            _tamper(tamper, target)
            assert not log_verify.against(final.checkpoint).ok, (tamper, target.stream)
            raise Rollback
    except Rollback:
        pass
