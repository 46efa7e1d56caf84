"""A task's arguments become what a JSON round trip gives back, or a TypeError saying why
not; the walk without text in between agrees with the round trip on every value."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.tasks.payload import plain_json

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner) | st.tuples(inner, inner) | st.dictionaries(st.text(), inner),
    max_leaves=30,
)


@given(JSON_VALUES)
def test_plain_values_come_back_as_a_json_round_trip_gives_them(value):
    assert plain_json(value, what="x") == json.loads(json.dumps(value))
    assert json.dumps(plain_json(value, what="x")) == json.dumps(value)


def test_the_copy_shares_no_container_with_the_arguments():
    items = [1, 2]
    args: list[Any] = [{"items": items}, (3, 4)]
    copied = plain_json(args, what="x")
    assert copied == [{"items": [1, 2]}, [3, 4]]
    copied[0]["items"].append(5)
    assert items == [1, 2]


class Color(enum.IntEnum):
    RED = 1


def test_a_subclass_of_a_json_type_becomes_its_json_value():
    assert plain_json([Color.RED], what="x") == [1]
    assert type(plain_json([Color.RED], what="x")[0]) is int


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([math.nan], "must be JSON-serializable"),
        ({"a": math.inf}, "must be JSON-serializable"),
        ({1: "a"}, "the dict key 1 would come back as the string"),
        ([object()], "must be JSON-serializable"),
        ({"when": {1, 2}}, "must be JSON-serializable"),
    ],
)
def test_what_json_cannot_give_back_is_refused_naming_why(value, problem):
    with pytest.raises(TypeError, match=problem):
        plain_json(value, what="the arguments of task t")
