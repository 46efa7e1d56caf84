"""Lease, timeout, heartbeat and concurrency formulas (K-6, K-7, K-8), table-driven."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jobs.core.groups import GroupSettings
from jobs.core.timing import (
    TimingSettings,
    concurrency_for,
    driver_timeout_ms,
    execution_timeout_ms,
    heartbeat_interval_ms,
    lease_ms_for,
)

DEFAULTS = TimingSettings()
CONTROL = "factory.objective.control"
MONITOR = "factory.task.monitor"


def test_default_settings_are_the_spec_defaults() -> None:
    """SPEC 13."""
    assert TimingSettings() == TimingSettings(
        job_lease_ms=300_000,
        codex_job_lease_ms=900_000,
        factory_control_job_lease_ms=900_000,
        factory_control_job_execution_timeout_ms=None,
        heartbeat_interval_ms=None,
        active_stale_ms=600_000,
        execute_concurrency=None,
        chat_job_concurrency=4,
        orchestration_job_concurrency=1,
        codex_job_concurrency=1,
    )


@pytest.mark.parametrize(
    ("field", "value", "env"),
    [
        ("job_lease_ms", 0, "JOB_LEASE_MS"),
        ("codex_job_lease_ms", -1, "CODEX_JOB_LEASE_MS"),
        ("heartbeat_interval_ms", 0, "RECEIPT_RESONATE_HEARTBEAT_INTERVAL_MS"),
        ("execute_concurrency", True, "RECEIPT_RESONATE_EXECUTE_CONCURRENCY"),
        ("chat_job_concurrency", None, "CHAT_JOB_CONCURRENCY"),
        ("active_stale_ms", "600000", "RECEIPT_RESONATE_ACTIVE_STALE_MS"),
    ],
)
def test_invalid_setting_names_its_environment_variable(field: str, value: Any, env: str) -> None:
    with pytest.raises(ValueError, match=f"^{env} must be a positive integer, got "):
        TimingSettings(**{field: value})


def test_settings_copy_same_named_attributes_from_the_site_config() -> None:
    """Field names match receipt_site.config attributes; other attributes are ignored."""
    config = SimpleNamespace(
        job_lease_ms=1_000,
        codex_job_lease_ms=2_000,
        factory_control_job_lease_ms=3_000,
        factory_control_job_execution_timeout_ms=None,
        heartbeat_interval_ms=500,
        active_stale_ms=4_000,
        execute_concurrency=None,
        chat_job_concurrency=2,
        orchestration_job_concurrency=3,
        codex_job_concurrency=5,
        priority_aging_ms=7_000,
        database_url="ignored",
    )
    settings = TimingSettings.from_config(config)
    assert (
        settings.job_lease_ms,
        settings.heartbeat_interval_ms,
        settings.codex_job_concurrency,
        settings.priority_aging_ms,
    ) == (
        1_000,
        500,
        5,
        7_000,
    )


# --- K-6 lease per job -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent_id", "payload", "settings", "lease_ms"),
    [
        # default
        ("factory", {"kind": "factory.run"}, DEFAULTS, 300_000),
        ("someone", None, DEFAULTS, 300_000),
        ("factory-control", {"kind": "factory.objective.audit"}, DEFAULTS, 300_000),
        # factory-control with objective control: max(default, control lease)
        ("factory-control", {"kind": CONTROL}, DEFAULTS, 900_000),
        ("factory-control", {"kind": CONTROL}, TimingSettings(job_lease_ms=1_200_000), 1_200_000),
        (
            "factory-control",
            {"kind": CONTROL},
            TimingSettings(factory_control_job_lease_ms=60_000),
            300_000,
        ),
        ("factory", {"kind": CONTROL}, DEFAULTS, 300_000),  # agent and kind both needed
        # factory-monitor, task monitor, computer execution: max(codex lease, default)
        ("factory-monitor", {"kind": MONITOR, "executionPath": "computer"}, DEFAULTS, 900_000),
        (
            "factory-monitor",
            {"kind": MONITOR, "executionPath": "computer"},
            TimingSettings(codex_job_lease_ms=100_000),
            300_000,
        ),
        ("factory-monitor", {"kind": MONITOR, "executionPath": "local"}, DEFAULTS, 300_000),
        ("factory-monitor", {"kind": MONITOR}, DEFAULTS, 300_000),
        (
            "factory-monitor",
            {"kind": "factory.run", "executionPath": "computer"},
            DEFAULTS,
            300_000,
        ),
        # agent codex: max(codex lease, min(timeoutMs + 300000, 3600000))
        ("codex", {"kind": "factory.task.run"}, DEFAULTS, 900_000),
        ("codex", {"kind": "factory.task.run", "timeoutMs": 60_000}, DEFAULTS, 900_000),
        ("codex", {"timeoutMs": 1_200_000}, DEFAULTS, 1_500_000),
        ("codex", {"timeoutMs": 3_300_000}, DEFAULTS, 3_600_000),
        ("codex", {"timeoutMs": 9_000_000}, DEFAULTS, 3_600_000),
        ("codex", {"timeoutMs": 10**30}, DEFAULTS, 3_600_000),
        ("codex", {"timeoutMs": 1_200_000.25}, DEFAULTS, 1_500_001),  # rounded up
        ("codex", {"timeoutMs": 0}, TimingSettings(codex_job_lease_ms=100_000), 300_000),
        # ... or max(codex lease, default) without a numeric timeoutMs
        ("codex", {"timeoutMs": "1200000"}, DEFAULTS, 900_000),
        ("codex", {"timeoutMs": True}, DEFAULTS, 900_000),
        ("codex", {"timeoutMs": None}, DEFAULTS, 900_000),
        ("codex", {"timeoutMs": float("inf")}, DEFAULTS, 900_000),
        ("codex", ["timeoutMs"], DEFAULTS, 900_000),
        ("codex", {}, TimingSettings(job_lease_ms=1_000_000), 1_000_000),
    ],
)
def test_lease_per_job_follows_k6(
    agent_id: str, payload: Any, settings: TimingSettings, lease_ms: int
) -> None:
    assert lease_ms_for(agent_id, payload, settings) == lease_ms


# --- K-7 execution timeout, heartbeat cadence, driver timeout ---------------------------


@pytest.mark.parametrize(
    ("lease_ms", "kind", "override", "timeout_ms"),
    [
        (300_000, "factory.run", None, 299_000),
        (900_000, CONTROL, None, 899_000),
        (6_000, "factory.run", None, 5_000),
        (5_500, "factory.run", None, 5_000),  # floor
        (1_000, None, None, 5_000),
        (900_000, CONTROL, 60_000, 60_000),  # the override lowers ...
        (900_000, CONTROL, 2_000_000, 899_000),  # ... and never raises
        (900_000, "factory.task.run", 60_000, 899_000),  # ... for objective control only
        (900_000, None, 60_000, 899_000),
        (900_000, CONTROL, 1_000, 1_000),  # an explicit override below the floor is honoured
    ],
)
def test_execution_timeout_follows_k7(
    lease_ms: int, kind: str | None, override: int | None, timeout_ms: int
) -> None:
    settings = TimingSettings(factory_control_job_execution_timeout_ms=override)
    assert execution_timeout_ms(lease_ms, kind, settings) == timeout_ms


@pytest.mark.parametrize(
    ("lease_ms", "active_stale_ms", "override", "interval_ms"),
    [
        (300_000, 600_000, None, 100_000),
        (900_000, 600_000, None, 200_000),  # the stale window is shorter than the lease
        (3_600_000, 600_000, None, 200_000),
        (300_000, 30_000, None, 10_000),
        (3_003, 600_000, None, 1_001),
        (3_002, 600_000, None, 1_000),  # floor(3002 / 3) = 1000
        (2_000, 600_000, None, 1_000),  # floor
        (300_000, 600_000, 5_000, 5_000),  # the override lowers ...
        (300_000, 600_000, 500_000, 100_000),  # ... and never raises
        (2_000, 600_000, 200, 200),  # an explicit override below the floor is honoured
    ],
)
def test_heartbeat_cadence_follows_k7(
    lease_ms: int, active_stale_ms: int, override: int | None, interval_ms: int
) -> None:
    settings = TimingSettings(active_stale_ms=active_stale_ms, heartbeat_interval_ms=override)
    assert heartbeat_interval_ms(lease_ms, settings) == interval_ms


@pytest.mark.parametrize(
    ("lease_ms", "timeout_ms"),
    [
        (300_000, 360_000),
        (900_000, 960_000),
        (60_000, 120_000),
        (30_000, 120_000),
        (60_001, 120_001),
    ],
)
def test_driver_invocation_timeout_follows_k7(lease_ms: int, timeout_ms: int) -> None:
    assert driver_timeout_ms(lease_ms) == timeout_ms


# --- K-8 concurrency -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "settings", "concurrency"),
    [
        ("chat", DEFAULTS, 4),
        ("control", DEFAULTS, 1),
        ("codex", DEFAULTS, 1),
        ("driver", DEFAULTS, 1),
        ("chat", TimingSettings(chat_job_concurrency=9), 9),
        ("control", TimingSettings(orchestration_job_concurrency=3), 3),
        ("codex", TimingSettings(codex_job_concurrency=2), 2),
        ("chat", TimingSettings(execute_concurrency=7, chat_job_concurrency=9), 7),
        ("control", TimingSettings(execute_concurrency=7), 7),
        ("codex", TimingSettings(execute_concurrency=7), 7),
        ("driver", TimingSettings(execute_concurrency=7), 7),
    ],
)
def test_concurrency_per_group_follows_k8(
    group: Any, settings: TimingSettings, concurrency: int
) -> None:
    assert concurrency_for(group, settings) == concurrency


def test_unknown_concurrency_group_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown worker group 'api'"):
        concurrency_for("api", TimingSettings(execute_concurrency=3))


# ---- declared worker groups (issue 33 item 5) ------------------------------------------------

EMAILS = GroupSettings(name="emails", concurrency=6, lease_ms=60_000, execution_timeout_ms=20_000)
BARE = GroupSettings(name="bare")
DECLARED = TimingSettings(worker_groups=(EMAILS, BARE))


def test_declared_groups_follow_the_built_in_ones() -> None:
    assert DECLARED.group_names() == ("chat", "control", "codex", "emails", "bare")
    assert DECLARED.declared("emails") is EMAILS and DECLARED.declared("chat") is None


@pytest.mark.parametrize(
    ("settings", "group", "concurrency"),
    [
        (DECLARED, "emails", 6),  # its own
        (DECLARED, "bare", 4),  # sized like chat
        (TimingSettings(worker_groups=(BARE,), chat_job_concurrency=7), "bare", 7),
        (TimingSettings(worker_groups=(BARE,), execute_concurrency=3), "bare", 3),  # K-8's override
        (TimingSettings(worker_groups=(EMAILS,), execute_concurrency=3), "emails", 6),  # wins
        (DECLARED, "chat", 4),  # the built-ins as before
        (DECLARED, "control", 1),
    ],
)
def test_a_declared_group_has_its_concurrency_else_the_global_one(settings, group, concurrency):
    assert concurrency_for(group, settings) == concurrency


def test_a_declared_groups_lease_and_timeout_apply_to_its_jobs_only() -> None:
    plain = {"kind": "acme.mail"}
    assert lease_ms_for("mailer", plain, DECLARED, group="emails") == 60_000
    assert lease_ms_for("mailer", plain, DECLARED, group="bare") == 300_000
    assert lease_ms_for("mailer", plain, DECLARED, group="chat") == 300_000
    assert lease_ms_for("codex", {}, DECLARED, group="emails") == 900_000  # K-6 unchanged
    assert execution_timeout_ms(60_000, "acme.mail", DECLARED, group="emails") == 20_000
    assert execution_timeout_ms(10_000, "acme.mail", DECLARED, group="emails") == 9_000  # lower
    assert execution_timeout_ms(60_000, "acme.mail", DECLARED, group="bare") == 59_000


def test_settings_without_worker_groups_declare_none() -> None:
    assert TimingSettings.from_config(SimpleNamespace(**DEFAULTS_AS_CONFIG)).worker_groups == ()
    with pytest.raises(ValueError, match="RECEIPT_WORKER_GROUPS"):
        TimingSettings(worker_groups=("emails",))  # type: ignore[arg-type]


DEFAULTS_AS_CONFIG = {
    name: getattr(DEFAULTS, name)
    for name in (
        "job_lease_ms",
        "codex_job_lease_ms",
        "factory_control_job_lease_ms",
        "factory_control_job_execution_timeout_ms",
        "heartbeat_interval_ms",
        "active_stale_ms",
        "execute_concurrency",
        "chat_job_concurrency",
        "orchestration_job_concurrency",
        "codex_job_concurrency",
        "priority_aging_ms",
    )
}
