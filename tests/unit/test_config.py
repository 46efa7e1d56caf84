"""SPEC 13: configuration is typed; a bad value stops startup naming the variable."""

import pytest

from receipt_site.config import ConfigError, load, redact_url
from receipt_site.databases import database_from_url


def test_defaults_match_the_spec_table():
    config = load({})
    assert config.job_lease_ms == 300_000
    assert config.codex_job_lease_ms == 900_000
    assert config.factory_control_job_lease_ms == 900_000
    assert (
        config.chat_job_concurrency,
        config.orchestration_job_concurrency,
        config.codex_job_concurrency,
    ) == (4, 1, 1)
    assert config.active_stale_ms == 600_000
    assert (
        config.queued_redrive_interval_ms,
        config.queued_redrive_min_age_ms,
        config.queued_redrive_cooldown_ms,
        config.queued_redrive_startup_delay_ms,
    ) == (15_000, 30_000, 15_000, 5_000)
    assert config.watchdog_enabled is True and config.watchdog_cron == "* * * * *"
    assert config.watchdog_scan_limit == 200 and config.repo_slot_concurrency == 20
    assert config.broker == "orm" and config.data_dir == "./.receipt"
    assert config.max_payload_bytes == 1_048_576


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"JOB_LEASE_MS": "abc"}, "JOB_LEASE_MS must be an integer, got 'abc'"),
        ({"JOB_LEASE_MS": "10"}, "JOB_LEASE_MS must be >= 1000, got 10"),
        ({"CHAT_JOB_CONCURRENCY": "0"}, "CHAT_JOB_CONCURRENCY must be >= 1"),
        (
            {"RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_ENABLED": "maybe"},
            "RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_ENABLED must be one of",
        ),
        ({"RECEIPT_BROKER": "amqp://x"}, "RECEIPT_BROKER must be 'orm' or a redis:// URL"),
        ({"DATABASE_URL": "mysql://x"}, "DATABASE_URL must start with"),
        ({"RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_CRON": "* *"}, "5-field cron"),
    ],
)
def test_invalid_values_name_the_variable(env, fragment):
    with pytest.raises(ConfigError) as caught:
        load(env)
    assert fragment in str(caught.value)


def test_secrets_are_masked_when_shown():
    config = load(
        {
            "SECRET_KEY": "s3cret",
            "RECEIPT_CALLBACK_TOKEN": "tok",
            "DATABASE_URL": "postgres://u:pw@db:5432/receipt",
        }
    )
    shown = dict(config.shown())
    assert shown["SECRET_KEY"] == "•••• (set)" and shown["RECEIPT_CALLBACK_TOKEN"] == "•••• (set)"
    assert shown["DATABASE_URL"] == "postgres://u:***@db:5432/receipt"
    assert "pw" not in repr(shown) and "s3cret" not in repr(shown)


def test_redact_url_keeps_urls_without_password():
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_database_url_parsing(tmp_path):
    pg = database_from_url("postgres://me:p%40ss@h:5433/db?sslmode=require", data_dir=tmp_path)
    assert (pg["ENGINE"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"], pg["NAME"]) == (
        "django.db.backends.postgresql",
        "me",
        "p@ss",
        "h",
        "5433",
        "db",
    )
    assert pg["OPTIONS"] == {"sslmode": "require", "prepare_threshold": 100}
    pooled = database_from_url("postgres://h/db?prepare=off", data_dir=tmp_path)
    assert pooled["OPTIONS"]["prepare_threshold"] is None  # behind a transaction pooler
    lite = database_from_url(None, data_dir=tmp_path)
    assert lite["NAME"] == str(tmp_path / "receipt.sqlite3")
    assert lite["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in lite["OPTIONS"]["init_command"]
    absolute = database_from_url("sqlite:////var/tmp/x.db", data_dir=tmp_path)
    assert absolute["NAME"] == "/var/tmp/x.db"


def test_callback_urls_show_only_their_origin():
    shown = dict(
        load({"RECEIPT_EVENT_CALLBACK_URL": "https://hooks.example:8443/x?token=s3"}).shown()
    )
    assert shown["RECEIPT_EVENT_CALLBACK_URL"] == "https://hooks.example:8443/…"


def test_asgi_processes_use_a_connection_pool_on_postgres(tmp_path):
    pooled = database_from_url("postgres://u@h/db", data_dir=tmp_path, pool=True)
    assert pooled["OPTIONS"]["pool"]["max_size"] >= 1 and pooled["CONN_MAX_AGE"] == 0
    assert "pool" not in database_from_url("postgres://u@h/db", data_dir=tmp_path)["OPTIONS"]


def test_the_checkpoint_key_is_one_setting_or_the_other_and_shown_masked():
    """Issue 36 item 2: the signing key comes from a file or a setting, never both."""
    config = load({})
    assert (config.log_enabled, config.log_interval_ms, config.checkpoint_interval_ms) == (
        True,
        5_000,
        60_000,
    )
    assert config.checkpoint_key_file is None and config.checkpoint_key is None
    with pytest.raises(ConfigError, match="RECEIPT_CHECKPOINT_KEY"):
        load({"RECEIPT_CHECKPOINT_KEY_FILE": "/k.pem", "RECEIPT_CHECKPOINT_KEY": "pem"})
    shown = dict(load({"RECEIPT_CHECKPOINT_KEY": "-----BEGIN PRIVATE KEY-----"}).shown())
    assert shown["RECEIPT_CHECKPOINT_KEY"] == "•••• (set)"
    with pytest.raises(ConfigError, match="RECEIPT_CHECKPOINT_INTERVAL_MS"):
        load({"RECEIPT_CHECKPOINT_INTERVAL_MS": "10"})
