"""Factory's maintenance loops per role (L-3, L-4 seeding, L-5's objective resume).

Only the control role runs them: the outbox redrive every
RECEIPT_OBJECTIVE_CONTROL_OUTBOX_REDRIVE_INTERVAL_MS (single-flight, observational
deadline ..._TIMEOUT_MS), the watchdog schedule seeding once at startup, django-q2's
scheduler pass every 30 s (it fires the watchdog schedule), and one resume pass after
RESONATE_STARTUP_SETTLE_MS.
"""

from __future__ import annotations

from typing import Any

from jobs.runtime.loops import Loop
from jobs.runtime.promisebroker import run_schedules
from objectives import outbox, schedules

CONTROL = "worker-control"


def role_loops(config: Any, role: str) -> list[Loop]:
    if role != CONTROL:
        return []
    return [
        Loop(
            "control_outbox_redrive",
            config.control_outbox_redrive_interval_ms,
            config.startup_settle_ms,
            outbox.Redrive(config.control_outbox_redrive_timeout_ms),
        ),
        Loop("watchdog_schedule", 0, 0, lambda now: schedules.seed_report(config), once=True),
        Loop("schedules", 30_000, 5_000, run_schedules),
        Loop(
            "objective_resume",
            0,
            config.startup_settle_ms,
            lambda now: outbox.resume(now_ms=now),
            once=True,
        ),
    ]
