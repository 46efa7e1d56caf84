"""S-6 against the stream row: a chain's walk held against what its stream row says
(head, receipt count, newest timestamp), and the walk's own checks of positions, of
receipts moved between streams and of reordered receipts (issue 31 item 8)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from receipts.core.chain import (
    ChainWalk,
    Receipt,
    StreamRecord,
    Verification,
    check_against_head,
    seal,
    verify,
)

TS = 1_700_000_000_000


def stored(stream: str, n: int, *, ts: int = TS) -> list[Receipt]:
    """A chain of `n` receipts as the store gives them back: at stream_seq 1..n."""
    out, prev = [], None
    for i in range(n):
        r = seal(
            stream=stream,
            prev=prev,
            body={"type": f"t{i}"},
            ts=ts + i,
            random_hex16=f"{len(stream) + i:016x}",
            stream_seq=i + 1,
        )
        out.append(r.at(i + 1, i + 1))
        prev = r.hash
    return out


def record_of(chain: list[Receipt]) -> StreamRecord:
    """What a faithful stream row says about `chain`."""
    return StreamRecord(
        head=chain[-1].hash if chain else None,
        count=len(chain),
        last_ts=chain[-1].ts if chain else None,
    )


def renumbered(receipts: list[Receipt]) -> list[Receipt]:
    return [r.at(r.seq, i + 1) for i, r in enumerate(receipts)]


CHAIN = stored("s", 3)
FAITHFUL = record_of(CHAIN)


# ---- the chain held against its stream row ---------------------------------------------------


@pytest.mark.parametrize(
    ("receipts", "row", "reason"),
    [
        (CHAIN, FAITHFUL, None),
        ([], None, None),  # no row and no receipts: nothing claims anything
        ([], FAITHFUL, "emptied: the stream row counts 3 receipt(s) but none are stored"),
        (
            CHAIN[:2],
            FAITHFUL,
            "truncated: the chain ends after 2 receipt(s) but the stream row counts 3 "
            "(the newest 1 missing)",
        ),
        (
            CHAIN,
            record_of(CHAIN[:2]),
            "receipts past the stream row: 3 stored but the stream row counts 2",
        ),
        (CHAIN, None, "stream row missing: 3 receipt(s) stored without it"),
        (
            [],
            StreamRecord(head=None, count=0, last_ts=None),
            "empty stream row: it counts no receipts, and the store never keeps one",
        ),
        (
            CHAIN,
            replace(FAITHFUL, head=CHAIN[1].hash),
            f"head mismatch: the chain ends at {CHAIN[2].hash} but the stream row's head is "
            f"{CHAIN[1].hash}",
        ),
        (
            CHAIN,
            replace(FAITHFUL, last_ts=TS),
            f"last timestamp mismatch: the newest receipt has ts {TS + 2} but the stream row "
            f"says {TS}",
        ),
    ],
    ids=[
        "faithful",
        "nothing",
        "emptied",
        "truncated",
        "past-the-row",
        "row-missing",
        "empty-row",
        "head",
        "last-ts",
    ],
)
def test_the_chain_is_held_against_its_stream_row(receipts, row, reason):
    result = check_against_head(verify("s", receipts), row)
    assert (result.ok, result.reason) == (reason is None, reason)
    if reason is not None:
        # the chain's own receipts are sound: no receipt is to blame, the whole stream is
        assert result.index is None and result.describe() == reason
        assert result.count == len(receipts)


def test_each_stream_row_reason_is_distinct():
    reasons = [
        check_against_head(verify("s", receipts), row).reason
        for receipts, row in [
            ([], FAITHFUL),
            (CHAIN[:2], FAITHFUL),
            (CHAIN, record_of(CHAIN[:2])),
            (CHAIN, None),
            ([], StreamRecord(None, 0, None)),
            (CHAIN, replace(FAITHFUL, head="0" * 64)),
            (CHAIN, replace(FAITHFUL, last_ts=1)),
        ]
    ]
    keywords = [str(r).split(":")[0] for r in reasons]
    assert len(set(keywords)) == len(keywords)


def test_a_broken_chain_keeps_its_own_fault_before_the_row_is_compared():
    tampered = [CHAIN[0], replace(CHAIN[1], body={"type": "evil"}), CHAIN[2]]
    result = check_against_head(verify("s", tampered), FAITHFUL)
    assert (result.ok, result.index, result.reason) == (False, 1, "hash mismatch")


def test_the_walk_reports_the_last_timestamp():
    assert verify("s", CHAIN).last_ts == TS + 2
    assert verify("s", []).last_ts is None


# ---- the walk: positions, moved and reordered receipts ---------------------------------------


def test_a_gap_in_the_positions_names_the_missing_receipt():
    result = verify("s", [CHAIN[0], CHAIN[2]])
    assert (result.ok, result.index, result.reason) == (
        False,
        1,
        "missing receipt: #2 is not stored",
    )
    first_gone = verify("s", CHAIN[1:])
    assert (first_gone.index, first_gone.reason) == (0, "missing receipt: #1 is not stored")
    longer = stored("s", 5)
    several = verify("s", [longer[0], longer[4]])
    assert several.reason == "missing receipts: #2 to #4 are not stored"


def test_the_first_receipt_must_start_the_chain():
    other = stored("s", 4)
    result = verify("s", renumbered(other[1:]))  # renumbered so no gap shows
    assert (result.index, result.reason) == (0, "broken prev")
    assert result.details == {"expected": None, "found": other[0].hash}


def test_a_receipt_moved_from_another_stream_is_named_as_moved():
    theirs = stored("other", 2)
    moved = theirs[1].at(99, 4)  # put at the tail of "s"
    result = verify("s", [*CHAIN, moved])
    assert (result.ok, result.index) == (False, 3)
    assert result.reason == "moved: receipt #4 was sealed for stream 'other'"
    # its old stream now ends early or has a gap: reported there, as such
    assert verify("other", theirs[:1]).ok


def test_a_swapped_pair_is_named_as_reordered():
    five = stored("s", 5)
    swapped = renumbered([five[0], five[2], five[1], five[3], five[4]])
    result = verify("s", swapped)
    assert (result.ok, result.index) == (False, 1)
    assert result.reason == "reordered: receipts #2 and #3 are stored in each other's place"


def test_a_receipt_stored_further_away_is_named_as_reordered():
    five = stored("s", 5)
    moved_back = renumbered([five[0], five[2], five[3], five[1], five[4]])
    result = verify("s", moved_back)
    assert (result.index, result.reason) == (
        1,
        "reordered: the receipt that follows #1 is stored as #4",
    )
    genesis_later = renumbered([five[1], five[0], *five[2:]])
    assert verify("s", genesis_later).reason == (
        "reordered: receipts #1 and #2 are stored in each other's place"
    )


def test_a_removed_and_renumbered_receipt_stays_a_broken_prev():
    five = stored("s", 5)
    result = verify("s", renumbered([five[0], five[2], five[3], five[4]]))
    assert (result.index, result.reason) == (1, "broken prev")


def test_receipts_without_positions_are_checked_by_their_links_only():
    loose = [replace(r, stream_seq=None) for r in CHAIN]
    assert verify("s", loose).ok
    assert verify("s", [loose[0], loose[2]]).reason == "broken prev"


def test_a_walk_can_be_fed_in_parts():
    walk = ChainWalk("s")
    walk.feed(CHAIN[:2])
    walk.feed(CHAIN[2:])
    assert walk.result() == verify("s", CHAIN)
    walk.feed([CHAIN[0]])  # a receipt again at a later position: the walk breaks there
    assert walk.result().reason == "out of sequence: stored as #1 where #4 belongs"
    walk.feed(CHAIN)  # once broken, the first fault stands
    assert walk.result().index == 3


def test_a_sound_walk_describes_itself_as_before():
    result = verify("s", CHAIN)
    assert result == Verification("s", True, 3, CHAIN[2].hash, last_ts=TS + 2)
    assert result.describe() == f"ok: 3 receipts, head {CHAIN[2].hash}"
