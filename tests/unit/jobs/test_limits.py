"""The rules of rate limits and per-key caps (issue 34 item 4), no database."""

from __future__ import annotations

import pytest

from jobs.core import limits
from jobs.core.limits import MISSING, Limit, LimitError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("60/m", (60, 60_000)),
        ("5/10s", (5, 10_000)),
        ("1000/h", (1000, 3_600_000)),
        (" 1 / d", (1, 86_400_000)),
    ],
)
def test_a_rate_reads_starts_per_period(text, expected):
    assert limits.parse_rate(text) == expected


@pytest.mark.parametrize("text", ["60", "0/m", "5/0s", "60/y", "-1/s", 60, "10001/s", "1/8d"])
def test_a_rate_that_means_nothing_is_refused(text):
    with pytest.raises(LimitError, match="rate"):
        limits.parse_rate(text)


def test_the_wire_form_round_trips_and_names_the_rate_as_written():
    wire = {"name": "llm", "kinds": ["llm.call"], "rate": "5/10s", "concurrency": 2, "key": "p"}
    limit = limits.from_wire(wire)
    assert (limit.rate, limit.per_ms, limit.rate_text) == (5, 10_000, "5/10s")
    assert limits.from_wire(limit.to_wire()) == limit
    assert Limit(name="x", queues=("emails",), rate=3, per_ms=60_000).rate_text == "3/m"


@pytest.mark.parametrize(
    ("wire", "problem"),
    [
        ({"name": "a", "rate": "1/s"}, "covers nothing"),
        ({"name": "a", "kinds": ["k"]}, "neither a rate nor a concurrency"),
        ({"name": "a", "kinds": ["k"], "rate": "1/s", "key": "c"}, "a key divides"),
        ({"name": "a", "kinds": "k", "rate": "1/s"}, "kinds must be a list"),
        ({"name": "A b", "kinds": ["k"], "rate": "1/s"}, "name must be"),
        ({"name": "a", "kinds": ["k"], "concurrency": 0}, "concurrency must be"),
        ({"name": "a", "kinds": ["k"], "concurrency": True}, "concurrency must be"),
        ({"name": "a", "kinds": ["k"], "concurrency": 1, "key": "a b"}, "key must be"),
        ({"name": "a", "kinds": ["k"], "rate": "1/s", "per": 3}, "unknown field 'per'"),
    ],
)
def test_a_limit_that_cannot_work_is_refused_naming_the_field(wire, problem):
    with pytest.raises(LimitError, match=problem):
        limits.from_wire(wire)


def test_many_limits_parse_from_json_text_and_names_are_unique():
    assert limits.parse_many("") == ()
    two = limits.parse_many(
        '[{"name": "a", "kinds": ["k"], "rate": "1/s"}, '
        '{"name": "b", "queues": ["emails"], "concurrency": 3}]'
    )
    assert [limit.name for limit in two] == ["a", "b"]
    with pytest.raises(LimitError, match="declared twice"):
        limits.parse_many([{"name": "a", "kinds": ["k"], "rate": "1/s"}] * 2)
    with pytest.raises(LimitError, match="not valid JSON"):
        limits.parse_many("[{")


def _governing(declared, *, kind="k", task=None, group="chat", payload=None):
    payload = payload or {}
    return limits.governing(
        declared,
        kind=kind,
        task=task,
        group=group,
        argument=lambda path: limits.payload_value(payload, path),
    )


def test_the_first_cap_that_covers_a_job_counts_it_and_every_rate_applies():
    declared = (
        Limit(name="by-kind", kinds=("k",), rate=10, per_ms=1_000),
        Limit(name="per-customer", kinds=("k",), concurrency=2, key="customer.id"),
        Limit(name="queue-cap", queues=("chat",), concurrency=5),
        Limit(name="queue-rate", queues=("chat",), rate=100, per_ms=60_000),
        Limit(name="elsewhere", kinds=("other",), rate=1, per_ms=1_000),
    )
    found = _governing(declared, payload={"customer": {"id": 42}})
    assert found.cap is declared[1] and found.cap_key == "per-customer:42"
    assert [limit.name for limit in found.rates] == ["by-kind", "queue-rate"]
    assert not _governing(declared, kind="x", group="codex")
    by_task = _governing(
        (Limit(name="t", kinds=("shop.tasks.mail",), concurrency=1),),
        kind="django.task",
        task="shop.tasks.mail",
    )
    assert by_task.cap_key == "t"


def test_a_cap_key_is_the_value_as_text_and_a_long_one_its_hash():
    limit = Limit(name="c", kinds=("k",), concurrency=1, key="v")
    assert limits.cap_key(limit, "acme") == "c:acme"
    assert limits.cap_key(limit, 7) == "c:7"
    assert limits.cap_key(limit, {"b": 1, "a": 2}) == 'c:{"a": 2, "b": 1}'
    assert limits.cap_key(limit, MISSING) == "c"
    long = limits.cap_key(limit, "x" * 500)
    assert long.startswith("c:#") and len(long) < 50
    assert long == limits.cap_key(limit, "x" * 500) != limits.cap_key(limit, "y" * 500)
    assert limits.limit_name(long) == "c"


def test_a_payload_path_leads_to_a_value_or_is_missing():
    payload = {"customer": {"id": "c1", "none": None}, "flat": 3}
    assert limits.payload_value(payload, "customer.id") == "c1"
    assert limits.payload_value(payload, "flat") == 3
    assert limits.payload_value(payload, "customer.none") is MISSING
    assert limits.payload_value(payload, "flat.deeper") is MISSING
    assert limits.payload_value(payload, "nope") is MISSING
