"""Checkpoints and proofs of the store-wide log (issue 36 items 2 and 3): made on their
cadence, chained, signed with the configured key (or plainly unsigned), appended to
`checkpoints/log`; inclusion and consistency proofs from the command line that the
offline verifier accepts, on both databases."""

from __future__ import annotations

import dataclasses
import json
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs.runtime import store_log
from receipts import checkpoints, log, proofs, signing, store, verify_offline
from receipts.core.checkpoint import checkpoint_hash, link_fault
from receipts.core.log_proofs import consistency_fault, inclusion_fault
from receipts.errors import (
    CheckpointKeyError,
    CheckpointNotFound,
    InvalidReference,
    NotInCheckpoint,
    ReceiptNotFound,
)
from receipts.models import LogCheckpoint
from tests.support import generate_private_key_pem

pytestmark = pytest.mark.django_db

NOW = 1_900_000_000_000
MINUTE = 60_000


def use_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str = "log-key.pem") -> Path:
    """A fresh Ed25519 key in a file, named by RECEIPT_CHECKPOINT_KEY_FILE; returns the
    public key's file."""
    private = tmp_path / name
    private.write_bytes(generate_private_key_pem())
    public = tmp_path / (name + ".pub")
    public.write_bytes(signing.public_key_pem(signing.load_private_key(private.read_bytes())))
    monkeypatch.setattr(
        settings,
        "RECEIPT",
        dataclasses.replace(
            settings.RECEIPT, checkpoint_key_file=str(private), checkpoint_key=None
        ),
    )
    return public


def append(n: int, stream: str = "t/a", at: int = NOW) -> None:
    for i in range(n):
        store.append(stream, {"type": "t.step", "n": i}, now_ms=at)


def checkpoint_now(at: int) -> checkpoints.Stored:
    log.extend(now_ms=at)
    made = checkpoints.make(now_ms=at, interval_ms=MINUTE)
    assert made is not None
    return made


def run(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("receipts", *args, stdout=out)
    except CommandError as error:
        return error.returncode, out.getvalue() + str(error)
    return 0, out.getvalue()


# ---- making checkpoints -------------------------------------------------------------------


def test_without_a_key_a_checkpoint_is_unsigned_and_says_so():
    append(3)
    made = checkpoint_now(NOW)
    wire = made.to_wire()
    assert (wire["treeSize"], wire["signed"], wire["signature"], wire["keyId"]) == (
        3,
        False,
        None,
        None,
    )
    assert wire["rootHash"] == log.root(3).hex()
    receipt = store.read(checkpoints.STREAM)[0]
    assert receipt.body == {"type": checkpoints.MADE, "checkpoint": wire}
    assert LogCheckpoint.objects.get(number=1).hash == made.hash


def test_checkpoints_follow_their_cadence_and_chain_to_the_one_before():
    append(2)
    first = checkpoint_now(NOW)
    append(1, at=NOW + 1000)
    log.extend(now_ms=NOW + 1000)
    assert checkpoints.make(now_ms=NOW + 1000, interval_ms=MINUTE) is None  # not a minute yet
    second = checkpoints.make(now_ms=NOW + MINUTE, interval_ms=MINUTE)
    assert second is not None and second.number == 2
    assert second.checkpoint.previous == first.hash
    assert link_fault(first.checkpoint, second.checkpoint) is None
    # the first checkpoint's receipt and the third step are the new leaves
    assert second.checkpoint.tree_size == first.checkpoint.tree_size + 2


def test_a_quiet_store_makes_no_checkpoint_of_its_own_checkpoint_receipt():
    append(2)
    first = checkpoint_now(NOW)
    log.extend(now_ms=NOW + MINUTE)
    assert log.head().size == first.checkpoint.tree_size + 1  # the checkpoint's receipt
    assert checkpoints.make(now_ms=NOW + 10 * MINUTE, interval_ms=MINUTE) is None
    append(1, at=NOW + 10 * MINUTE)
    log.extend(now_ms=NOW + 10 * MINUTE)
    assert checkpoints.make(now_ms=NOW + 10 * MINUTE, interval_ms=MINUTE) is not None


def test_an_empty_log_makes_no_checkpoint():
    assert checkpoints.make(now_ms=NOW, interval_ms=MINUTE) is None
    assert checkpoints.latest() is None


def test_with_a_key_file_checkpoints_are_signed_and_verify_with_its_public_half(
    monkeypatch, tmp_path
):
    public = use_key(monkeypatch, tmp_path)
    append(4)
    made = checkpoint_now(NOW)
    key = signing.load_public_key(public.read_bytes())
    assert made.checkpoint.signed and made.checkpoint.key_id == signing.key_id(key)
    assert signing.signature_fault(made.checkpoint, key) is None
    assert checkpoints.public_key_pem() == public.read_bytes()


def test_a_key_that_cannot_be_read_makes_no_checkpoint_rather_than_an_unsigned_one(
    monkeypatch, tmp_path
):
    missing = tmp_path / "nowhere.pem"
    monkeypatch.setattr(
        settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, checkpoint_key_file=str(missing))
    )
    append(2)
    log.extend(now_ms=NOW)
    with pytest.raises(CheckpointKeyError, match="RECEIPT_CHECKPOINT_KEY_FILE"):
        checkpoints.make(now_ms=NOW)
    not_a_key = tmp_path / "junk.pem"
    not_a_key.write_text("not a key")
    monkeypatch.setattr(
        settings,
        "RECEIPT",
        dataclasses.replace(settings.RECEIPT, checkpoint_key_file=str(not_a_key)),
    )
    with pytest.raises(CheckpointKeyError):
        checkpoints.make(now_ms=NOW)
    assert checkpoints.latest() is None


def test_a_key_rotation_keeps_the_chain_and_each_checkpoint_names_its_key(monkeypatch, tmp_path):
    use_key(monkeypatch, tmp_path, "old.pem")
    append(2)
    first = checkpoint_now(NOW)
    use_key(monkeypatch, tmp_path, "new.pem")
    append(2, at=NOW + MINUTE)
    second = checkpoint_now(NOW + MINUTE)
    assert first.checkpoint.key_id != second.checkpoint.key_id
    assert second.checkpoint.previous == first.hash
    proof = proofs.consistency(first, second)
    assert consistency_fault(proof, first.checkpoint, second.checkpoint) is None


def test_the_loop_extends_the_log_and_checkpoints_on_its_cadence():
    config = dataclasses.replace(settings.RECEIPT, log_enabled=True, checkpoint_interval_ms=MINUTE)
    [loop] = store_log.loops(config, "driver")
    assert loop.interval_ms == config.log_interval_ms
    append(5)
    report = loop.run(NOW)
    assert (report.examined, report.acted) == (5, 1)
    assert loop.run(NOW + 1000).acted == 0
    assert store_log.loops(dataclasses.replace(config, log_enabled=False), "driver") == []


# ---- finding checkpoints ------------------------------------------------------------------


def test_checkpoints_are_found_by_number_hash_size_and_as_the_latest():
    append(2)
    first = checkpoint_now(NOW)
    append(2, at=NOW + MINUTE)
    second = checkpoint_now(NOW + MINUTE)
    assert checkpoints.resolve("latest").number == 2
    assert checkpoints.resolve("1").hash == first.hash
    assert checkpoints.resolve(second.hash).number == 2
    assert checkpoints.by_size(first.checkpoint.tree_size).number == 1
    assert checkpoints.first_covering(0).number == 1
    assert checkpoints.first_covering(first.checkpoint.tree_size).number == 2
    assert checkpoints.first_covering(second.checkpoint.tree_size) is None
    with pytest.raises(CheckpointNotFound):
        checkpoints.resolve("9")
    with pytest.raises(InvalidReference, match="checkpoint: 'yesterday'"):
        checkpoints.resolve("yesterday")
    with pytest.raises(InvalidReference, match="start at 1"):
        checkpoints.resolve("0")


# ---- proofs --------------------------------------------------------------------------------


def test_an_inclusion_proof_of_every_receipt_verifies_against_the_checkpoint():
    append(3, "t/a")
    append(4, "t/b")
    cp = checkpoint_now(NOW)
    for stream, count in (("t/a", 3), ("t/b", 4)):
        for n in range(1, count + 1):
            proof = proofs.inclusion_for(f"{stream}#{n}", "latest")
            assert inclusion_fault(proof, cp.checkpoint) is None
            assert proof.leaf == store.read(stream, after=n - 1, limit=1)[0].hash


def test_receipts_are_named_by_hash_position_or_id():
    append(2, "t/j-1")
    checkpoint_now(NOW)
    receipt = store.read("t/j-1")[1]
    by_hash = proofs.locate(receipt.hash)
    assert by_hash == proofs.locate("t/j-1#2") == proofs.locate("t/j-1/2")
    assert proofs.locate(receipt.id) == by_hash
    with pytest.raises(ReceiptNotFound):
        proofs.locate("t/j-1#3")
    with pytest.raises(InvalidReference, match="receipt: 'not a receipt'"):
        proofs.locate("not a receipt")


def test_a_receipt_newer_than_the_checkpoint_asks_for_a_later_one():
    append(2)
    checkpoint_now(NOW)
    append(1, "t/late", at=NOW + 1)
    with pytest.raises(NotInCheckpoint, match="not in the log yet"):
        proofs.inclusion_for("t/late#1")
    log.extend(now_ms=NOW + 1)
    with pytest.raises(NotInCheckpoint, match="ask for a later checkpoint"):
        proofs.inclusion_for("t/late#1")


def test_a_consistency_proof_between_any_two_checkpoints_verifies():
    made = []
    for minute in range(4):
        append(minute * 3 + 1, at=NOW + minute * MINUTE)
        made.append(checkpoint_now(NOW + minute * MINUTE))
    for i, old in enumerate(made):
        for new in made[i:]:
            proof = proofs.consistency(old, new)
            assert consistency_fault(proof, old.checkpoint, new.checkpoint) is None
    with pytest.raises(InvalidReference, match="old: checkpoint 3"):
        proofs.consistency(made[2], made[0])


# ---- the command line, and the offline verifier on its files --------------------------------


def test_a_client_checks_the_commands_files_with_the_offline_verifier(monkeypatch, tmp_path):
    public = use_key(monkeypatch, tmp_path)
    append(3, "t/j-1")
    assert run("checkpoint", "--make")[0] == 0
    kept = tmp_path / "checkpoint.json"
    kept.write_text(run("checkpoint")[1])
    (tmp_path / "inclusion.json").write_text(run("prove", "t/j-1#2", "--checkpoint", "1")[1])
    receipt = store.read("t/j-1")[1]
    (tmp_path / "receipt.json").write_text(json.dumps(receipt.to_wire()))
    args = ["--checkpoint", str(kept), "--proof", str(tmp_path / "inclusion.json")]
    receipt_args = ["--receipt", str(tmp_path / "receipt.json"), "--key", str(public)]
    assert verify_offline.main(["inclusion", *args, *receipt_args]) == 0

    append(2, "t/j-2", at=NOW + 1)
    assert run("checkpoint", "--make")[0] == 0
    (tmp_path / "later.json").write_text(run("checkpoint")[1])
    (tmp_path / "consistency.json").write_text(run("consistency", str(kept), "latest")[1])
    assert (
        verify_offline.main(
            [
                "consistency",
                "--old",
                str(kept),
                "--new",
                str(tmp_path / "later.json"),
                "--proof",
                str(tmp_path / "consistency.json"),
                "--key",
                str(public),
            ]
        )
        == 0
    )
    assert run("checkpoint", "--public-key")[1].strip() == public.read_text().strip()


def test_the_commands_name_what_they_cannot_find():
    code, output = run("checkpoint")
    assert code == 1 and "no checkpoint yet" in output
    append(1)
    run("checkpoint", "--make")
    code, output = run("prove", "t/a#7")
    assert code == 1 and "no receipt t/a#7" in output
    code, output = run("consistency", "1", "nonsense")
    assert code == 1 and "new: 'nonsense'" in output
    code, output = run("checkpoint", "--public-key")
    assert code == 1 and "no signing key" in output
    assert json.loads(run("checkpoint", "--number", "1")[1])["treeSize"] == 1
    assert checkpoint_hash(checkpoints.by_number(1).checkpoint) == checkpoints.by_number(1).hash
