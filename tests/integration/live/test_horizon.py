"""The stable horizon fold (receipts.live.horizon.Horizon): pure, no database."""

from __future__ import annotations

from receipts.live.horizon import Horizon, Probe


def probe(max_seq: int, *writers: str) -> Probe:
    return Probe(max_seq, frozenset(writers))


def test_with_no_open_writer_the_visible_max_is_final_at_once():
    horizon = Horizon()
    assert horizon.observe(probe(100)) == 100
    assert not horizon.pending


def test_a_max_seen_while_writers_are_open_waits_for_exactly_those_writers():
    horizon = Horizon()
    horizon.observe(probe(100))
    assert horizon.observe(probe(105, "a")) == 100  # "a" may still hold 101..104
    assert horizon.observe(probe(107, "a", "b")) == 100
    assert horizon.observe(probe(107, "b", "c")) == 105  # "a" ended: 105 is final
    assert horizon.observe(probe(107, "c")) == 107  # "b" ended too
    assert not horizon.pending or horizon.candidates[0][0] > 107


def test_the_first_probe_during_writes_gives_no_horizon_until_they_end():
    horizon = Horizon()
    assert horizon.observe(probe(50, "a")) is None
    assert horizon.observe(probe(52, "a")) is None
    assert horizon.observe(probe(53, "a", "z")) is None
    assert horizon.observe(probe(53, "z")) == 52  # "a" ended; 53 was seen while "z" ran
    assert horizon.observe(probe(53)) == 53


def test_the_horizon_never_moves_back():
    horizon = Horizon()
    horizon.observe(probe(10))
    assert horizon.observe(probe(7)) == 10
    assert horizon.observe(probe(9, "a")) == 10
    assert not horizon.pending
