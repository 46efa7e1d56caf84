"""SPEC 13: configuration is typed; a bad value stops startup naming the variable."""

from typing import Any, cast

import pytest

from receipt_site.config import ConfigError, from_settings, load, redact_url
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
        # issue 34 item 1: schedules in settings are checked down to each cron value
        ({"RECEIPT_SCHEDULES": "[{"}, "RECEIPT_SCHEDULES is not valid JSON"),
        ({"RECEIPT_SCHEDULES": '{"name": "a"}'}, "RECEIPT_SCHEDULES must be a JSON array"),
        (
            {
                "RECEIPT_SCHEDULES": '[{"name": "a", "agentId": "x", "payload": {}, "cron": "61 * * * *"}]'
            },
            "RECEIPT_SCHEDULES schedule 'a': cron '61 * * * *' is not a valid cron expression",
        ),
        (
            {
                "RECEIPT_SCHEDULES": '[{"name": "a", "agentId": "x", "payload": {}, "every": 5, "timezone": "Nowhere"}]'
            },
            "RECEIPT_SCHEDULES schedule 'a': timezone 'Nowhere' is not a known IANA timezone",
        ),
    ],
)
def test_invalid_values_name_the_variable(env, fragment):
    with pytest.raises(ConfigError) as caught:
        load(env)
    assert fragment in str(caught.value)


def test_schedules_in_settings_are_typed_and_shown_by_name():
    """Issue 34 item 1."""
    assert load({}).schedules == ()
    config = load(
        {
            "RECEIPT_SCHEDULES": '[{"name": "nightly", "agentId": "my-agent", "payload": '
            '{"kind": "acme.report"}, "cron": "0 3 * * *", "timezone": "Europe/Paris", '
            '"maxAttempts": 3}, {"name": "pulse", "agentId": "my-agent", "payload": {}, '
            '"every": 30, "missed": "skip"}]'
        }
    )
    nightly, pulse = config.schedules
    assert (nightly.cron, nightly.timezone, nightly.options) == (
        "0 3 * * *",
        "Europe/Paris",
        {"max_attempts": 3},
    )
    assert (pulse.every_s, pulse.missed) == (30, "skip")
    shown = dict(config.shown())["RECEIPT_SCHEDULES"]
    assert shown == "nightly (cron 0 3 * * * (Europe/Paris)), pulse (every 30 s)"


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


# ---- a deployment's own worker groups (issue 33 item 5) ----------------------------------


def test_worker_groups_are_declared_by_the_environment():
    from jobs.core.groups import GroupSettings

    assert load({}).worker_groups == ()
    assert load({"RECEIPT_WORKER_GROUPS": "emails:4,reports"}).worker_groups == (
        GroupSettings(name="emails", concurrency=4),
        GroupSettings(name="reports"),
    )
    config = load({"RECEIPT_WORKER_GROUPS": '{"emails": {"lease_ms": 60000}}'})
    assert config.worker_groups == (GroupSettings(name="emails", lease_ms=60_000),)
    assert dict(config.shown())["RECEIPT_WORKER_GROUPS"] == "emails(lease_ms=60000)"
    assert dict(load({}).shown())["RECEIPT_WORKER_GROUPS"] == "—"


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("chat:8", "RECEIPT_WORKER_GROUPS group name 'chat' is built in"),
        ("emails:x", "RECEIPT_WORKER_GROUPS group 'emails': concurrency must be an integer"),
        ('{"emails": [1]}', "RECEIPT_WORKER_GROUPS group 'emails': settings must be an object"),
    ],
)
def test_a_bad_worker_group_declaration_names_the_variable(raw, fragment):
    with pytest.raises(ConfigError) as caught:
        load({"RECEIPT_WORKER_GROUPS": raw})
    assert fragment in str(caught.value) and caught.value.name == "RECEIPT_WORKER_GROUPS"


def test_worker_groups_from_a_settings_mapping_are_checked_like_the_environments():
    """A settings block passes `worker_groups` as a mapping; it becomes declared groups."""
    import dataclasses

    from jobs.core.groups import GroupSettings

    declared: Any = {"emails": {"concurrency": 2, "execution_timeout_ms": 9_000}}
    config = dataclasses.replace(load({}), worker_groups=declared)
    assert config.worker_groups == (
        GroupSettings(name="emails", concurrency=2, execution_timeout_ms=9_000),
    )
    with pytest.raises(ConfigError, match="worker_groups group name 'driver' is reserved"):
        dataclasses.replace(load({}), worker_groups=cast(Any, {"driver": {}}))
    with pytest.raises(ConfigError, match="worker_groups must map group names"):
        dataclasses.replace(load({}), worker_groups=cast(Any, 42))


# ---- the settings block of a host project (issue 33 item 1) ---------------------------------


def test_a_settings_block_reads_typed_values_and_defaults_the_rest():
    config = from_settings(
        {
            "chat_job_concurrency": 8,
            "watchdog_enabled": False,
            "broker": "redis://127.0.0.1:6379/5",
            "handler_modules": ["shop.tasks", " billing.tasks "],
            "command_sandbox": "HOST",
            "factory_planner": None,
        }
    )
    assert config.chat_job_concurrency == 8 and config.watchdog_enabled is False
    assert config.broker == "redis://127.0.0.1:6379/5"
    assert config.handler_modules == ("shop.tasks", "billing.tasks")
    assert config.command_sandbox == "host" and config.factory_planner is None
    defaults = load({})
    assert config.job_lease_ms == defaults.job_lease_ms == 300_000
    assert from_settings({}) == defaults  # one table of defaults for both doors


@pytest.mark.parametrize(
    ("block", "said"),
    [
        ({"job_lease_ms": "4000"}, "RECEIPT['job_lease_ms'] must be an integer, got '4000'"),
        ({"job_lease_ms": True}, "RECEIPT['job_lease_ms'] must be an integer"),
        ({"job_lease_ms": 10}, "RECEIPT['job_lease_ms'] must be >= 1000, got 10"),
        ({"chat_job_concurrency": 0}, "RECEIPT['chat_job_concurrency'] must be >= 1"),
        ({"watchdog_enabled": "yes"}, "RECEIPT['watchdog_enabled'] must be True or False"),
        ({"handler_modules": "shop.tasks"}, "RECEIPT['handler_modules'] must be a list"),
        ({"command_sandbox": "docker"}, "RECEIPT['command_sandbox'] must be one of bwrap, host"),
        ({"broker": "amqp://x"}, "RECEIPT['broker'] must be 'orm' or a redis:// URL"),
        ({"watchdog_cron": "* *"}, "RECEIPT['watchdog_cron'] must be a 5-field cron"),
        ({"job_lease": 4000}, "is not a Receipt setting; did you mean 'job_lease_ms'?"),
        ({"JOB_LEASE_MS": 4000}, "RECEIPT['JOB_LEASE_MS'] is not a Receipt setting; did"),
        ({"RECEIPT_BROKER": "orm"}, "did you mean 'broker'?"),
        ({"secret_key": "x"}, "RECEIPT['secret_key'] is the project's own setting: set SECRET_KEY"),
        ({"database_url": "x"}, "is the project's own setting: set DATABASES"),
    ],
)
def test_a_bad_settings_block_names_the_key(block, said):
    with pytest.raises(ConfigError) as caught:
        from_settings(block)
    assert said in str(caught.value)


NIGHTLY = {
    "name": "nightly",
    "cron": "0 3 * * *",
    "timezone": "Europe/Paris",
    "agentId": "django-task",
    "payload": {"kind": "acme.report"},
}


def test_a_settings_block_takes_schedules_as_dicts_schedules_or_the_environments_json():
    """A list of dicts and/or Schedules, or RECEIPT_SCHEDULES's JSON text: each is parsed
    into the same schedules (a string was once kept as it was, and nothing could use it)."""
    import json

    from jobs.core.schedules import Schedule

    pulse = Schedule(name="pulse", agent_id="django-task", payload={}, every_s=30)
    from_dicts = from_settings({"schedules": [NIGHTLY, pulse.to_wire()]}).schedules
    assert [s.name for s in from_dicts] == ["nightly", "pulse"]
    assert from_dicts[0].timezone == "Europe/Paris" and from_dicts[1] == pulse
    assert from_settings({"schedules": [NIGHTLY, pulse]}).schedules == from_dicts
    from_text = from_settings({"schedules": json.dumps([NIGHTLY, pulse.to_wire()])})
    assert from_text.schedules == from_dicts
    assert (
        from_text.schedules
        == load({"RECEIPT_SCHEDULES": json.dumps([NIGHTLY, pulse.to_wire()])}).schedules
    )
    shown = dict(from_text.shown())["RECEIPT_SCHEDULES"]
    assert shown == "nightly (cron 0 3 * * * (Europe/Paris)), pulse (every 30 s)"
    assert from_settings({"schedules": []}).schedules == ()
    assert from_settings({"schedules": ""}).schedules == ()


@pytest.mark.parametrize(
    ("schedules", "said"),
    [
        (
            NIGHTLY,
            "RECEIPT['schedules'] must be a list of schedules (or their JSON text), got dict",
        ),
        (42, "RECEIPT['schedules'] must be a list of schedules (or their JSON text), got int"),
        ("[{", "RECEIPT['schedules'] is not valid JSON"),
        ('{"name": "a"}', "RECEIPT['schedules'] must be a JSON array of schedules, got dict"),
        (["nightly"], "RECEIPT['schedules'] schedule 0 must be an object, got str"),
        ([{**NIGHTLY, "cron": "61 * * * *"}], "RECEIPT['schedules'] schedule 'nightly': cron "),
        ([{**NIGHTLY, "agent": "x"}], "RECEIPT['schedules'] schedule 'nightly': unknown field"),
        ([NIGHTLY, NIGHTLY], "RECEIPT['schedules'] schedule 'nightly' is declared twice"),
    ],
)
def test_bad_schedules_in_a_settings_block_name_the_key_and_the_problem(schedules, said):
    with pytest.raises(ConfigError) as caught:
        from_settings({"schedules": schedules})
    assert said in str(caught.value) and caught.value.name == "RECEIPT['schedules']"


def test_a_settings_block_takes_worker_groups_as_a_mapping_or_the_environments_text():
    """The mapping the operator guide documents, or RECEIPT_WORKER_GROUPS's text in either
    of its forms (a mapping was once refused: "must be a string")."""
    from jobs.core.groups import GroupSettings

    emails = GroupSettings(name="emails", concurrency=2)
    declared = from_settings({"worker_groups": {"emails": {"concurrency": 2}, "reports": {}}})
    assert declared.worker_groups == (emails, GroupSettings(name="reports"))
    for same in (
        {"emails": 2, "reports": None},
        "emails:2,reports",
        '{"emails": {"concurrency": 2}, "reports": {}}',
        [emails, GroupSettings(name="reports")],
    ):
        assert from_settings({"worker_groups": same}).worker_groups == declared.worker_groups
    assert from_settings({"worker_groups": {}}).worker_groups == ()
    assert from_settings({"worker_groups": None}).worker_groups == ()
    shown = dict(declared.shown())["RECEIPT_WORKER_GROUPS"]
    assert shown == "emails(concurrency=2), reports"


@pytest.mark.parametrize(
    ("groups", "said"),
    [
        ({"driver": {}}, "RECEIPT['worker_groups'] group name 'driver' is reserved"),
        ({"chat": 8}, "RECEIPT['worker_groups'] group name 'chat' is built in"),
        (
            {"emails": {"concurrency": 0}},
            "RECEIPT['worker_groups'] group 'emails': concurrency must be an integer from 1",
        ),
        ({"emails": {"lease": 1}}, "RECEIPT['worker_groups'] group 'emails': unknown setting"),
        ("emails:x", "RECEIPT['worker_groups'] group 'emails': concurrency must be an integer"),
        (
            ["emails"],
            "RECEIPT['worker_groups'] must map group names to their settings, as in "
            "{'emails': {'concurrency': 4}} (or be the text of RECEIPT_WORKER_GROUPS), "
            "got ['emails']",
        ),
    ],
)
def test_bad_worker_groups_in_a_settings_block_name_the_key_and_the_problem(groups, said):
    with pytest.raises(ConfigError) as caught:
        from_settings({"worker_groups": groups})
    assert said in str(caught.value) and caught.value.name == "RECEIPT['worker_groups']"


def test_a_settings_block_takes_limits_as_dicts_limits_or_the_environments_json():
    """limits, the third structured key, read the same three ways."""
    import json

    from jobs.core.limits import from_wire

    llm = {"name": "llm", "queues": ["llm"], "rate": "60/m"}
    declared = from_settings({"limits": [llm]}).limits
    assert [limit.name for limit in declared] == ["llm"]
    assert from_settings({"limits": [from_wire(llm)]}).limits == declared
    assert from_settings({"limits": json.dumps([llm])}).limits == declared
    with pytest.raises(ConfigError, match=r"RECEIPT\['limits'\] must be a list of limits"):
        from_settings({"limits": llm})


def test_a_settings_block_must_be_a_dict():
    with pytest.raises(ConfigError, match="RECEIPT must be a dict, got list"):
        from_settings([("job_lease_ms", 4000)])  # type: ignore[arg-type]


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
