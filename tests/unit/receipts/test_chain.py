"""S-1, S-2, S-6, S-7: receipt ids, hashes, the sealed text, verification and folds."""

import hashlib
import json
import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from receipts.core.canonical import CanonicalJSONError, canonical_json, sha256_hex
from receipts.core.chain import (
    as_sealed,
    base36,
    fold,
    receipt_hash,
    receipt_id,
    seal,
    state_at,
    verify,
)


def chain(stream, bodies, ts=1_700_000_000_000):
    out, prev = [], None
    for i, body in enumerate(bodies):
        r = seal(stream=stream, prev=prev, body=body, ts=ts + i, random_hex16=f"{i:016x}")
        out.append(r)
        prev = r.hash
    return out


def test_receipt_id_is_base36_ts_dash_16_hex():
    rid = receipt_id(1_700_000_000_000, "0123456789abcdef")
    assert re.fullmatch(r"[0-9a-z]+-[0-9a-f]{16}", rid)
    assert int(rid.split("-")[0], 36) == 1_700_000_000_000
    assert base36(0) == "0" and base36(35) == "z" and base36(36) == "10"


def test_hash_covers_exactly_id_ts_stream_prev_body_and_optional_context():
    r = seal(
        stream="s/1",
        prev=None,
        body={"type": "x", "n": 1},
        ts=5,
        random_hex16="a" * 16,
        context={"actor": "me"},
        hints={"eventId": "e"},
    )
    material = {
        "id": r.id,
        "ts": 5,
        "stream": "s/1",
        "prev": None,
        "body": {"type": "x", "n": 1},
        "context": {"actor": "me"},
    }
    assert r.hash == sha256_hex(material)
    # hints are not hashed
    assert replace(r, hints={"eventId": "other"}).expected_hash() == r.hash


def test_context_is_left_out_of_the_material_when_absent():
    material = {"id": "i", "ts": 1, "stream": "s", "prev": None, "body": {"type": "t"}}
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert receipt_hash(id="i", ts=1, stream="s", prev=None, body={"type": "t"}) == (
        hashlib.sha256(text.encode()).hexdigest()
    )


def test_body_without_string_type_is_refused():
    with pytest.raises(ValueError, match="string 'type'"):
        seal(stream="s", prev=None, body={"kind": "x"}, ts=1, random_hex16="0" * 16)


def test_sound_chain_verifies_with_count_and_head():
    receipts = chain("s", [{"type": "a"}, {"type": "b"}, {"type": "c"}])
    result = verify("s", receipts)
    assert result.ok and result.count == 3 and result.head == receipts[-1].hash


def test_edited_body_is_a_hash_mismatch_at_its_index():
    receipts = chain("s", [{"type": "a"}, {"type": "b", "v": 1}, {"type": "c"}])
    receipts[1] = replace(receipts[1], body={"type": "b", "v": 2})
    result = verify("s", receipts)
    assert not result.ok and result.index == 1 and result.reason == "hash mismatch"
    assert result.describe() == "hash mismatch at index 1"


def test_removed_receipt_is_a_broken_prev():
    receipts = chain("s", [{"type": "a"}, {"type": "b"}, {"type": "c"}])
    del receipts[1]
    result = verify("s", receipts)
    assert not result.ok and result.index == 1 and result.reason == "broken prev"


def count_types(state, receipt):
    state = dict(state or {})
    state[receipt.type] = state.get(receipt.type, 0) + 1
    return state


@given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=30), st.integers(-3, 40))
def test_state_at_n_equals_folding_the_first_n(types, n):
    receipts = chain("s", [{"type": t} for t in types])
    assert verify("s", receipts).ok
    expected = fold(receipts[: max(0, n)], count_types)
    assert state_at(receipts, n, count_types) == expected


# ---- the sealed text (S-2, S-6) ---------------------------------------------------------------


NUMBERS = {"type": "n", "big": 1e16, "negzero": -0.0, "huge": 12345678901234567890}
# What PostgreSQL's jsonb gives back for NUMBERS: the same values, spelled differently.
RESPELLED = {
    "type": "n",
    "big": 10_000_000_000_000_000,
    "negzero": 0.0,
    "huge": 12345678901234567890,
}


def test_seal_keeps_the_exact_text_its_hash_covers():
    r = seal(
        stream="s", prev=None, body=NUMBERS, ts=7, random_hex16="b" * 16, context={"actor": "me"}
    )
    assert r.sealed == canonical_json(
        {
            "id": r.id,
            "ts": 7,
            "stream": "s",
            "prev": None,
            "body": NUMBERS,
            "context": {"actor": "me"},
        }
    )
    assert '"big":1e+16' in r.sealed and '"negzero":-0.0' in r.sealed
    assert hashlib.sha256(r.sealed.encode("utf-8")).hexdigest() == r.hash
    assert as_sealed(replace(r, body=RESPELLED)).body == NUMBERS


def test_respelled_stored_numbers_still_verify_against_the_sealed_text():
    """S-6: jsonb's respelling of numbers is no tampering."""
    receipts = chain("s", [NUMBERS, {"type": "next"}])
    stored = [replace(receipts[0], body=RESPELLED), receipts[1]]
    assert verify("s", stored).ok
    # Without the sealed text (rows from before it was kept) the respelling cannot verify.
    legacy = [replace(r, sealed=None) for r in stored]
    assert verify("s", legacy).reason == "hash mismatch"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"body": {**RESPELLED, "big": 10_000_000_000_000_002}}, "body"),
        ({"body": {**NUMBERS, "huge": 12345678901234567890.0}}, "body"),
        ({"context": {"actor": "someone else"}}, "context"),
        ({"context": None}, "context"),
        ({"ts": 8}, "ts"),
        ({"id": "other"}, "id"),
    ],
)
def test_a_stored_column_that_is_not_what_was_sealed_is_a_hash_mismatch(edit, field):
    r = seal(
        stream="s", prev=None, body=NUMBERS, ts=7, random_hex16="c" * 16, context={"actor": "me"}
    )
    result = verify("s", [replace(r, **edit)])
    assert (result.ok, result.index, result.reason) == (False, 0, "hash mismatch")
    assert result.details["field"] == field


def test_an_edited_sealed_text_is_a_hash_mismatch():
    [r] = chain("s", [{"type": "a", "n": 1}])
    forged = r.sealed.replace('"n":1', '"n":2')
    result = verify("s", [replace(r, sealed=forged, body={"type": "a", "n": 2})])
    assert (result.ok, result.reason, result.details) == (
        False,
        "hash mismatch",
        {"stored": r.hash},
    )


def test_receipts_without_sealed_text_verify_by_recomputing():
    receipts = [replace(r, sealed=None) for r in chain("s", [{"type": "a"}, {"type": "b"}])]
    assert verify("s", receipts).ok
    receipts[1] = replace(receipts[1], body={"type": "x"})
    assert verify("s", receipts).index == 1


@pytest.mark.parametrize(
    ("body", "context", "where"),
    [
        ({"type": "t", "out": "a\ud800b"}, None, r"\$\.body\.out"),
        ({"type": "t", "k\udc80": 1}, None, r"\$\.body \(key\)"),
        ({"type": "t"}, {"actor": "\ud800"}, r"\$\.context\.actor"),
    ],
)
def test_a_lone_surrogate_is_refused_with_its_path(body, context, where):
    """S-2: text with no UTF-8 form has no canonical bytes to hash."""
    with pytest.raises(CanonicalJSONError, match=rf"lone surrogate.* at {where}$"):
        seal(stream="s", prev=None, body=body, ts=1, random_hex16="0" * 16, context=context)
