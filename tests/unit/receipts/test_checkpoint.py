"""Checkpoints of the store-wide log (issue 36): their JSON form, the text a signature
covers, Ed25519 signing and checking, and the chain from one checkpoint to the next."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from receipts import signing
from receipts.core.canonical import canonical_json
from receipts.core.checkpoint import (
    EMPTY_ROOT_HEX,
    FORMAT,
    Checkpoint,
    CheckpointError,
    checkpoint_hash,
    from_wire,
    link_fault,
    signed_text,
    unsigned,
)
from tests.support import generate_private_key_pem

ROOT = hashlib.sha256(b"root").hexdigest()
PREVIOUS = hashlib.sha256(b"previous").hexdigest()
TS = 1_765_000_000_000


@pytest.fixture(scope="module")
def private_key() -> Any:
    return signing.load_private_key(generate_private_key_pem())


@pytest.fixture(scope="module")
def public_key(private_key: Any) -> Any:
    return signing.load_public_key(signing.public_key_pem(private_key))


def checkpoint(**changes: Any) -> Checkpoint:
    return dataclasses.replace(Checkpoint(41, ROOT, TS, PREVIOUS), **changes)


def test_an_unsigned_checkpoint_says_so() -> None:
    wire = checkpoint().to_wire()
    assert wire == {
        "format": FORMAT,
        "treeSize": 41,
        "rootHash": ROOT,
        "timestampMs": TS,
        "previous": PREVIOUS,
        "keyId": None,
        "signature": None,
        "signed": False,
    }
    assert from_wire(wire) == checkpoint()


def test_the_signed_text_is_canonical_json_of_every_field_but_the_signature() -> None:
    cp = checkpoint(key_id="0123456789abcdef")
    assert signed_text(cp) == canonical_json(
        {
            "format": FORMAT,
            "treeSize": 41,
            "rootHash": ROOT,
            "timestampMs": TS,
            "previous": PREVIOUS,
            "keyId": "0123456789abcdef",
        }
    )
    assert checkpoint_hash(cp) == hashlib.sha256(signed_text(cp).encode()).hexdigest()


@given(
    size=st.integers(1, 2**63),
    ts=st.integers(0, 2**63),
    previous=st.none() | st.binary(min_size=32, max_size=32).map(bytes.hex),
    key_id=st.none() | st.binary(min_size=8, max_size=8).map(bytes.hex),
)
def test_the_standard_librarys_text_is_the_canonical_one(
    size: int, ts: int, previous: str | None, key_id: str | None
) -> None:
    cp = Checkpoint(size, ROOT, ts, previous, key_id)
    body = {k: v for k, v in cp.to_wire().items() if k not in ("signature", "signed")}
    assert signed_text(cp) == canonical_json(body)


def test_sign_and_verify(private_key: Any, public_key: Any) -> None:
    cp = signing.sign(checkpoint(), private_key)
    assert cp.signed and cp.key_id == signing.key_id(public_key)
    assert signing.signature_fault(cp, public_key) is None
    again = from_wire(cp.to_wire())
    assert again == cp and again.to_wire()["signed"] is True
    assert signing.signature_fault(again, public_key) is None
    # The hash a proof or the next checkpoint names is the same signed or not.
    assert checkpoint_hash(cp) == checkpoint_hash(dataclasses.replace(cp, signature=None))


@pytest.mark.parametrize(
    "change",
    [
        {"tree_size": 40},
        {"tree_size": 42},
        {"root_hash": hashlib.sha256(b"other").hexdigest()},
        {"timestamp_ms": TS + 1},
        {"previous": None},
        {"previous": hashlib.sha256(b"other").hexdigest()},
        {"key_id": "fedcba9876543210"},
    ],
)
def test_tampering_with_any_field_breaks_the_signature(
    private_key: Any, public_key: Any, change: dict[str, Any]
) -> None:
    cp = signing.sign(checkpoint(), private_key)
    tampered = dataclasses.replace(cp, **change)
    assert signing.signature_fault(tampered, public_key) is not None


def test_a_flipped_signature_bit_fails(private_key: Any, public_key: Any) -> None:
    cp = signing.sign(checkpoint(), private_key)
    raw = bytearray(base64.b64decode(cp.signature or ""))
    raw[10] ^= 0x04
    bent = dataclasses.replace(cp, signature=base64.b64encode(raw).decode())
    assert (
        signing.signature_fault(bent, public_key) == "the signature does not match the checkpoint"
    )


def test_another_key_fails_and_says_whose(private_key: Any) -> None:
    cp = signing.sign(checkpoint(), private_key)
    other = signing.load_private_key(generate_private_key_pem()).public_key()
    found = signing.signature_fault(cp, other)
    assert found is not None and found.startswith(f"signed by key {cp.key_id}, not by")
    # the other key's signature put under this key's id does not pass either
    forged = dataclasses.replace(
        signing.sign(checkpoint(), signing.load_private_key(generate_private_key_pem())),
        key_id=cp.key_id,
    )
    assert signing.signature_fault(forged, private_key.public_key()) is not None


def test_an_unsigned_checkpoint_never_verifies_against_a_key(public_key: Any) -> None:
    assert signing.signature_fault(checkpoint(), public_key) == "the checkpoint is unsigned"
    assert signing.signature_fault(unsigned(checkpoint(key_id="0123456789abcdef")), public_key)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"treeSize": -1}, "treeSize"),
        ({"treeSize": True}, "treeSize"),
        ({"treeSize": 1.0}, "treeSize"),
        ({"rootHash": ROOT.upper()}, "rootHash"),
        ({"treeSize": 0}, "empty tree"),
        ({"timestampMs": "1"}, "timestampMs"),
        ({"previous": "abc"}, "previous"),
        ({"keyId": "xyz"}, "keyId"),
        ({"keyId": "0123456789abcdef"}, "keyId names a key but there is no signature"),
        ({"signature": "AAAA", "keyId": "0123456789abcdef", "signed": True}, "signature"),
        ({"signature": "A" * 88, "signed": True}, "keyId"),
        ({"signed": True}, "signed"),
        ({"signed": None}, "signed"),
        ({"format": "receipt.checkpoint.v2"}, "format"),
        ({"extra": 1}, "unknown field 'extra'"),
    ],
)
def test_malformed_checkpoints_are_refused_by_name(change: dict[str, Any], message: str) -> None:
    wire = {**checkpoint().to_wire(), **change}
    with pytest.raises(CheckpointError, match=message):
        from_wire(wire)


def test_missing_fields_and_non_objects_are_refused() -> None:
    wire = checkpoint().to_wire()
    del wire["previous"]
    with pytest.raises(CheckpointError, match="missing field 'previous'"):
        from_wire(wire)
    with pytest.raises(CheckpointError):
        from_wire([wire])


def test_the_empty_tree_has_the_hash_of_nothing_as_root() -> None:
    assert Checkpoint(0, EMPTY_ROOT_HEX, TS).tree_size == 0


def test_a_checkpoint_follows_the_one_it_names() -> None:
    first = Checkpoint(10, ROOT, TS)
    second = Checkpoint(12, ROOT, TS + 60_000, checkpoint_hash(first))
    assert link_fault(first, second) is None
    assert link_fault(second, second) is not None
    assert link_fault(first, dataclasses.replace(second, tree_size=9)) is not None
    assert link_fault(first, dataclasses.replace(second, timestamp_ms=TS - 1)) is not None


@pytest.mark.parametrize(
    "pem",
    [b"", b"not a key", b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"],
)
def test_bad_key_material_is_refused_clearly(pem: bytes) -> None:
    with pytest.raises(signing.SigningKeyError):
        signing.load_private_key(pem)
    with pytest.raises(signing.SigningKeyError):
        signing.load_public_key(pem)


def test_a_key_of_another_algorithm_is_refused() -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP256R1())
    pem = other.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(signing.SigningKeyError, match="Ed25519"):
        signing.load_private_key(pem)
