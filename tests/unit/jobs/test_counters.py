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
