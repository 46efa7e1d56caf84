"""How a worker thread hands its attempts to the lease keeper (D-5, D-11): one slot file
per thread, written per attempt and emptied after it; the keeper's scan holds exactly
the attempts written there, answers with stop orders by attempt, and removes what
belongs to no running attempt or to a process that is gone."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from jobs.core.state import Fence
from jobs.runtime import keeper


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(keeper.DIR_ENV, str(tmp_path))
    return tmp_path


def running(job_id: str, attempt: int = 1) -> Any:
    return cast(
        Any,
        SimpleNamespace(
            job=SimpleNamespace(job_id=job_id),
            fence=Fence(f"chat:host:{os.getpid()}", attempt),
            promise_id=f"{job_id}:attempt:{attempt}",
        ),
    )


def held(scan: keeper.Keeper) -> set[tuple[str, int]]:
    scan._scan()
    return {(h.job_id, h.attempt) for h in scan.held.values()}


def test_a_thread_writes_each_attempt_into_one_slot_and_empties_it(folder: Path) -> None:
    scan = keeper.Keeper(folder)
    first = keeper.Lease(running("job-a"), 10_000)
    assert held(scan) == {("job-a", 1)}
    (slot,) = folder.glob("*.slot")
    assert json.loads(slot.read_bytes())["pid"] == os.getpid()
    first.release()
    assert slot.read_bytes() == b"" and held(scan) == set()
    second = keeper.Lease(running("job-b", 2), 10_000)
    assert list(folder.glob("*.slot")) == [slot]  # the same file, no new one per attempt
    assert held(scan) == {("job-b", 2)}
    second.release()


def test_a_stop_order_reaches_its_attempt_and_is_removed_after_it(folder: Path) -> None:
    scan = keeper.Keeper(folder)
    lease = keeper.Lease(running("job-a"), 10_000)
    scan._scan()
    (attempt,) = scan.held.values()
    assert lease.stop_order() is None
    scan._order_stop(attempt, "abort requested", "canceled")
    assert lease.stop_order() == ("abort requested", "canceled")
    scan._scan()  # still running: the order stays
    assert lease.stop_order() is not None
    lease.release()
    scan._scan()
    assert list(folder.glob("*.stop")) == []


def test_a_record_being_written_is_read_on_the_next_pass(folder: Path) -> None:
    scan = keeper.Keeper(folder)
    lease = keeper.Lease(running("job-a"), 10_000)
    (slot,) = folder.glob("*.slot")
    whole = slot.read_bytes()
    slot.write_bytes(whole[: len(whole) // 2])
    assert held(scan) == set()
    slot.write_bytes(whole)
    assert held(scan) == {("job-a", 1)}
    lease.release()


def test_the_empty_slot_of_a_process_that_is_gone_is_removed(folder: Path) -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()
    (folder / f"{ended.pid}-0a1b2c3d4e5f.slot").write_bytes(b"")  # its worker left it
    mine = keeper.Lease(running("job-a"), 10_000)
    mine.release()  # an empty slot of a live process stays
    assert len(list(folder.glob("*.slot"))) == 2
    assert held(keeper.Keeper(folder)) == set()
    (left,) = folder.glob("*.slot")
    assert left.name.startswith(f"{os.getpid()}-")
