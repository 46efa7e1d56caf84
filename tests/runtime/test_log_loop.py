"""The store-wide log's loop in a real runworker (issue 36 item 2): a job's receipts
become leaves and a signed checkpoint covers them, which the store then extends."""

from __future__ import annotations

from pathlib import Path

import pytest

from receipts import checkpoints, log, log_verify, proofs, signing, store
from receipts.core.log_proofs import inclusion_fault
from tests.conftest import BACKEND, wait_for
from tests.runtime.helpers import enqueue, wait_status
from tests.support import generate_private_key_pem

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.django_db(transaction=True),
    # the loop's scheduling does not depend on the database; the log's SQL is tested on
    # both in tests/integration/receipts
    pytest.mark.skipif(BACKEND != "sqlite", reason="runs once, in the SQLite leg"),
]


def test_a_runworker_logs_every_receipt_and_signs_checkpoints(stack, tmp_path: Path):
    key = tmp_path / "log-key.pem"
    key.write_bytes(generate_private_key_pem())
    public = signing.load_private_key(key.read_bytes()).public_key()
    stack.start("chat", RECEIPT_LOG_ENABLED="0")
    stack.start(
        "driver",
        RECEIPT_LOG_INTERVAL_MS="200",
        RECEIPT_CHECKPOINT_INTERVAL_MS="1000",
        RECEIPT_CHECKPOINT_KEY_FILE=str(key),
    )
    job = enqueue("test-echo")
    wait_status(job.job_id, "completed")
    newest = store.read(job.stream)[-1]

    def covering() -> checkpoints.Stored | None:
        found = checkpoints.latest()
        index = log.leaf_index(newest.seq or 0)
        return found if found and index is not None and index < found.checkpoint.tree_size else None

    made = wait_for(covering, timeout=30, message="a checkpoint over the job's receipts")
    assert signing.signature_fault(made.checkpoint, public) is None
    result = log_verify.against(made.checkpoint, keys=[public])
    assert result.ok, result.findings
    assert result.leaves == made.checkpoint.tree_size
    proof = proofs.inclusion(proofs.locate(f"{job.stream}#1"), made)
    assert inclusion_fault(proof, made.checkpoint) is None
