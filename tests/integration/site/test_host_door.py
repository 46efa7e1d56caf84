"""Receipt's apps in a host project (issue 33 item 1): the RECEIPT settings block made
the typed config, Q_CLUSTER derived, the system checks that name what is missing or
unsafe, and Receipt's SQLite set-up on a database configured as `startproject` does.
(The whole path, with a real project and real workers: tests/runtime/test_host_project.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command, get_commands
from django.core.management.base import CommandError
from django.db.utils import ConnectionHandler
from django.test import override_settings

from receipt_site import checks, conf
from receipt_site.config import Config


@pytest.fixture
def host_door(monkeypatch):
    """conf.source is process-wide: each test's configure() leaves it as it was."""
    monkeypatch.setattr(conf, "source", conf.source)


def _host(tmp_path: Path, **values) -> SimpleNamespace:
    # Q_CLUSTER given: django_q is already imported in this process (see the next test)
    return SimpleNamespace(BASE_DIR=tmp_path, Q_CLUSTER={"name": "theirs"}, **values)


def test_the_settings_block_becomes_the_typed_config(tmp_path, host_door):
    host = _host(tmp_path, RECEIPT={"chat_job_concurrency": 8, "data_dir": "var/receipt"})
    conf.configure(host)
    assert isinstance(host.RECEIPT, Config) and host.RECEIPT.chat_job_concurrency == 8
    assert host.RECEIPT.data_dir == str(tmp_path / "var" / "receipt")  # under BASE_DIR
    assert host.RECEIPT.workspace_dir == str(tmp_path / "var" / "receipt-workspaces")
    assert Path(host.RECEIPT.data_dir).is_dir()
    assert host.Q_CLUSTER == {"name": "theirs"}  # the project's own is never replaced
    assert conf.source == "settings" and checks.settings_block() == []


def test_structured_keys_of_the_settings_block_become_typed_values(tmp_path, host_door):
    """schedules (a list of dicts, or the environment's JSON text) are parsed at startup
    (kept as text, every schedules pass and the dashboard's configuration table failed);
    worker_groups is a mapping of group names to their settings."""
    nightly: dict[str, object] = {"name": "nightly", "cron": "0 3 * * *", "payload": {}}
    nightly |= {"timezone": "Europe/Paris", "agentId": "django-task"}
    for schedules in ([nightly], json.dumps([nightly])):
        host = _host(tmp_path, RECEIPT={"schedules": schedules})
        conf.configure(host)
        (schedule,) = host.RECEIPT.schedules
        assert (schedule.name, schedule.timezone) == ("nightly", "Europe/Paris")
        shown = dict(host.RECEIPT.shown())["RECEIPT_SCHEDULES"]
        assert shown == "nightly (cron 0 3 * * * (Europe/Paris))"
    with pytest.raises(ImproperlyConfigured, match=r"RECEIPT\['schedules'\] is not valid JSON"):
        conf.configure(_host(tmp_path, RECEIPT={"schedules": "[{"}))
    host = _host(tmp_path, RECEIPT={"worker_groups": {"emails": {"concurrency": 2}}})
    conf.configure(host)  # the operator guide's mapping (once refused: "must be a string")
    assert [(g.name, g.concurrency) for g in host.RECEIPT.worker_groups] == [("emails", 2)]
    with pytest.raises(ImproperlyConfigured, match=r"RECEIPT\['worker_groups'\] group name"):
        conf.configure(_host(tmp_path, RECEIPT={"worker_groups": {"api": {}}}))


def test_no_settings_block_runs_on_defaults_and_says_so(tmp_path, host_door):
    host = _host(tmp_path)
    conf.configure(host)
    assert host.RECEIPT.job_lease_ms == 300_000 and conf.source == "defaults"
    assert [m.id for m in checks.settings_block()] == ["receipt.W001"]


def test_a_bad_settings_block_stops_startup_naming_the_key(tmp_path, host_door):
    with pytest.raises(ImproperlyConfigured, match=r"RECEIPT\['chat_job_concurrency'\] must be"):
        conf.configure(_host(tmp_path, RECEIPT={"chat_job_concurrency": 0}))
    with pytest.raises(ImproperlyConfigured, match=r"RECEIPT\['workspace_dir'\] must be"):
        conf.configure(_host(tmp_path, RECEIPT={"data_dir": "d", "workspace_dir": "d/w"}))


def test_q_cluster_is_derived_before_django_q_reads_it_or_startup_stops(tmp_path, host_door):
    """django_q reads Q_CLUSTER once, at import; in this process it is imported already,
    as it is in a host project that lists django_q above receipt_site."""
    host = SimpleNamespace(BASE_DIR=tmp_path, RECEIPT={})
    with pytest.raises(ImproperlyConfigured, match="list 'receipt_site' above 'django_q'"):
        conf.configure(host)
    derived = conf.q_cluster(settings.RECEIPT)  # what configure() sets when it may
    assert conf.is_receipt_cluster(derived) and derived == settings.Q_CLUSTER


def test_a_project_without_receipt_site_is_told_to_add_it(monkeypatch):
    """Without receipt_site nothing turns the RECEIPT block into the typed config: the
    jobs app says so when Django creates it, before a `@task` reads the raw dict (which
    failed with "'dict' object has no attribute 'job_lease_ms'")."""
    import jobs
    from jobs.apps import JobsConfig, require_site_app

    said = (
        "'receipt_site' is not in INSTALLED_APPS, so Receipt's settings are never read "
        "(settings.RECEIPT stays as written): add 'receipt_site' to INSTALLED_APPS, above "
        "'django_q' (README, 'Add Receipt to your project')"
    )
    host_apps = ["django.contrib.admin", "django_q", "receipts", "access", "jobs"]
    with pytest.raises(ImproperlyConfigured) as caught:
        require_site_app(host_apps)
    assert str(caught.value) == said
    require_site_app(["receipt_site", *host_apps])
    require_site_app(["receipt_site.apps.ReceiptSiteConfig", *host_apps])
    monkeypatch.setattr(settings, "INSTALLED_APPS", host_apps)
    with pytest.raises(ImproperlyConfigured, match="add 'receipt_site' to INSTALLED_APPS"):
        JobsConfig("jobs", jobs)


def test_the_standalone_sites_config_is_left_as_it_is(host_door):
    site = SimpleNamespace(RECEIPT=settings.RECEIPT, Q_CLUSTER=settings.Q_CLUSTER)
    conf.configure(site)
    assert site.RECEIPT is settings.RECEIPT and conf.source == "environment"


def test_the_standalone_site_passes_every_receipt_check():
    assert checks.url_include() == [] and checks.queue_cluster() == []
    assert checks.settings_block() == [] and checks.sqlite_setup() == []


@override_settings(ROOT_URLCONF="tests.integration.site.urls_without_receipt")
def test_a_missing_url_include_is_named_with_the_line_to_add():
    (error,) = checks.url_include()
    assert error.id == "receipt.E002"
    assert 'include("receipt_site.host_urls")' in error.hint


@override_settings(Q_CLUSTER={"name": "theirs", "orm": "default"})
def test_a_q_cluster_that_is_not_receipts_is_named():
    assert [m.id for m in checks.queue_cluster()] == ["receipt.E004"]


@pytest.mark.parametrize(
    ("options", "problems"),
    [
        ({}, []),  # Receipt sets it up (databases.prepare_sqlite)
        ({"transaction_mode": "IMMEDIATE", "timeout": 20}, []),
        ({"transaction_mode": "DEFERRED"}, ["transaction_mode DEFERRED"]),
        ({"timeout": 1}, ["a busy timeout of 1 s"]),
        ({"init_command": "PRAGMA journal_mode=DELETE"}, ["a journal mode other than WAL"]),
        ({"init_command": "PRAGMA journal_mode = wal"}, []),
    ],
)
def test_sqlite_options_that_undo_receipts_set_up_are_named(options, problems):
    database = {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": options}
    assert checks.sqlite_problems(database) == problems
    assert checks.sqlite_problems({"ENGINE": "django.db.backends.postgresql"}) == []


@pytest.fixture
def unblocked(django_db_blocker):
    """A database of the test's own, outside pytest-django's test database."""
    with django_db_blocker.unblock():
        yield


def _pragmas(tmp_path: Path, **options) -> tuple[str, int, str | None]:
    """(journal mode, busy timeout ms, transaction mode) of a fresh connection to a SQLite
    file configured as `startproject` does, plus `options`."""
    name = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "db.sqlite3")}
    connection = ConnectionHandler({"default": {**name, "OPTIONS": options}})["default"]
    try:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            journal = cursor.fetchone()[0]
            cursor.execute("PRAGMA busy_timeout")
            busy = cursor.fetchone()[0]
        return journal, busy, connection.transaction_mode
    finally:
        connection.close()


def test_a_host_sqlite_database_gets_receipts_connection_set_up(tmp_path, unblocked):
    assert _pragmas(tmp_path) == ("wal", 20_000, "IMMEDIATE")


def test_what_the_options_say_explicitly_is_left_alone(tmp_path, unblocked):
    journal, busy, mode = _pragmas(
        tmp_path,
        transaction_mode="EXCLUSIVE",
        timeout=7,
        init_command="PRAGMA journal_mode=TRUNCATE",
    )
    assert (journal, busy, mode) == ("truncate", 7_000, "EXCLUSIVE")


@pytest.mark.parametrize("argv", [[], ["--run-once"]])
def test_qcluster_is_refused_with_the_commands_that_run_receipts_clusters(argv):
    """django-q2's qcluster would start a cluster under the site's name, which takes none of
    Receipt's deliveries: the command a django-q2 user reaches for says what to run instead
    (receipt_site comes above django_q, so its command is the one found)."""
    assert get_commands()["qcluster"] == "receipt_site"
    with pytest.raises(CommandError, match=r"runworker --role driver.*runstack --no-api"):
        call_command("qcluster", *argv)
