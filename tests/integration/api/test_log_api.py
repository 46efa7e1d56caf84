"""The store-wide log over HTTP (issue 36 item 3): checkpoints, inclusion proofs of a
job's receipts (its organization applies, also once pruned) and of any receipt,
consistency proofs, the public key; bad references are a 400 naming the field."""

from __future__ import annotations

import dataclasses

import pytest
from django.conf import settings

from receipts import checkpoints, log, signing, store
from receipts.core.checkpoint import from_wire
from receipts.core.log_proofs import (
    consistency_fault,
    consistency_from_wire,
    inclusion_fault,
    inclusion_from_wire,
)
from tests.integration.api.conftest import written
from tests.support import generate_private_key_pem

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]

NOW = 1_900_000_000_000


def checkpoint(at: int = NOW) -> checkpoints.Stored:
    log.extend(now_ms=at)
    made = checkpoints.make(now_ms=at, force=True)
    assert made is not None
    return made


def test_a_job_receipts_inclusion_proof_verifies_against_the_checkpoint(api):
    job = api.enqueue()["async"]["jobId"]
    made = checkpoint()
    status, cp = api.get("/log/checkpoint")
    assert status == 200 and cp == made.to_wire()
    status, proof = api.get(f"/jobs/{job}/receipts/1/inclusion", checkpoint="1")
    assert status == 200, proof
    receipt = store.read(f"jobs/{job}")[0]
    assert proof["leaf"] == receipt.hash
    assert inclusion_fault(inclusion_from_wire(proof), from_wire(cp)) is None


def test_another_organizations_job_is_not_found_and_any_receipt_needs_an_unbound_token(
    api, api_for
):
    job = api.enqueue()["async"]["jobId"]
    checkpoint()
    outsider = api_for("outsider", org="org-2")
    status, body = outsider.get(f"/jobs/{job}/receipts/1/inclusion")
    assert (status, body["error"]) == (404, "job_not_found")
    status, body = outsider.get("/log/inclusion", receipt=f"jobs/{job}#1")
    assert (status, body["error"]) == (403, "organization_forbidden")
    status, proof = api.get("/log/inclusion", receipt=f"jobs/{job}#1")
    assert status == 200 and proof["index"] == 0
    assert api_for("own", org="org-1").get(f"/jobs/{job}/receipts/1/inclusion")[0] == 200


def test_a_consistency_proof_between_checkpoints_verifies(api):
    api.enqueue()
    first = checkpoint()
    api.enqueue()
    second = checkpoint(NOW + 60_000)
    status, proof = api.get("/log/consistency", old="1", new=second.hash)
    assert status == 200, proof
    parsed = consistency_from_wire(proof)
    assert consistency_fault(parsed, first.checkpoint, second.checkpoint) is None


@pytest.mark.parametrize(
    ("path", "params", "status", "code", "field"),
    [
        ("/log/checkpoint", {"checkpoint": "yesterday"}, 400, "invalid_reference", "checkpoint"),
        ("/log/checkpoint", {"checkpoint": "7"}, 404, "checkpoint_not_found", "checkpoint 7"),
        ("/log/consistency", {}, 400, "invalid_reference", "old"),
        ("/log/consistency", {"old": "1", "new": "x\x00"}, 400, "invalid_reference", "new"),
        ("/log/inclusion", {}, 400, "invalid_reference", "receipt"),
        ("/log/inclusion", {"receipt": "nope"}, 400, "invalid_reference", "receipt"),
        ("/log/inclusion", {"receipt": "t/none#1"}, 404, "receipt_not_found", "t/none#1"),
        ("/log/key", {}, 404, "no_signing_key", "unsigned"),
    ],
)
def test_bad_references_are_named_and_write_nothing(api, path, params, status, code, field):
    api.enqueue()
    checkpoint()
    before = written()
    got, body = api.get(path, **params)
    assert (got, body["error"]) == (status, code), body
    assert field in body["detail"]
    assert written() == before


def test_a_receipt_past_the_checkpoint_is_a_conflict(api):
    job = api.enqueue()["async"]["jobId"]
    checkpoint()
    later = api.enqueue()["async"]["jobId"]
    status, body = api.get(f"/jobs/{later}/receipts/1/inclusion")
    assert (status, body["error"]) == (409, "not_in_checkpoint")
    status, body = api.get(f"/jobs/{job}/receipts/99/inclusion")
    assert (status, body["error"]) == (404, "receipt_not_found")


def test_the_public_key_is_the_signing_keys(api, monkeypatch):
    pem = generate_private_key_pem()
    monkeypatch.setattr(
        settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, checkpoint_key=pem.decode())
    )
    status, body = api.get("/log/key")
    key = signing.load_private_key(pem)
    assert status == 200
    assert body == {
        "keyId": signing.key_id(key.public_key()),
        "publicKey": signing.public_key_pem(key).decode(),
    }
