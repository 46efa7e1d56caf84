"""P-4: `manage.py jobs ...` goes through the queue service; --json is parseable."""

import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from receipts import store
from receipts.clock import now_ms as wall_clock_ms
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db


def jobs(*args):
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_enqueue_show_steer_abort_round_trip_with_json():
    made = json.loads(
        jobs(
            "enqueue",
            "factory",
            json.dumps(payload()),
            "--job-id",
            "cli-1",
            "--json",
            "--by",
            "alice",
        )
    )
    assert made["created"] and made["job"]["id"] == "cli-1"
    assert made["job"]["contractGroup"] == "chat" and made["job"]["routedGroup"] == "chat"
    steered = json.loads(jobs("steer", "cli-1", '{"go": 1}', "--json", "--by", "alice"))
    assert steered["command"]["command"] == "steer" and steered["command"]["by"] == "alice"
    aborted = json.loads(jobs("abort", "cli-1", "--reason", "done", "--json", "--by", "bob"))
    assert aborted["canceled"] and aborted["job"]["status"] == "canceled"
    shown = json.loads(jobs("show", "cli-1", "--json"))
    assert [r["body"]["type"] for r in shown["receipts"]] == [
        "job.enqueued",
        "queue.command",
        "job.canceled",
    ]
    assert shown["verify"]["ok"]
    assert store.read("jobs/cli-1")[-1].body["by"] == "bob"


def test_list_pages_newest_first_with_a_cursor():
    for i in range(3):
        jobs("enqueue", "factory", json.dumps(payload()), "--job-id", f"l-{i}")
    first = json.loads(jobs("list", "--limit", "2", "--json"))
    rest = json.loads(jobs("list", "--limit", "2", "--cursor", first["nextCursor"], "--json"))
    ids = [j["id"] for j in first["jobs"] + rest["jobs"]]
    assert sorted(ids) == ["l-0", "l-1", "l-2"] and len(set(ids)) == 3
    assert rest["nextCursor"] is None


def test_errors_are_command_errors_with_codes():
    with pytest.raises(CommandError, match="unknown_kind"):
        jobs("enqueue", "factory", '{"kind": "nope"}')
    with pytest.raises(CommandError, match="job_not_found"):
        jobs("show", "missing")
    with pytest.raises(CommandError, match="not valid JSON"):
        jobs("enqueue", "factory", "{oops")


def test_redrive_starts_a_fresh_delivery_of_a_queued_job_only():
    from jobs.models import DeliveryPromise

    jobs("enqueue", "factory", json.dumps(payload()), "--job-id", "rd-1")
    out = json.loads(jobs("redrive", "rd-1", "--json"))
    assert out["ok"] and out["promiseId"].startswith("rd-1:redrive:manual:")
    assert DeliveryPromise.objects.filter(pk=out["promiseId"], state="pending").exists()
    jobs("abort", "rd-1")
    with pytest.raises(CommandError, match="only a queued job can be redriven"):
        jobs("redrive", "rd-1")


@pytest.mark.parametrize(
    ("flag", "value", "allowed"),
    [
        ("--status", "bogus", "queued, leased, running, completed, failed, canceled"),
        ("--lane", "fast", "collect"),
        ("--routed-group", "gpu", "codex"),
        ("--kind", "factory.nope", "factory.run"),
    ],
)
def test_list_refuses_a_value_outside_a_closed_set_and_names_the_valid_ones(flag, value, allowed):
    """Item 10: the CLI validates with the API's JobFilter (empty output and exit 0 before)."""
    with pytest.raises(CommandError, match="invalid_filter") as caught:
        jobs("list", flag, value)
    assert f"{flag}={value!r}" in str(caught.value) and allowed in str(caught.value)


def test_list_accepts_the_deployments_own_kinds():
    from jobs.core import contracts

    contracts.register_kind("acme.report", worker_group="codex")
    try:
        with pytest.raises(CommandError, match=r"acme\.report"):
            jobs("list", "--kind", "acme.nope")
        assert json.loads(jobs("list", "--kind", "acme.report", "--json"))["jobs"] == []
    finally:
        contracts.unregister_kind("acme.report")


@pytest.mark.parametrize("limit", ["0", "-3", "501", "ten"])
def test_list_limit_follows_the_api_rule(limit):
    with pytest.raises(CommandError, match="invalid_limit: limit must be an integer from 1 to 500"):
        jobs("list", "--limit", limit)


def test_simulate_migrates_an_empty_data_directory_first(tmp_path):
    """Item 10: a fresh data directory used to end in a 57-line `no such table` traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    env["RECEIPT_DATA_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "manage.py", "simulate", "--seed", "1", "--steps", "5"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "migrating it first" in done.stderr and "Traceback" not in done.stderr
    assert "simulate seed=1 steps=5 jobs=6: ok" in done.stdout


def test_simulate_names_the_recipe_on_a_partly_migrated_database(monkeypatch):
    from django.db.migrations.executor import MigrationExecutor

    monkeypatch.setattr(
        MigrationExecutor, "migration_plan", lambda self, targets: [("a migration", False)]
    )
    with pytest.raises(
        CommandError,
        match=r"1 unapplied migration\(s\); run `python manage.py "
        r"migrate`",
    ):
        call_command("simulate", "--seed", "1", "--steps", "1", stdout=StringIO())


def test_enqueue_takes_a_run_at_a_delay_and_a_priority():
    """Issue 33 items 3 and 4: the CLI is an enqueue path too, refusing as the API does."""
    due = (wall_clock_ms() // 1000 + 86_400) * 1000
    text = datetime.fromtimestamp(due / 1000, UTC).isoformat()
    at = json.loads(jobs("enqueue", "factory", json.dumps(payload()), "--run-at", text, "--json"))
    assert (at["job"]["runAt"], at["job"]["priority"]) == (due, 0)
    epoch = json.loads(
        jobs("enqueue", "factory", json.dumps(payload()), "--run-at", str(due), "--json")
    )
    assert epoch["job"]["runAt"] == due
    before = wall_clock_ms()
    later = json.loads(
        jobs(
            "enqueue",
            "factory",
            json.dumps(payload()),
            "--delay",
            "30",
            "--priority",
            "-5",
            "--json",
        )
    )
    assert later["job"]["runAt"] >= before + 30_000 and later["job"]["priority"] == -5
    with pytest.raises(CommandError, match="invalid_priority"):
        jobs("enqueue", "factory", json.dumps(payload()), "--priority", "101")
    with pytest.raises(CommandError, match="invalid_run_at"):
        jobs("enqueue", "factory", json.dumps(payload()), "--run-at", "tomorrow")


def test_list_names_a_task_job_by_its_task():
    from tests.integration.tasks import defs

    job_id = defs.add.enqueue(1, 2).id
    jobs("enqueue", "factory", json.dumps(payload()), "--job-id", "not-a-task")
    lines = {line.split()[0]: line for line in jobs("list").splitlines()}
    assert lines[job_id].split()[3] == "tests.integration.tasks.defs.add"
    assert lines["not-a-task"].split()[3] == "factory.run"
