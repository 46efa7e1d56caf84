"""S-3, Q-3: text no database stores (NUL, lone surrogates) is found with its path, and
handler output is made storable by replacing it with U+FFFD."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from receipts.core.storable import first_unstorable, storable, storable_text

FFFD = "\ufffd"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("clean ✓ 日本", "clean ✓ 日本"),
        ("a\x00b\x00", f"a{FFFD}b{FFFD}"),
        ("lone \ud800 high", f"lone {FFFD} high"),
        ("lone \udc80 low", f"lone {FFFD} low"),
        ("\udced\udca0\udc80", FFFD * 3),  # bytes ED A0 80 decoded with surrogateescape
        ("pair \ud83d\ude00 joined", "pair 😀 joined"),  # two code points of one character
        ("reversed \ude00\ud83d", f"reversed {FFFD}{FFFD}"),
    ],
)
def test_storable_text_replaces_nul_and_lone_surrogates(text, expected):
    assert storable_text(text) == expected
    storable_text(expected).encode("utf-8")  # encodable, and already storable
    assert storable_text(expected) == expected


def test_storable_reaches_keys_and_values_at_any_depth():
    value = {"out\x00": ["a\x00", {"deep": "\ud800"}], "n": 1, "ok": None, "f": 1.5}
    assert storable(value) == {
        f"out{FFFD}": [f"a{FFFD}", {"deep": FFFD}],
        "n": 1,
        "ok": None,
        "f": 1.5,
    }
    assert storable("x\x00") == f"x{FFFD}"


def test_storable_leaves_clean_values_as_they_are():
    clean = {"a": [1, {"b": "c"}], "d": "e"}
    assert storable(clean) is clean
    mixed = {"clean": clean["a"], "dirty": "\x00"}
    out = storable(mixed)
    assert out is not mixed and out["clean"] is clean["a"]


def test_storable_passes_non_json_values_and_cycles_through_for_the_store_to_refuse():
    loop: list = []
    loop.append(loop)
    assert storable(loop) is loop
    marker = object()
    assert storable({"x": marker})["x"] is marker


@given(
    st.recursive(
        st.text() | st.integers() | st.none(),
        lambda children: st.lists(children, max_size=3)
        | st.dictionaries(st.text(), children, max_size=3),
        max_leaves=10,
    )
)
def test_storable_output_always_has_nothing_unstorable(value):
    assert first_unstorable(storable(value)) is None


@pytest.mark.parametrize(
    ("value", "path", "what"),
    [
        ({"a": "ok", "b": ["x", "y\x00"]}, "$.b[1]", "NUL character (U+0000)"),
        ({"a": {"k\x00": 1}}, "$.a (key)", "NUL character (U+0000)"),
        ({"a": "\ud800"}, "$.a", "lone surrogate"),
        ("\x00", "$", "NUL character (U+0000)"),
    ],
)
def test_first_unstorable_names_the_path(value, path, what):
    found = first_unstorable(value)
    assert found is not None and found[0] == path and found[1].startswith(what)


def test_a_literal_backslash_u0000_is_storable():
    assert first_unstorable({"a": "\\u0000"}) is None
