"""P-4: `manage.py jobs ...` goes through the queue service; --json is parseable."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from receipts import store
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db


def jobs(*args):
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_enqueue_show_steer_abort_round_trip_with_json():
    made = json.loads(jobs("enqueue", "factory", json.dumps(payload()), "--job-id", "cli-1",
                           "--json", "--by", "alice"))
    assert made["created"] and made["job"]["id"] == "cli-1"
    assert made["job"]["contractGroup"] == "chat" and made["job"]["routedGroup"] == "chat"
    steered = json.loads(jobs("steer", "cli-1", '{"go": 1}', "--json", "--by", "alice"))
    assert steered["command"]["command"] == "steer" and steered["command"]["by"] == "alice"
    aborted = json.loads(jobs("abort", "cli-1", "--reason", "done", "--json", "--by", "bob"))
    assert aborted["canceled"] and aborted["job"]["status"] == "canceled"
    shown = json.loads(jobs("show", "cli-1", "--json"))
    assert [r["body"]["type"] for r in shown["receipts"]] == [
        "job.enqueued", "queue.command", "job.canceled"]
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
