"""The JSON text of statement parameters (S-3): any valid text of the value, whatever the
fast encoder refuses written by `json`; never a hash's text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from receipts import wire_json
from tests.unit.receipts.test_canonical import json_values  # finite floats only


@given(json_values)
def test_any_json_value_reads_back_equal(value):
    assert json.loads(wire_json.dumps(value)) == value


@pytest.mark.parametrize(
    "value",
    [
        2**70,  # past 64 bits
        -(2**64),
        {"text": "lone \ud800 surrogate"},
        [{"deep": [1.5, "é", None]}, 2**65],
    ],
)
def test_what_the_fast_encoder_refuses_is_written_as_json_writes_it(value):
    assert wire_json.dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
