"""Retention's pure rules: tombstone batch hashes, batch sizes, families and windows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.core.retention import CONTROL, DEFAULT, SPECIAL_KINDS, WATCHDOG, Windows, lanes
from receipts.core.retention import (
    DAY_MS,
    PRUNED,
    Tombstone,
    batch_body,
    batch_fault,
    batch_hash,
    covers,
    cutoff_ms,
    fill,
)

NOW = 1_900_000_000_000


def tomb(stream: str = "jobs/a", **changes: object) -> Tombstone:
    base = Tombstone(
        stream=stream,
        family="default",
        receipt_count=4,
        head="h" * 64,
        final_status="completed",
        settled_at_ms=NOW - 40 * DAY_MS,
        pruned_at_ms=NOW,
        organization_id="org-1",
        agent_id="factory",
        kind="factory.run",
        batch=1,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_batch_hash_does_not_depend_on_row_order():
    a, b = tomb("jobs/a"), tomb("jobs/b")
    assert batch_hash([a, b]) == batch_hash([b, a])


@pytest.mark.parametrize(
    "field, value",
    [
        ("receipt_count", 5),
        ("head", "e" * 64),
        ("final_status", "failed"),
        ("settled_at_ms", NOW - 1),
        ("pruned_at_ms", NOW + 1),
        ("organization_id", "org-2"),
        ("agent_id", "codex"),
        ("kind", None),
        ("family", "watchdog"),
        ("batch", 2),
        ("stream", "jobs/z"),
    ],
)
def test_any_edited_field_changes_the_batch_hash(field, value):
    assert batch_hash([tomb(), tomb("jobs/b")]) != batch_hash(
        [tomb(**{field: value}), tomb("jobs/b")]
    )


def test_a_batch_body_commits_to_count_receipts_hash_and_windows():
    batch = [tomb("jobs/a"), tomb("jobs/b", receipt_count=6)]
    body = batch_body(batch=1, tombstones=batch, windows_days={"default": 30}, pruned_at_ms=NOW)
    assert body == {
        "type": PRUNED,
        "batch": 1,
        "count": 2,
        "receipts": 10,
        "batchHash": batch_hash(batch),
        "windowsDays": {"default": 30},
        "prunedAt": NOW,
    }
    assert batch_fault(body, batch) is None


def test_batch_fault_names_an_edited_a_removed_and_an_added_tombstone():
    batch = [tomb("jobs/a"), tomb("jobs/b")]
    body = batch_body(batch=1, tombstones=batch, windows_days={}, pruned_at_ms=NOW)
    assert "edited" in (batch_fault(body, [tomb("jobs/a", head="0" * 64), tomb("jobs/b")]) or "")
    assert "removed or added" in (batch_fault(body, batch[:1]) or "")
    assert "removed or added" in (batch_fault(body, [*batch, tomb("jobs/c")]) or "")


@pytest.mark.parametrize(
    "counts, max_streams, max_receipts, taken",
    [
        ([], 500, 100, 0),
        ([1, 1, 1], 2, 100, 2),  # the stream cap
        ([40, 40, 40], 500, 100, 2),  # the receipt cap
        ([500, 1], 500, 100, 1),  # one stream longer than the cap still goes, alone
        ([50, 50], 500, 100, 2),  # exactly at the cap
        ([3, 3], 0, 100, 1),  # a batch always makes progress
    ],
)
def test_fill_bounds_a_batch_by_streams_and_receipts(counts, max_streams, max_receipts, taken):
    assert fill(counts, max_streams=max_streams, max_receipts=max_receipts) == taken


@pytest.mark.parametrize(
    "prefix, root, expected",
    [
        ("", "jobs/", True),
        ("jobs", "jobs/", True),
        ("jobs/", "jobs/", True),
        ("jobs/abc", "jobs/", True),
        ("factory/", "jobs/", False),
        ("retention/jobs", "jobs/", False),
    ],
)
def test_covers(prefix, root, expected):
    assert covers(prefix, root) is expected


def test_cutoff_is_the_window_back_from_now():
    assert cutoff_ms(NOW, 2) == NOW - 2 * DAY_MS


def test_lanes_scan_settled_statuses_only_with_each_family_window():
    found = lanes(Windows(default_days=30, watchdog_days=2, control_days=7), now_ms=NOW)
    assert {lane.status for lane in found} == {"completed", "failed", "canceled"}
    assert len(found) == 9
    by_family = {lane.family: lane for lane in found}
    assert by_family[WATCHDOG].cutoff_ms == NOW - 2 * DAY_MS
    assert by_family[CONTROL].cutoff_ms == NOW - 7 * DAY_MS
    assert by_family[DEFAULT].cutoff_ms == NOW - 30 * DAY_MS
    # the default family leaves the others' kinds to their own windows
    assert by_family[DEFAULT].kinds is None and by_family[DEFAULT].excluded_kinds == SPECIAL_KINDS
    assert by_family[WATCHDOG].kinds == ("factory.objective.watchdog",)


def test_an_override_sets_every_window():
    assert Windows().overridden(5).as_dict() == {"watchdog": 5, "control": 5, "default": 5}
    assert Windows().overridden(None) == Windows()
