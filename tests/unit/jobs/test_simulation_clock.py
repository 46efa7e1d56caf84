"""The simulation's virtual clock (C-2): the simulating thread's wall-clock reads are
violations; a thread the process had anyway (an outbox finishing earlier work) is not the
simulated runtime and must not fail a seed."""

from __future__ import annotations

import threading

from jobs.simulation.clock import EPOCH_MS, VirtualClock


def test_reads_from_the_simulating_thread_count_and_see_virtual_time():
    clock = VirtualClock()
    assert clock.read_by_runtime() == EPOCH_MS and clock.wall_reads == 1


def test_reads_from_another_thread_get_real_time_and_do_not_count():
    clock = VirtualClock()
    seen: list[int] = []
    other = threading.Thread(target=lambda: seen.append(clock.read_by_runtime()))
    other.start()
    other.join(timeout=10)
    assert clock.wall_reads == 0 and seen and seen[0] < EPOCH_MS
