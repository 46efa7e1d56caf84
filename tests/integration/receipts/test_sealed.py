"""The sealed text on a real database (S-2, S-3, S-6, S-8; both backends).

PostgreSQL's jsonb respells numbers (`1e16` comes back as `10000000000000000`, `-0.0` as
`0.0`). Each receipt row keeps the canonical text its hash covers, so verification,
replay, reads and the API's wire bodies rest on exactly what was sealed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from io import StringIO

import pytest
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs import queue
from receipts import store
from receipts.core.canonical import canonical_json
from receipts.errors import InvalidEvent
from receipts.models import Receipt as ReceiptRow
from receipts.store import NewStream
from tests.integration.api.conftest import api, issue  # noqa: F401
from tests.integration.receipts.test_admin import stream_url

pytestmark = pytest.mark.django_db

NUMBERS = {
    "type": "n",
    "big": 1e16,
    "negzero": -0.0,
    "huge": 12345678901234567890,
    "max": 1.7976931348623157e308,
    "tiny": 5e-324,
}
AUTH = {"userId": "u-1", "organizationId": "org-1"}


def verify_strict(prefix: str) -> dict:
    out = StringIO()
    call_command("receipts", "verify", prefix, "--strict", "--json", stdout=out)
    return json.loads(out.getvalue())


def client_verify(receipts: list[dict]) -> str | None:
    """docs/api.md's client-side check: recompute every hash from the wire values."""
    prev = None
    for receipt in receipts:
        material = {k: receipt[k] for k in ("id", "ts", "stream", "prev", "body")}
        if "context" in receipt:
            material["context"] = receipt["context"]
        text = json.dumps(
            material, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        assert receipt["prev"] == prev
        assert hashlib.sha256(text.encode("utf-8")).hexdigest() == receipt["hash"]
        prev = receipt["hash"]
    return prev


def test_numbers_jsonb_respells_verify_strictly():
    """S-6, S-8: the issue's payload verifies (it failed at index 0 on PostgreSQL)."""
    store.append("num/one", [NUMBERS, {"type": "after"}], context={"n": 1e16})
    store.append_new_streams([NewStream("num/new", NUMBERS, {"n": -0.0})])
    job = queue.enqueue(
        "factory",
        {
            "kind": "factory.run",
            "authContext": dict(AUTH),
            "big": 1e16,
            "negzero": -0.0,
            "huge": 12345678901234567890,
        },
    ).job
    report = verify_strict("num/")
    assert (report["ok"], report["checked"], report["broken"]) == (True, 2, [])
    assert store.verify(job.stream).ok
    assert store.replay(job.stream).refused == []


def test_reads_give_back_exactly_what_was_sealed():
    """S-2, S-7: folds and every reader see the sealed values on either database."""
    store.append("num/read", NUMBERS, context={"n": 1e16})
    for receipt in [*store.read("num/read"), *store.read_global(prefix="num/read")]:
        assert canonical_json(receipt.body) == canonical_json(NUMBERS)
        assert isinstance(receipt.body["big"], float) and receipt.context == {"n": 1e16}
        assert receipt.expected_hash() == receipt.hash


def test_api_receipts_recompute_to_their_hashes(api):  # noqa: F811
    """S-2, A-4: a client recomputes every hash from the wire, numbers included."""
    raw = (
        '{"payload": {"kind": "factory.run", "authContext": {"userId": "u-1", '
        '"organizationId": "org-1"}, "big": 1e16, "negzero": -0.0, '
        '"huge": 12345678901234567890, "tiny": 5e-324}}'
    )
    status, out = api.post("/agents/factory/jobs", raw=raw)
    assert status == 202, out
    job_id = out["job"]["id"]
    api.post(f"/jobs/{job_id}/steer", {"payload": {"again": 1e16}})
    status, page = api.get(f"/jobs/{job_id}/receipts")
    assert status == 200 and len(page["receipts"]) == 2
    assert client_verify(page["receipts"]) == page["head"]
    assert page["receipts"][0]["body"]["payload"]["big"] == 1e16


def test_a_stored_value_edited_in_the_jsonb_column_is_a_hash_mismatch():
    """S-6: the jsonb columns must still hold the sealed values; respelling is not editing."""
    store.append("num/edit", [{"type": "a", "big": 1e16}, {"type": "b"}])
    row = ReceiptRow.objects.filter(stream="num/edit", stream_seq=1)
    row.update(body={"type": "a", "big": 10_000_000_000_000_000})  # jsonb's own spelling
    assert store.verify("num/edit").ok
    row.update(body={"type": "a", "big": 10_000_000_000_000_002})
    result = store.verify("num/edit")
    assert (result.ok, result.index, result.reason) == (False, 0, "hash mismatch")
    assert result.details["field"] == "body"
    row.update(body={"type": "a", "big": 1e16}, context={"actor": "forger"})
    assert store.verify("num/edit").details["field"] == "context"


def test_badges_on_the_stream_page_trust_the_sealed_text(admin_client):
    """S-6, U-4: no false ✗ for respelled numbers; an edited column still loses its badge."""
    store.append("num/page", [NUMBERS, {"type": "b"}])
    shown = admin_client.get(stream_url("num/page"))
    assert {line.receipt.stream_seq: line.verified for line in shown.context["lines"]} == {
        1: True,
        2: True,
    }
    ReceiptRow.objects.filter(stream="num/page", stream_seq=1).update(body={"type": "forged"})
    shown = admin_client.get(stream_url("num/page"))
    assert {line.receipt.stream_seq: line.verified for line in shown.context["lines"]} == {
        1: False,
        2: False,
    }


def test_rows_without_sealed_text_verify_and_read_from_their_columns():
    """S-6: rows written before the sealed text was kept (NULL) verify as they always did."""
    store.append(
        "num/legacy", [{"type": "a", "n": 1}, {"type": "b", "n": 2.5}], context={"who": "x"}
    )
    store.append("num/legacy", {"type": "c"})
    ReceiptRow.objects.filter(stream="num/legacy", stream_seq__lte=2).update(sealed=None)
    read = store.read("num/legacy")
    assert [r.body for r in read] == [{"type": "a", "n": 1}, {"type": "b", "n": 2.5}, {"type": "c"}]
    assert [r.sealed is None for r in read] == [True, True, False]
    assert read[0].context == {"who": "x"}
    assert store.verify("num/legacy").ok
    ReceiptRow.objects.filter(stream="num/legacy", stream_seq=2).update(body={"type": "x"})
    assert store.verify("num/legacy").index == 1


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"type": "t", "out": "a\x00b"}, r"\$\.body\.out"),
        ({"type": "t", "nested": [{"k\x00": 1}]}, r"\$\.body\.nested\[0\] \(key\)"),
        ({"type": "t", "out": "\ud800"}, r"\$\.body\.out"),
    ],
)
def test_text_no_database_stores_is_refused_alike_on_both(body, where):
    """S-3, Q-3: the same InvalidEvent on SQLite as on PostgreSQL, and nothing written."""
    with pytest.raises(InvalidEvent, match=where):
        store.append("num/bad", body)
    with pytest.raises(InvalidEvent, match=where):
        store.append_new_streams([NewStream("num/bad", body)])
    with pytest.raises(InvalidEvent, match=r"\$\.hints\.note"):
        store.append("num/bad", {"type": "t"}, hints={"note": "\x00"})
    assert not ReceiptRow.objects.filter(stream="num/bad").exists()
    assert store.stream_info("num/bad") is None


def test_a_backslash_followed_by_u0000_is_ordinary_text():
    """S-3: only a real NUL is refused, not its escape spelled out in a string."""
    [r] = store.append("num/escape", {"type": "t", "text": "\\u0000 and \\\\u0000"})
    assert store.read("num/escape")[0].body["text"] == "\\u0000 and \\\\u0000"
    assert store.verify("num/escape").ok and r.expected_hash() == r.hash


# ---- property: any JSON value (S-2, S-6, C-1) ---------------------------------------------------

FLOAT_EDGES = [
    0.0,
    -0.0,
    1e16,
    -1e16,
    1e21,
    1e22,
    1e-7,
    0.1,
    1 / 3,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    9007199254740993.0,
    123456789.12345679,
]
INT_EDGES = [2**53 + 1, -(2**63), 2**63, 2**64, 12345678901234567890, 10**40, -(10**40), 0]
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=10)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(INT_EDGES)
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(FLOAT_EDGES)
    | TEXT
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)
_names = itertools.count()


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=JSON_VALUES, context_value=JSON_VALUES)
def test_any_json_value_reads_back_as_sealed_and_verifies(value, context_value):
    """S-2, S-6: floats at the edges, big integers and any UTF-8 text append, read back
    as exactly what was sealed, and verify, through every insert the store has."""
    n = next(_names)
    body = {"type": "v", "v": value}
    context = {"c": context_value}
    store.append(f"prop/{n}", [body, {"type": "w", "w": value}], context=context)
    store.append_new_streams([NewStream(f"prop/{n}/new", body, context)])
    for stream in (f"prop/{n}", f"prop/{n}/new"):
        verification = store.verify(stream)
        assert verification.ok, verification
        first = store.read(stream)[0]
        assert canonical_json(first.body) == canonical_json(body)
        assert canonical_json(first.context) == canonical_json(context)
