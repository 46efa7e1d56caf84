"""The histogram kept as counter series (X-2): cumulative buckets, sum and count."""

from __future__ import annotations

from jobs.runtime import counters


def test_an_observation_counts_in_every_bucket_at_or_above_it():
    labels = {"family": "unit-test"}
    before = {b: counters.value("h_bucket", le=f"{b:g}", **labels) for b in (0.001, 0.01, 0.1)}
    counters.observe("h", 0.005, (0.001, 0.01, 0.1), **labels)
    counters.observe("h", 0.01, (0.001, 0.01, 0.1), **labels)  # a bound is inclusive
    after = {b: counters.value("h_bucket", le=f"{b:g}", **labels) for b in (0.001, 0.01, 0.1)}
    assert {b: after[b] - before[b] for b in after} == {0.001: 0, 0.01: 2, 0.1: 2}
    assert counters.value("h_bucket", le="+Inf", **labels) >= 2
    assert counters.value("h_count", **labels) >= 2
    assert counters.value("h_sum", **labels) >= 0.015


def test_the_first_observation_lists_every_bound_even_at_zero():
    """A histogram's series are all exported from its first observation on (a scrape
    shows `le="0.001"` at 0 rather than no such series)."""
    labels = {"family": "unit-test-zero-buckets"}
    bounds = (0.001, 0.01, 0.1)
    counters.observe("hz", 0.05, bounds, **labels)
    keys = [("hz_bucket", counters._labels({**labels, "le": le})) for le in ("0.001", "0.01")]
    with counters._lock:
        assert all(key in counters._values and key in counters._dirty for key in keys)
    assert [counters.value("hz_bucket", le=le, **labels) for le in ("0.001", "0.01", "0.1")] == [
        0,
        0,
        1,
    ]
