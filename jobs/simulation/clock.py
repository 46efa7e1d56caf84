"""The simulation's virtual clock (C-2): the only time the simulated runtime sees.

Every runtime call the simulation makes takes `now_ms=clock.now_ms`; time moves only when
an action advances it, so a run is a function of its seed, never of how fast the
machine is. `read_by_runtime` stands in for `receipts.clock.now_ms` while a run is under
way: the runtime should never need it (it is given `now_ms` everywhere), so every call
is counted and reported as a violation of virtual time. Only the simulating thread's reads
count: a thread the process had before the run (an outbox, a keeper) is not the
simulated runtime, and gets the real time.
"""

from __future__ import annotations

import threading
import time

# 2033-05-18: far from any real timestamp, so a leaked wall-clock read stands out.
EPOCH_MS = 2_000_000_000_000


class VirtualClock:
    def __init__(self, start_ms: int = EPOCH_MS) -> None:
        self.now_ms = start_ms
        self.wall_reads = 0  # calls the runtime made to the (patched) wall clock
        self.owner = threading.get_ident()  # the thread that runs the simulation

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError(f"the virtual clock only moves forward, not by {ms} ms")
        self.now_ms += ms
        return self.now_ms

    def read_by_runtime(self) -> int:
        """Replacement for the runtime's wall clock during a run (counted, never needed)."""
        if threading.get_ident() != self.owner:
            return time.time_ns() // 1_000_000
        self.wall_reads += 1
        return self.now_ms
