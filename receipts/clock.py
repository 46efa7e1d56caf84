"""The one place the runtime reads the wall clock; pure code takes `now_ms` as an argument."""

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
