"""The loop of the store-wide log (issue 36): extends the log and makes its signed
checkpoints on their cadence. The work is the store's (receipts.checkpoints.log_pass);
this only schedules it in every runworker, because the store imports nothing of jobs.
Passes of several processes are safe together: extensions take turns on the log's head
row (a busy one is skipped), checkpoints on the checkpoints stream's lock."""

from __future__ import annotations

from typing import Any

from jobs.runtime.loops import Loop, Report
from receipts import checkpoints


def loops(config: Any, role: str) -> list[Loop]:
    """`log` in every role, unless RECEIPT_LOG_ENABLED is off."""
    if not config.log_enabled:
        return []
    interval_ms = config.checkpoint_interval_ms

    def run(now_ms: int) -> Report:
        done = checkpoints.log_pass(now_ms=now_ms, interval_ms=interval_ms)
        return Report("log", examined=done.extension.added, acted=1 if done.made else 0)

    # the first pass after one interval: the log catches up with what came before at once
    return [Loop("log", config.log_interval_ms, config.log_interval_ms, run)]
