"""S-2: canonical JSON and hashing, checked against the reference json.dumps form; S-6: how a
value read back from a database is compared with the sealed one."""

import datetime
import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import receipts.wire_json  # noqa: F401  (installs the fast writer these tests cover)
from receipts.core.canonical import (
    CanonicalJSONError,
    canonical_json,
    check_json,
    same_json,
    sha256_hex,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


def _nested_list(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def reference(value):
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


@given(json_values)
def test_canonical_form_is_exactly_the_reference_dumps(value):
    assert canonical_json(value) == reference(value)


# Without floats the fast encoder writes the canonical text: every code point but the
# surrogates (control characters, U+2028, astral), keys sorted by code point, any integer.
float_free = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**62, max_value=2**66)
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])), children, max_size=5),
    max_leaves=30,
)


@given(float_free)
def test_float_free_values_written_by_the_fast_encoder_are_the_reference_text(value):
    assert canonical_json(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"lone": "\ud800"},  # the fast encoder refuses it; the text keeps it (seal refuses)
        {"\udfff": 1},
        [2**64, -(2**63) - 1, 2**63],
        {"deep": _nested_list(63)},
        {"deeper": _nested_list(70)},
        {"\x00\x1f\x7f\u2028\u2029": '\b\f\n\r\t"\\/'},
    ],
)
def test_what_the_fast_encoder_refuses_or_never_sees_is_still_the_reference_text(value):
    assert canonical_json(value) == reference(value)


def test_keys_are_sorted_and_separators_compact():
    assert canonical_json({"b": 1, "a": [1, {"d": None, "c": True}]}) == (
        '{"a":[1,{"c":true,"d":null}],"b":1}'
    )


def test_non_ascii_text_is_kept_as_utf8_not_escaped():
    text = canonical_json({"name": "Zoë ✓ 日本"})
    assert text == '{"name":"Zoë ✓ 日本"}'
    assert sha256_hex({"name": "Zoë ✓ 日本"}) == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_key_order_does_not_change_the_hash():
    assert sha256_hex({"a": 1, "b": {"x": 1, "y": 2}}) == sha256_hex(
        {"b": {"y": 2, "x": 1}, "a": 1}
    )


@pytest.mark.parametrize(
    ("value", "path", "fragment"),
    [
        ({"a": math.nan}, "$.a", "non-finite number nan"),
        ({"a": [1, math.inf]}, "$.a[1]", "non-finite number inf"),
        ({"when": datetime.datetime(2026, 1, 1)}, "$.when", "type datetime"),
        ({"tags": {"x"}}, "$.tags", "type set"),
        ({"raw": b"x"}, "$.raw", "type bytes"),
        ({1: "int key"}, "$", "object key 1 is not a string"),
    ],
)
def test_rejected_values_name_their_path(value, path, fragment):
    with pytest.raises(CanonicalJSONError) as caught:
        canonical_json(value)
    assert caught.value.path == path
    assert fragment in str(caught.value)


def test_cycles_are_rejected_with_their_path():
    inner: dict = {}
    value = {"outer": {"inner": inner}}
    inner["back"] = value
    with pytest.raises(CanonicalJSONError, match=r"cycle detected at \$\.outer\.inner\.back"):
        canonical_json(value)


def test_shared_but_acyclic_objects_are_fine():
    shared = {"x": 1}
    assert canonical_json({"a": shared, "b": shared}) == '{"a":{"x":1},"b":{"x":1}}'


def test_depth_limit_is_enforced_when_asked():
    deep: dict[str, Any] = {}
    current = deep
    for _ in range(10):
        current["n"] = {}
        current = current["n"]
    check_json(deep, max_depth=20)
    with pytest.raises(CanonicalJSONError, match="nesting deeper than 5 levels"):
        check_json(deep, max_depth=5)


# ---- same_json: a value read back from a database against the sealed one (S-6) ------------


@pytest.mark.parametrize(
    ("sealed", "stored"),
    [
        (1e16, 10_000_000_000_000_000),  # jsonb spells a float's decimal value in full
        (-0.0, 0.0),  # jsonb has no negative zero
        (-0.0, 0),
        (1.7976931348623157e308, int(float.fromhex("0x1.fffffffffffffp+1023"))),
        (1.7976931348623157e308, 179769313486231570 * 10**291),
        (5e-324, 5e-324),
        (12345678901234567890, 12345678901234567890),
        ({"a": [1, 2.5, "x", None, True]}, {"a": [1, 2.5, "x", None, True]}),
    ],
)
def test_respelled_numbers_agree_with_what_was_sealed(sealed, stored):
    assert same_json(sealed, stored)


@pytest.mark.parametrize(
    ("sealed", "stored"),
    [
        (1, 1.0),  # an int stays an int
        (1, True),
        (True, 1),
        (0.0, False),
        (1e16, 10_000_000_000_000_002),  # a different double
        (1.5, 10**400),  # past the float range
        ("1", 1),
        (None, 0),
        ({"a": 1}, {"a": 1, "b": 2}),
        ({"a": 1}, {"b": 1}),
        ([1, 2], [1]),
        ([1], (1,)),
        ({"a": 1}, [("a", 1)]),
    ],
)
def test_edited_values_do_not_agree(sealed, stored):
    assert not same_json(sealed, stored)


@given(json_values)
def test_every_value_agrees_with_its_own_json_round_trip(value):
    assert same_json(json.loads(canonical_json(value)), value)


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = {"n": value} if level % 2 else [value]
    return value


class Text(str):
    pass


@pytest.mark.parametrize("max_depth", [None, 0, 1, 3, 80])
@pytest.mark.parametrize(
    "value",
    [
        _nested(3, 1),
        _nested(3, []),
        _nested(4, "x"),
        _nested(70, 1),  # past the quick pass's reach: the careful pass decides
        _nested(2, math.nan),
        _nested(2, (1, 2)),
        {"k": Text("a str subclass is JSON")},
        {"a": [1, 2.5, None, True, {"b": {}}]},
        [{1: "int key"}],
    ],
)
def test_the_quick_pass_decides_exactly_as_the_careful_one(value, max_depth):
    """S-2: `check_json` walks the common case quickly and anything else carefully; either
    way it accepts and refuses (with the path) exactly what the careful walk alone would."""
    from receipts.core import canonical

    def outcome(check) -> str | None:
        try:
            check()
        except CanonicalJSONError as error:
            return str(error)
        return None

    careful = outcome(lambda: canonical._check(value, "$", set(), 0, max_depth))
    assert outcome(lambda: check_json(value, max_depth=max_depth)) == careful


@given(json_values)
def test_the_quick_pass_accepts_every_plain_value(value):
    from receipts.core import canonical

    assert canonical._plain(value, 0, 64)
