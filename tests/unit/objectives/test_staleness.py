"""L-4, K-6, K-7: a job is stale only after missing two of its own heartbeats.

The windows are computed with the production default settings (`TimingSettings()`), so
these are the cadences a real deployment runs with.
"""

from __future__ import annotations

import pytest

from jobs.core.timing import TimingSettings, lease_ms_for
from objectives.core import vocabulary as v
from objectives.core.facts import Staleness, is_stale, liveness, stale_after_ms
from tests.unit.objectives.helpers import fact

DEFAULTS = TimingSettings()


def lease(agent_id: str, kind: str, **payload: object) -> int:
    return lease_ms_for(agent_id, {"kind": kind, **payload}, DEFAULTS)


@pytest.mark.parametrize(
    ("what", "lease_ms", "path", "window_ms"),
    [
        # lease 300 s: a beat every 100 s -> two missed beats plus 30 s
        ("monitor", lease(v.MONITOR_AGENT, v.KIND_MONITOR), None, 230_000),
        ("audit", lease(v.CONTROL_AGENT, v.KIND_AUDIT), None, 230_000),
        ("watchdog", lease(v.CONTROL_AGENT, v.KIND_WATCHDOG), None, 230_000),
        # lease 900 s: a beat every 200 s (K-7 caps the window at 600 s / 3)
        ("control", lease(v.CONTROL_AGENT, v.KIND_CONTROL), None, 430_000),
        ("task, no timeout", lease(v.CODEX_AGENT, v.KIND_TASK_RUN), None, 430_000),
        (
            "task, 50 min timeout",
            lease(v.CODEX_AGENT, v.KIND_TASK_RUN, timeoutMs=3_000_000),
            None,
            430_000,
        ),
        ("validate", lease(v.CODEX_AGENT, v.KIND_VALIDATE), None, 430_000),
        # sandboxed execution keeps its 15 minutes
        (
            "computer monitor",
            lease(v.MONITOR_AGENT, v.KIND_MONITOR, executionPath="computer"),
            "computer",
            900_000,
        ),
        ("a job without a recorded lease", None, None, 230_000),
    ],
)
def test_the_stale_window_follows_each_jobs_heartbeat_cadence(what, lease_ms, path, window_ms):
    """L-4, K-7: two missed beats plus a margin, at the production defaults."""
    job = fact("j", "running", lease_ms=lease_ms, execution_path=path)
    assert stale_after_ms(job, Staleness()) == window_ms, what


@pytest.mark.parametrize(
    ("settings", "floor_ms", "window_ms"),
    [
        (TimingSettings(heartbeat_interval_ms=1_000), 90_000, 90_000),  # never below 90 s
        (TimingSettings(heartbeat_interval_ms=1_000), 5_000, 32_000),  # a lowered floor
        (TimingSettings(active_stale_ms=30_000), 1_000, 50_000),  # beats every 10 s
        (TimingSettings(), 1_000, 230_000),  # a lowered floor never undercuts the cadence
    ],
)
def test_the_window_never_undercuts_the_floor_or_the_cadence(settings, floor_ms, window_ms):
    """L-4: the floor (90 s by default) and the cadence window, whichever is longer."""
    job = fact("j", "running", lease_ms=300_000)
    staleness = Staleness(live_ms=floor_ms, timing=settings)
    assert stale_after_ms(job, staleness) == window_ms


@pytest.mark.parametrize(
    ("status", "silent_ms", "stale"),
    [
        ("running", 150_000, False),  # between two beats of a 100 s cadence
        ("running", 230_000, False),
        ("running", 230_001, True),
        ("leased", 230_001, True),
        ("queued", 10**9, False),  # delivering queued jobs is L-1's business
        ("completed", 10**9, False),
    ],
)
def test_is_stale_on_a_default_lease(status, silent_ms, stale):
    """L-4: only a leased or running job past its window is stale."""
    job = fact("j", status, lease_ms=300_000, updated_at=1_000)
    assert is_stale(job, 1_000 + silent_ms) is stale


@pytest.mark.parametrize(
    ("status", "silent_ms", "expected"),
    [
        ("queued", 0, "queued"),
        ("running", 150_000, "alive"),
        ("running", 231_000, "stale"),
        ("completed", 0, "settled"),
        ("canceled", 0, "settled"),
    ],
)
def test_a_monitor_judges_liveness_like_the_watchdog(status, silent_ms, expected):
    """O-9, L-4: the checkpoint's liveness uses the same window."""
    job = fact("j", status, lease_ms=300_000, updated_at=1_000)
    assert liveness(job, 1_000 + silent_ms) == expected
