"""Typed configuration, read once (SPEC 13), through one of two doors:

- `load(env)`: the standalone site reads environment variables (`JOB_LEASE_MS=...`);
- `from_settings(block)`: a host project's `RECEIPT = {"job_lease_ms": ...}` settings
  block, keyed by the Config attribute names (lowercase), values already typed; the
  structured keys (`schedules`, `limits`, `worker_groups`) take their Python form or the
  environment variable's text, read by the same parser.

Pure: both take a mapping and return a frozen Config or raise ConfigError naming the
variable or key, so a typo stops startup instead of silently using a default. Both share
the table of defaults and bounds below.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jobs.core import groups as worker_groups
from jobs.core.groups import GroupSettings
from jobs.core.limits import Limit, LimitError
from jobs.core.limits import parse_many as parse_limits
from jobs.core.schedules import Schedule, ScheduleError, parse_many

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
    # the deployment's own worker groups: RECEIPT_WORKER_GROUPS, or a settings mapping
    # {"emails": {"concurrency": 4, "lease_ms": 60000, "execution_timeout_ms": 30000}}
    worker_groups: tuple[GroupSettings, ...]
    priority_aging_ms: int
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
    runworker_stop_grace_s: int
    resonate_callback_url: str | None
    event_callback_url: str | None
    callback_token: str | None
    callback_retry_for_ms: int
    sse_keepalive_ms: int
    sse_poll_ms: int
    live_db_threads: int
    live_ring_size: int
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
    schedules: tuple[Schedule, ...]
    limits: tuple[Limit, ...]
    secret_key: str | None
    allowed_hosts: tuple[str, ...]
    debug: bool
    log_level: str

    def __post_init__(self) -> None:
        """`worker_groups` may also be given as a mapping (a settings block) or the text of
        RECEIPT_WORKER_GROUPS: it is checked and kept as declared groups, so every way of
        building a Config yields the same value."""
        checked = _groups("worker_groups", self.worker_groups)
        object.__setattr__(self, "worker_groups", checked)

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
            elif spec.kind == "groups":
                text = worker_groups.shown(value) or "—"
            elif spec.kind == "schedules":
                text = ", ".join(f"{s.name} ({s.trigger})" for s in value) or "—"
            elif spec.kind == "limits":
                text = ", ".join(limit.name for limit in value) or "—"
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
    kind: str  # int | optint | bool | str | optstr | list | groups | schedules | limits
    default: Any = None
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] | None = None


_MS = 10**9  # a generous ceiling for millisecond values (~11 days)


def _ms(env: str, attr: str, default: int | None, low: int) -> _Spec:
    """A duration in milliseconds, `low` to _MS; unset is None when `default` is None."""
    return _Spec(env, attr, "int" if default is not None else "optint", default, low, _MS)


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
    _ms("JOB_LEASE_MS", "job_lease_ms", 300_000, 1000),
    _ms("CODEX_JOB_LEASE_MS", "codex_job_lease_ms", 900_000, 1000),
    _ms("FACTORY_CONTROL_JOB_LEASE_MS", "factory_control_job_lease_ms", 900_000, 1000),
    _ms(
        "FACTORY_CONTROL_JOB_EXECUTION_TIMEOUT_MS",
        "factory_control_job_execution_timeout_ms",
        None,
        1000,
    ),
    _Spec("RECEIPT_RESONATE_EXECUTE_CONCURRENCY", "execute_concurrency", "optint", None, 1, 256),
    _Spec("CHAT_JOB_CONCURRENCY", "chat_job_concurrency", "int", 4, 1, 256),
    _Spec("ORCHESTRATION_JOB_CONCURRENCY", "orchestration_job_concurrency", "int", 1, 1, 256),
    _Spec("CODEX_JOB_CONCURRENCY", "codex_job_concurrency", "int", 1, 1, 256),
    _Spec("RECEIPT_WORKER_GROUPS", "worker_groups", "groups", ""),
    _Spec("RECEIPT_PRIORITY_AGING_MS", "priority_aging_ms", "int", 60_000, 1, 86_400_000),
    _ms("RECEIPT_RESONATE_HEARTBEAT_INTERVAL_MS", "heartbeat_interval_ms", None, 100),
    _ms("RECEIPT_RESONATE_ACTIVE_STALE_MS", "active_stale_ms", 600_000, 1000),
    _ms("RECEIPT_RESONATE_QUEUED_REDRIVE_INTERVAL_MS", "queued_redrive_interval_ms", 15_000, 100),
    _ms("RECEIPT_RESONATE_QUEUED_REDRIVE_MIN_AGE_MS", "queued_redrive_min_age_ms", 30_000, 0),
    _ms("RECEIPT_RESONATE_QUEUED_REDRIVE_COOLDOWN_MS", "queued_redrive_cooldown_ms", 15_000, 0),
    _ms(
        "RECEIPT_RESONATE_QUEUED_REDRIVE_STARTUP_DELAY_MS",
        "queued_redrive_startup_delay_ms",
        5_000,
        0,
    ),
    _ms(
        "RECEIPT_OBJECTIVE_CONTROL_OUTBOX_REDRIVE_INTERVAL_MS",
        "control_outbox_redrive_interval_ms",
        5_000,
        100,
    ),
    _ms(
        "RECEIPT_OBJECTIVE_CONTROL_OUTBOX_REDRIVE_TIMEOUT_MS",
        "control_outbox_redrive_timeout_ms",
        15_000,
        100,
    ),
    _Spec("RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_ENABLED", "watchdog_enabled", "bool", True),
    _Spec("RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_CRON", "watchdog_cron", "str", "* * * * *"),
    _ms("RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_TIMEOUT_MS", "watchdog_timeout_ms", 60_000, 0),
    _Spec("RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_SCAN_LIMIT", "watchdog_scan_limit", "int", 200),
    _ms("RESONATE_STARTUP_SETTLE_MS", "startup_settle_ms", 1_000, 0),
    _Spec("RUNWORKER_STOP_GRACE_S", "runworker_stop_grace_s", "int", 30, 0, 86_400),
    _Spec("RECEIPT_RESONATE_CALLBACK_URL", "resonate_callback_url", "optstr"),
    _Spec("RECEIPT_EVENT_CALLBACK_URL", "event_callback_url", "optstr"),
    _Spec("RECEIPT_CALLBACK_TOKEN", "callback_token", "optstr"),
    _ms("RECEIPT_CALLBACK_RETRY_FOR_MS", "callback_retry_for_ms", 3_600_000, 1000),
    # Live events (receipts.live.config): keepalive, SQLite poll, shared threads, ring
    _Spec("RECEIPT_SSE_KEEPALIVE_MS", "sse_keepalive_ms", "int", 5000, 50, 600_000),
    _Spec("RECEIPT_SSE_POLL_MS", "sse_poll_ms", "int", 250, 10, 10_000),
    _Spec("RECEIPT_LIVE_DB_THREADS", "live_db_threads", "int", 4, 1, 64),
    _Spec("RECEIPT_LIVE_RING_SIZE", "live_ring_size", "int", 10_000, 100, 1_000_000),
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
    _ms("RECEIPT_FACTORY_MONITOR_INTERVAL_MS", "factory_monitor_interval_ms", 10_000, 100),
    _Spec("RECEIPT_RETENTION_ENABLED", "retention_enabled", "bool", True),
    _Spec("RECEIPT_RETENTION_DAYS", "retention_days", "int", 30, 1, 36_500),
    _Spec("RECEIPT_RETENTION_WATCHDOG_DAYS", "retention_watchdog_days", "int", 2, 1, 36_500),
    _Spec("RECEIPT_RETENTION_CONTROL_DAYS", "retention_control_days", "int", 7, 1, 36_500),
    # The store-wide log and its signed checkpoints (receipts.log, receipts.checkpoints)
    _Spec("RECEIPT_LOG_ENABLED", "log_enabled", "bool", True),
    _ms("RECEIPT_LOG_INTERVAL_MS", "log_interval_ms", 5_000, 100),
    _ms("RECEIPT_CHECKPOINT_INTERVAL_MS", "checkpoint_interval_ms", 60_000, 1000),
    _Spec("RECEIPT_CHECKPOINT_KEY_FILE", "checkpoint_key_file", "optstr"),
    _Spec("RECEIPT_CHECKPOINT_KEY", "checkpoint_key", "optstr"),
    _Spec("RECEIPT_MAX_PAYLOAD_BYTES", "max_payload_bytes", "int", 1_048_576, 1024, 64 * 1_048_576),
    _Spec("RECEIPT_MAX_JSON_DEPTH", "max_json_depth", "int", 32, 2, 256),
    # a JSON array of schedules (jobs.core.schedules.from_wire): name, agentId, payload,
    # cron + timezone or every (seconds), missed, enqueue options
    _Spec("RECEIPT_SCHEDULES", "schedules", "schedules", ""),
    # a JSON array of rate limits and concurrency caps (jobs.core.limits.from_wire): name,
    # kinds and/or queues, rate ("60/m") and/or concurrency, key
    _Spec("RECEIPT_LIMITS", "limits", "limits", ""),
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


def _parse(spec: _Spec, raw: Any) -> Any:
    if spec.kind in _STRUCTURED:
        return _STRUCTURED[spec.kind](spec.env, raw)
    if raw is None or (raw.strip() == "" and spec.kind != "bool"):
        return spec.default if spec.kind != "list" else _hosts(spec.default)
    raw = raw.strip()
    if spec.kind in ("int", "optint"):
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(spec.env, f"must be an integer, got {raw!r}") from None
        return _in_bounds(spec, spec.env, value)
    if spec.kind == "bool":
        lowered = raw.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(spec.env, f"must be one of 1/0/true/false, got {raw!r}")
    if spec.kind == "list":
        return _hosts(raw)
    return _choice(spec.choices, spec.env, raw) if spec.choices else raw


def _in_bounds(spec: _Spec, name: str, value: int) -> int:
    if spec.low is not None and value < spec.low:
        raise ConfigError(name, f"must be >= {spec.low}, got {value}")
    if spec.high is not None and value > spec.high:
        raise ConfigError(name, f"must be <= {spec.high}, got {value}")
    return value


def _choice(choices: tuple[str, ...], name: str, given: str) -> str:
    """Case-insensitive; the table's spelling is canonical."""
    for choice in choices:
        if given.strip().lower() == choice.lower():
            return choice
    raise ConfigError(name, f"must be one of {', '.join(choices)}, got {given!r}")


def _schedules(name: str, raw: Any) -> tuple[Schedule, ...]:
    """JSON text (the environment's), or a list of wire dicts and/or Schedules (a settings
    block), parsed and checked down to each cron expression's values (croniter, imported
    only when there is a cron schedule)."""
    try:
        schedules = parse_many(raw if raw is not None else "")
        crons = [s for s in schedules if s.cron is not None]
        if crons:
            from jobs.ticks import check_cron

            for schedule in crons:
                try:
                    check_cron(schedule.cron)  # type: ignore[arg-type]
                except ScheduleError as error:
                    raise ScheduleError(f"schedule {schedule.name!r}: {error}") from None
    except ScheduleError as error:
        raise ConfigError(name, str(error)) from None
    return schedules


def _groups(name: str, declared: Any) -> tuple[GroupSettings, ...]:
    """Worker groups from RECEIPT_WORKER_GROUPS's text (a JSON object, or the compact
    `name[:concurrency]` list), a mapping of names to their settings (a settings block), or
    a sequence of GroupSettings; None declares none."""
    try:
        if declared is None:
            return ()
        if isinstance(declared, str):
            return worker_groups.parse(declared)
        if isinstance(declared, Mapping):
            return worker_groups.from_mapping(declared)
        if isinstance(declared, tuple | list) and all(
            isinstance(group, GroupSettings) for group in declared
        ):
            checked = worker_groups.from_mapping({group.name: group for group in declared})
            if len(checked) != len(declared):
                raise worker_groups.GroupsError("declares a group twice")
            return checked
        raise worker_groups.GroupsError(
            "must map group names to their settings, as in {'emails': {'concurrency': 4}} "
            f"(or be the text of RECEIPT_WORKER_GROUPS), got {declared!r}"
        )
    except worker_groups.GroupsError as error:
        raise ConfigError(name, str(error)) from None


def _limits(name: str, raw: Any) -> tuple[Limit, ...]:
    try:
        return parse_limits(raw if raw is not None else "")
    except LimitError as error:
        raise ConfigError(name, str(error)) from None


# The structured kinds' readers, one for the environment's text and a settings block's
# values alike: (the variable or key named in errors, the raw value) -> checked tuple.
_STRUCTURED: dict[str, Callable[[str, Any], tuple[Any, ...]]] = {
    "schedules": _schedules,
    "limits": _limits,
    "groups": _groups,
}


def _hosts(raw: str) -> tuple[str, ...]:
    return tuple(h.strip() for h in raw.split(",") if h.strip())


def load(env: Mapping[str, str]) -> Config:
    values = {spec.attr: _parse(spec, env.get(spec.env)) for spec in _SPECS}
    return _checked(values, {spec.attr: spec.env for spec in _SPECS})


# In a host project these are Django's own settings, never Receipt's.
HOST_OWNED = {
    "database_url": "DATABASES",
    "secret_key": "SECRET_KEY",
    "allowed_hosts": "ALLOWED_HOSTS",
    "debug": "DEBUG",
    "log_level": "LOGGING",
}


def from_settings(block: Mapping[str, Any]) -> Config:
    """The Config of a host project's `RECEIPT` settings block: lowercase keys (the Config
    attribute names), typed values; every key left out keeps its default."""
    if not isinstance(block, Mapping):
        raise ConfigError("RECEIPT", f"must be a dict, got {type(block).__name__}")
    specs = {spec.attr: spec for spec in _SPECS}
    names = {attr: f"RECEIPT[{attr!r}]" for attr in specs}
    values: dict[str, Any] = {}
    for key, value in block.items():
        name = f"RECEIPT[{key!r}]"
        if key in HOST_OWNED:
            raise ConfigError(name, f"is the project's own setting: set {HOST_OWNED[key]}")
        if key not in specs:
            raise ConfigError(name, f"is not a Receipt setting{_did_you_mean(key)}")
        values[key] = _typed(specs[key], name, value)
    for attr, spec in specs.items():
        if attr not in values:
            values[attr] = _parse(spec, None)
    return _checked(values, names)


def _did_you_mean(key: Any) -> str:
    """A hint for a mistyped key, or an environment variable's name used as one."""
    by_env = {spec.env: spec.attr for spec in _SPECS if spec.attr not in HOST_OWNED}
    if key in by_env:
        return f"; did you mean {by_env[key]!r}?"
    close = difflib.get_close_matches(str(key).lower(), by_env.values(), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _typed(spec: _Spec, name: str, value: Any) -> Any:
    """A settings-block value checked against its spec (no strings parsed as numbers)."""
    if value is None and spec.kind in ("optint", "optstr"):
        return None
    # Structured keys: the natural Python form (a list of dicts and/or objects; a mapping
    # for worker groups) or the environment variable's text, read by the same reader.
    if spec.kind in _STRUCTURED:
        return _STRUCTURED[spec.kind](name, value)
    if spec.kind in ("int", "optint"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(name, f"must be an integer, got {value!r}")
        return _in_bounds(spec, name, value)
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(name, f"must be True or False, got {value!r}")
        return value
    if spec.kind == "list":
        if isinstance(value, str) or not all(isinstance(v, str) for v in value or ()):
            raise ConfigError(name, f"must be a list of strings, got {value!r}")
        return tuple(v.strip() for v in value if v.strip())
    if not isinstance(value, str):
        raise ConfigError(name, f"must be a string, got {value!r}")
    return _choice(spec.choices, name, value) if spec.choices else value


def _checked(values: dict[str, Any], names: Mapping[str, str]) -> Config:
    """The rules across the table (what one value's spec cannot say), named per door."""
    broker = values["broker"]
    if broker != "orm" and not broker.startswith(("redis://", "rediss://")):
        raise ConfigError(names["broker"], f"must be 'orm' or a redis:// URL, got {broker!r}")
    url = values["database_url"]
    if url and not url.startswith(("postgres://", "postgresql://", "sqlite://")):
        raise ConfigError(
            names["database_url"], "must start with postgres://, postgresql:// or sqlite://"
        )
    cron = values["watchdog_cron"]
    if len(cron.split()) != 5:
        raise ConfigError(
            names["watchdog_cron"], f"must be a 5-field cron expression, got {cron!r}"
        )
    if values["checkpoint_key_file"] and values["checkpoint_key"]:
        raise ConfigError(
            "RECEIPT_CHECKPOINT_KEY", "and RECEIPT_CHECKPOINT_KEY_FILE are exclusive: set one"
        )
    return Config(**values)


assert {f.name for f in fields(Config)} == {s.attr for s in _SPECS}, "config table drift"
