"""Typed configuration read once from the environment (SPEC 13).

Pure: `load(env)` takes a mapping and returns a frozen Config or raises ConfigError
naming the variable, so a typo stops startup instead of silently using a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

SECRET_NAMES = ("SECRET_KEY", "RECEIPT_CALLBACK_TOKEN", "RECEIPT_CHECKPOINT_KEY")


class ConfigError(ValueError):
    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"invalid configuration: {name} {problem}")
        self.name = name


@dataclass(frozen=True)
class Config:
    database_url: str | None
    data_dir: str
    broker: str
    broker_poll_ms: int
    dispatch_mode: str
    handler_modules: tuple[str, ...]
    process_role: str | None
    job_lease_ms: int
    codex_job_lease_ms: int
    factory_control_job_lease_ms: int
    factory_control_job_execution_timeout_ms: int | None
    execute_concurrency: int | None
    chat_job_concurrency: int
    orchestration_job_concurrency: int
    codex_job_concurrency: int
    heartbeat_interval_ms: int | None
    active_stale_ms: int
    queued_redrive_interval_ms: int
    queued_redrive_min_age_ms: int
    queued_redrive_cooldown_ms: int
    queued_redrive_startup_delay_ms: int
    control_outbox_redrive_interval_ms: int
    control_outbox_redrive_timeout_ms: int
    watchdog_enabled: bool
    watchdog_cron: str
    watchdog_timeout_ms: int
    watchdog_scan_limit: int
    startup_settle_ms: int
    resonate_callback_url: str | None
    event_callback_url: str | None
    callback_token: str | None
    callback_retry_for_ms: int
    repo_slot_concurrency: int
    factory_planner: str | None
    factory_executor: str | None
    factory_run_handler: str | None
    factory_planner_command: str | None
    factory_agent_command: str | None
    workspace_dir: str | None
    command_sandbox: str
    bwrap_path: str
    command_user: str
    command_cpu_s: int
    command_memory_mb: int
    command_processes: int
    command_file_mb: int
    factory_monitor_interval_ms: int
    retention_enabled: bool
    retention_days: int
    retention_watchdog_days: int
    retention_control_days: int
    log_enabled: bool
    log_interval_ms: int
    checkpoint_interval_ms: int
    checkpoint_key_file: str | None
    checkpoint_key: str | None
    max_payload_bytes: int
    max_json_depth: int
    secret_key: str | None
    allowed_hosts: tuple[str, ...]
    debug: bool
    log_level: str

    @property
    def callback_url(self) -> str | None:
        return self.resonate_callback_url or self.event_callback_url

    def shown(self) -> list[tuple[str, str]]:
        """(ENV NAME, value) pairs for the dashboard, secrets masked, URLs without passwords."""
        rows = []
        for spec in _SPECS:
            value = getattr(self, spec.attr)
            if value is None:
                text = "—"
            elif spec.env in SECRET_NAMES:
                text = "•••• (set)"
            elif spec.env in ("DATABASE_URL", "RECEIPT_BROKER"):
                text = redact_url(str(value))
            elif spec.env in ("RECEIPT_RESONATE_CALLBACK_URL", "RECEIPT_EVENT_CALLBACK_URL"):
                text = origin_only(str(value))  # webhook URLs often carry tokens
            elif isinstance(value, tuple):
                text = ",".join(value)
            else:
                text = str(value)
            rows.append((spec.env, text))
        return rows


def redact_url(url: str) -> str:
    """Drop the password from a URL (user kept), for logs, health and the dashboard."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username}:***@{host}" if parts.username else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def origin_only(url: str) -> str:
    """scheme://host[:port]/… — path, query and credentials left out."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return "•••• (set)"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/…"


@dataclass(frozen=True)
class _Spec:
    env: str
    attr: str
    kind: str  # int | optint | bool | str | optstr | list
    default: Any = None
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] | None = None


_MS = 10**9  # a generous ceiling for millisecond values (~11 days)
_SPECS = (
    _Spec("DATABASE_URL", "database_url", "optstr"),
    _Spec("RECEIPT_DATA_DIR", "data_dir", "str", "./.receipt"),
    _Spec("RECEIPT_BROKER", "broker", "str", "orm"),
    _Spec("RECEIPT_BROKER_POLL_MS", "broker_poll_ms", "int", 50, 5, 5_000),
    _Spec(
        "RECEIPT_DISPATCH", "dispatch_mode", "str", "background", choices=("background", "inline")
    ),
    _Spec("RECEIPT_HANDLER_MODULES", "handler_modules", "list", ""),
    _Spec("RECEIPT_PROCESS_ROLE", "process_role", "optstr"),
    _Spec("JOB_LEASE_MS", "job_lease_ms", "int", 300_000, 1000, _MS),
    _Spec("CODEX_JOB_LEASE_MS", "codex_job_lease_ms", "int", 900_000, 1000, _MS),
    _Spec(
        "FACTORY_CONTROL_JOB_LEASE_MS", "factory_control_job_lease_ms", "int", 900_000, 1000, _MS
    ),
    _Spec(
        "FACTORY_CONTROL_JOB_EXECUTION_TIMEOUT_MS",
        "factory_control_job_execution_timeout_ms",
        "optint",
        None,
        1000,
        _MS,
    ),
    _Spec("RECEIPT_RESONATE_EXECUTE_CONCURRENCY", "execute_concurrency", "optint", None, 1, 256),
    _Spec("CHAT_JOB_CONCURRENCY", "chat_job_concurrency", "int", 4, 1, 256),
    _Spec("ORCHESTRATION_JOB_CONCURRENCY", "orchestration_job_concurrency", "int", 1, 1, 256),
    _Spec("CODEX_JOB_CONCURRENCY", "codex_job_concurrency", "int", 1, 1, 256),
    _Spec(
        "RECEIPT_RESONATE_HEARTBEAT_INTERVAL_MS", "heartbeat_interval_ms", "optint", None, 100, _MS
    ),
    _Spec("RECEIPT_RESONATE_ACTIVE_STALE_MS", "active_stale_ms", "int", 600_000, 1000, _MS),
    _Spec(
        "RECEIPT_RESONATE_QUEUED_REDRIVE_INTERVAL_MS",
        "queued_redrive_interval_ms",
        "int",
        15_000,
        100,
        _MS,
    ),
    _Spec(
        "RECEIPT_RESONATE_QUEUED_REDRIVE_MIN_AGE_MS",
        "queued_redrive_min_age_ms",
        "int",
        30_000,
        0,
        _MS,
    ),
    _Spec(
        "RECEIPT_RESONATE_QUEUED_REDRIVE_COOLDOWN_MS",
        "queued_redrive_cooldown_ms",
        "int",
        15_000,
        0,
        _MS,
    ),
    _Spec(
        "RECEIPT_RESONATE_QUEUED_REDRIVE_STARTUP_DELAY_MS",
        "queued_redrive_startup_delay_ms",
        "int",
        5_000,
        0,
        _MS,
    ),
    _Spec(
        "RECEIPT_OBJECTIVE_CONTROL_OUTBOX_REDRIVE_INTERVAL_MS",
        "control_outbox_redrive_interval_ms",
        "int",
        5_000,
        100,
        _MS,
    ),
    _Spec(
        "RECEIPT_OBJECTIVE_CONTROL_OUTBOX_REDRIVE_TIMEOUT_MS",
        "control_outbox_redrive_timeout_ms",
        "int",
        15_000,
        100,
        _MS,
    ),
    _Spec("RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_ENABLED", "watchdog_enabled", "bool", True),
    _Spec("RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_CRON", "watchdog_cron", "str", "* * * * *"),
    _Spec(
        "RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_TIMEOUT_MS",
        "watchdog_timeout_ms",
        "int",
        60_000,
        0,
        _MS,
    ),
    _Spec(
        "RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_SCAN_LIMIT",
        "watchdog_scan_limit",
        "int",
        200,
        None,
        None,
    ),
    _Spec("RESONATE_STARTUP_SETTLE_MS", "startup_settle_ms", "int", 1_000, 0, _MS),
    _Spec("RECEIPT_RESONATE_CALLBACK_URL", "resonate_callback_url", "optstr"),
    _Spec("RECEIPT_EVENT_CALLBACK_URL", "event_callback_url", "optstr"),
    _Spec("RECEIPT_CALLBACK_TOKEN", "callback_token", "optstr"),
    _Spec("RECEIPT_CALLBACK_RETRY_FOR_MS", "callback_retry_for_ms", "int", 3_600_000, 1000, _MS),
    _Spec("RECEIPT_FACTORY_REPO_SLOT_CONCURRENCY", "repo_slot_concurrency", "int", 20, 1, 10_000),
    _Spec("RECEIPT_FACTORY_PLANNER", "factory_planner", "optstr"),
    _Spec("RECEIPT_FACTORY_EXECUTOR", "factory_executor", "optstr"),
    _Spec("RECEIPT_FACTORY_RUN_HANDLER", "factory_run_handler", "optstr"),
    _Spec("RECEIPT_FACTORY_PLANNER_COMMAND", "factory_planner_command", "optstr"),
    _Spec("RECEIPT_FACTORY_AGENT_COMMAND", "factory_agent_command", "optstr"),
    # Task commands (Q-5, jobs.runtime.sandbox): where workspaces live, how commands run
    _Spec("RECEIPT_WORKSPACE_DIR", "workspace_dir", "optstr"),
    _Spec("RECEIPT_COMMAND_SANDBOX", "command_sandbox", "str", "bwrap", choices=("bwrap", "host")),
    _Spec("RECEIPT_BWRAP_PATH", "bwrap_path", "str", "/usr/bin/bwrap"),
    _Spec("RECEIPT_COMMAND_USER", "command_user", "str", "nobody"),
    _Spec("RECEIPT_COMMAND_CPU_SECONDS", "command_cpu_s", "int", 3600, 1, 7 * 86_400),
    _Spec("RECEIPT_COMMAND_MEMORY_MB", "command_memory_mb", "int", 4096, 16, 1 << 22),
    _Spec("RECEIPT_COMMAND_PROCESSES", "command_processes", "int", 512, 8, 1 << 22),
    _Spec("RECEIPT_COMMAND_FILE_MB", "command_file_mb", "int", 1024, 1, 1 << 24),
    _Spec(
        "RECEIPT_FACTORY_MONITOR_INTERVAL_MS",
        "factory_monitor_interval_ms",
        "int",
        10_000,
        100,
        _MS,
    ),
    _Spec("RECEIPT_RETENTION_ENABLED", "retention_enabled", "bool", True),
    _Spec("RECEIPT_RETENTION_DAYS", "retention_days", "int", 30, 1, 36_500),
    _Spec("RECEIPT_RETENTION_WATCHDOG_DAYS", "retention_watchdog_days", "int", 2, 1, 36_500),
    _Spec("RECEIPT_RETENTION_CONTROL_DAYS", "retention_control_days", "int", 7, 1, 36_500),
    # The store-wide log and its signed checkpoints (receipts.log, receipts.checkpoints)
    _Spec("RECEIPT_LOG_ENABLED", "log_enabled", "bool", True),
    _Spec("RECEIPT_LOG_INTERVAL_MS", "log_interval_ms", "int", 5_000, 100, _MS),
    _Spec("RECEIPT_CHECKPOINT_INTERVAL_MS", "checkpoint_interval_ms", "int", 60_000, 1000, _MS),
    _Spec("RECEIPT_CHECKPOINT_KEY_FILE", "checkpoint_key_file", "optstr"),
    _Spec("RECEIPT_CHECKPOINT_KEY", "checkpoint_key", "optstr"),
    _Spec("RECEIPT_MAX_PAYLOAD_BYTES", "max_payload_bytes", "int", 1_048_576, 1024, 64 * 1_048_576),
    _Spec("RECEIPT_MAX_JSON_DEPTH", "max_json_depth", "int", 32, 2, 256),
    _Spec("SECRET_KEY", "secret_key", "optstr"),
    _Spec("ALLOWED_HOSTS", "allowed_hosts", "list", "127.0.0.1,localhost,[::1],testserver"),
    _Spec("DEBUG", "debug", "bool", False),
    _Spec(
        "RECEIPT_LOG_LEVEL",
        "log_level",
        "str",
        "INFO",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
    ),
)

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _parse(spec: _Spec, raw: str | None) -> Any:
    if raw is None or (raw.strip() == "" and spec.kind != "bool"):
        return spec.default if spec.kind != "list" else _hosts(spec.default)
    raw = raw.strip()
    if spec.kind in ("int", "optint"):
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(spec.env, f"must be an integer, got {raw!r}") from None
        if spec.low is not None and value < spec.low:
            raise ConfigError(spec.env, f"must be >= {spec.low}, got {value}")
        if spec.high is not None and value > spec.high:
            raise ConfigError(spec.env, f"must be <= {spec.high}, got {value}")
        return value
    if spec.kind == "bool":
        lowered = raw.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(spec.env, f"must be one of 1/0/true/false, got {raw!r}")
    if spec.kind == "list":
        return _hosts(raw)
    if spec.choices:
        for choice in spec.choices:  # case-insensitive; the table's spelling is canonical
            if raw.lower() == choice.lower():
                return choice
        raise ConfigError(spec.env, f"must be one of {', '.join(spec.choices)}, got {raw!r}")
    return raw


def _hosts(raw: str) -> tuple[str, ...]:
    return tuple(h.strip() for h in raw.split(",") if h.strip())


def load(env: Mapping[str, str]) -> Config:
    values = {spec.attr: _parse(spec, env.get(spec.env)) for spec in _SPECS}
    broker = values["broker"]
    if broker != "orm" and not broker.startswith(("redis://", "rediss://")):
        raise ConfigError("RECEIPT_BROKER", f"must be 'orm' or a redis:// URL, got {broker!r}")
    url = values["database_url"]
    if url and not url.startswith(("postgres://", "postgresql://", "sqlite://")):
        raise ConfigError("DATABASE_URL", "must start with postgres://, postgresql:// or sqlite://")
    cron = values["watchdog_cron"]
    if len(cron.split()) != 5:
        raise ConfigError(
            "RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_CRON",
            f"must be a 5-field cron expression, got {cron!r}",
        )
    if values["checkpoint_key_file"] and values["checkpoint_key"]:
        raise ConfigError(
            "RECEIPT_CHECKPOINT_KEY", "and RECEIPT_CHECKPOINT_KEY_FILE are exclusive: set one"
        )
    return Config(**values)


assert {f.name for f in fields(Config)} == {s.attr for s in _SPECS}, "config table drift"
