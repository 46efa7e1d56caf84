"""S-1, S-2, S-6, S-7: receipt ids, hashes, verification and folds."""

import json
import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from receipts.core.canonical import sha256_hex
from receipts.core.chain import base36, fold, receipt_hash, receipt_id, seal, state_at, verify


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
    r = seal(stream="s/1", prev=None, body={"type": "x", "n": 1}, ts=5, random_hex16="a" * 16,
             context={"actor": "me"}, hints={"eventId": "e"})
    material = {"id": r.id, "ts": 5, "stream": "s/1", "prev": None,
                "body": {"type": "x", "n": 1}, "context": {"actor": "me"}}
    assert r.hash == sha256_hex(material)
    # hints are not hashed
    assert replace(r, hints={"eventId": "other"}).expected_hash() == r.hash


def test_context_is_left_out_of_the_material_when_absent():
    material = {"id": "i", "ts": 1, "stream": "s", "prev": None, "body": {"type": "t"}}
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    import hashlib
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
