"""A deployment's own queues (issue 33 item 5): worker groups declared in the
configuration, reached by a kind's contract or an enqueue's `queue`, refused at enqueue
when undeclared (nothing written), and routed by the driver to the group's cluster."""

from __future__ import annotations

import dataclasses

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from jobs import queue
from jobs.core import contracts
from jobs.models import DeliveryPromise, Job
from jobs.routing_checks import kinds_on_declared_groups
from jobs.runtime import driver
from jobs.runtime.dispatch import start_driver
from receipts import store
from tests.integration.api.conftest import written

pytestmark = pytest.mark.django_db
EMAILS = {"emails": {"concurrency": 3, "lease_ms": 60_000, "execution_timeout_ms": 20_000}}


@pytest.fixture
def emails(settings):
    """Group `emails` declared; kind acme.mail registered to it, acme.ping to chat."""
    settings.RECEIPT = dataclasses.replace(settings.RECEIPT, worker_groups=EMAILS)
    contracts.register_kind("acme.mail", worker_group="emails", auth_context_required=False)
    contracts.register_kind("acme.ping", auth_context_required=False)
    yield
    contracts.unregister_kind("acme.mail")
    contracts.unregister_kind("acme.ping")


def enqueued_body(job_id: str) -> dict:
    return store.read(f"jobs/{job_id}")[0].body


def test_a_kind_registered_to_a_declared_group_runs_there_with_its_lease(api, emails):
    job = api.enqueue("mailer", {"payload": {"kind": "acme.mail"}})["job"]
    assert (job["routedGroup"], job["contractGroup"], job["queue"]) == ("emails", "emails", None)
    assert job["leaseMs"] == 60_000
    assert Job.objects.get(pk=job["id"]).worker_group == "emails"
    assert "queue" not in enqueued_body(job["id"])  # the default route is not recorded


def test_queue_moves_a_plain_kind_and_is_recorded_in_its_receipt(api, emails):
    job = api.enqueue("mailer", {"payload": {"kind": "acme.ping"}, "queue": "emails"})["job"]
    assert (job["routedGroup"], job["contractGroup"], job["queue"]) == ("emails", "chat", "emails")
    assert job["groupMismatch"] is True and job["leaseMs"] == 60_000
    assert enqueued_body(job["id"])["queue"] == "emails"
    assert queue.get(job["id"]).queue == "emails"
    status, page = api.get("/jobs", routedGroup="emails")
    assert status == 200 and [j["id"] for j in page["jobs"]] == [job["id"]]


def test_a_queue_that_is_the_default_route_is_not_recorded(api, emails):
    flat = api.enqueue("mailer", {"kind": "acme.mail", "queue": "emails"})["job"]
    assert flat["routedGroup"] == "emails" and flat["queue"] is None
    assert "queue" not in enqueued_body(flat["id"]) and "queue" not in flat["payload"]
    built_in = api.enqueue("mailer", {"payload": {"kind": "acme.ping"}, "queue": "chat"})["job"]
    assert built_in["routedGroup"] == "chat" and "queue" not in enqueued_body(built_in["id"])


@pytest.mark.parametrize("asked", ["reports", "driver", 7, ""])
def test_an_undeclared_queue_is_refused_naming_the_groups_and_nothing_is_written(
    api, emails, asked
):
    before = written()
    status, error = api.post(
        "/agents/mailer/jobs", {"payload": {"kind": "acme.ping"}, "queue": asked}
    )
    assert status == 400 and error["error"] == "unknown_queue"
    assert f"queue {asked!r} is not a worker group" in error["detail"]
    assert "chat, control, codex, emails" in error["detail"]
    assert written() == before


def test_a_kind_on_a_group_not_declared_is_refused_and_named_by_the_system_check(api, emails):
    contracts.register_kind("acme.bulk", worker_group="bulk", auth_context_required=False)
    try:
        before = written()
        status, error = api.post("/agents/mailer/jobs", {"payload": {"kind": "acme.bulk"}})
        assert status == 400 and error["error"] == "unknown_queue"
        assert "'acme.bulk' is registered to worker group 'bulk'" in error["detail"]
        assert (
            "declare it in RECEIPT['worker_groups'] (or the RECEIPT_WORKER_GROUPS"
            in (error["detail"])
        )
        assert written() == before
        found = kinds_on_declared_groups()
        assert [(e.id, "'acme.bulk'" in e.msg) for e in found] == [("jobs.E001", True)]
        assert found[0].hint == (
            "declare it in RECEIPT['worker_groups'] (or the RECEIPT_WORKER_GROUPS environment "
            "variable), or register the kind to one of these groups"
        )
        with pytest.raises(SystemCheckError, match=r"acme\.bulk"):
            call_command("check")
    finally:
        contracts.unregister_kind("acme.bulk")
    assert kinds_on_declared_groups() == []


def test_factorys_own_work_keeps_its_group(api, emails):
    before = written()
    status, error = api.post(
        "/agents/factory/jobs",
        {"payload": {"kind": "factory.run", "authContext": {"userId": "u", "organizationId": "o"}}}
        | {"queue": "emails"},
    )
    assert status == 400 and error["error"] == "queue_not_allowed"
    assert written() == before
    same = api.enqueue("factory", queue="chat")["job"]  # its own group: nothing to move
    assert same["routedGroup"] == "chat" and same["queue"] is None


def test_batch_items_choose_their_queue_and_an_undeclared_one_is_refused_alone(api, emails):
    status, out = api.post(
        "/agents/mailer/jobs/batch",
        {
            "jobs": [
                {"payload": {"kind": "acme.ping"}, "queue": "emails"},
                {"payload": {"kind": "acme.ping"}, "queue": "nowhere"},
                {"kind": "acme.ping"},
            ]
        },
    )
    assert status == 202 and (out["enqueued"], out["refused"]) == (2, 1)
    refused = out["results"][1]
    assert refused["error"] == "unknown_queue" and "'nowhere'" in refused["detail"]
    first, third = out["results"][0]["jobId"], out["results"][2]["jobId"]
    assert Job.objects.get(pk=first).worker_group == "emails"
    assert Job.objects.get(pk=third).worker_group == "chat"


def test_the_driver_sends_the_attempt_to_the_chosen_groups_cluster(emails):
    by_kind = queue.enqueue("mailer", {"kind": "acme.mail"}).job
    by_queue = queue.enqueue("mailer", {"kind": "acme.ping"}, queue="emails").job
    for job in (by_kind, by_queue):
        start_driver(job)
        assert driver.drive(job.job_id)["status"] == "dispatched"
        execute = DeliveryPromise.objects.get(job_id=job.job_id, function="execute")
        assert execute.target_group == "emails"


def test_queue_is_an_option_of_enqueue_many_requests(emails):
    request = queue.build_request("mailer", {"kind": "acme.ping"}, queue="emails")
    assert request.queue == "emails"
    [result] = queue.enqueue_many([request])
    assert result.job.queue == "emails"


# ---- every declared group is seen: metrics, dashboard, health, diagnosis, admin ---------------


def test_a_declared_group_appears_in_metrics_dashboard_and_health(api, emails, admin_client):
    from jobs import dashboard
    from jobs.runtime import processes
    from receipts.clock import now_ms

    job = api.enqueue("mailer", {"payload": {"kind": "acme.mail"}})["job"]
    processes.register(role="worker-emails", group="emails", concurrency=3, now_ms=now_ms())

    status, text = api.get("/metrics")
    assert status == 200
    text = text.decode()
    assert 'receipt_jobs_active{status="queued",lane="collect",group="emails"} 1' in text
    assert 'receipt_worker_group_slots{group="emails"} 3' in text
    assert 'receipt_worker_group_slots{group="chat"} 0' in text

    snapshot = dashboard.snapshot()
    [capacity] = [row for row in snapshot["capacity"] if row["group"] == "emails"]
    assert (capacity["slots"], capacity["queued"], capacity["processes"]) == (3, 1, 1)
    groups = snapshot["workerGroups"]
    assert [row["group"] for row in groups["groups"]] == ["chat", "control", "codex", "emails"]
    assert groups["groups"][-1] | {"builtIn": None} == {
        "group": "emails",
        "builtIn": None,
        "concurrency": 3,
        "leaseMs": 60_000,
        "executionTimeoutMs": 20_000,
        "connectionsPerRunworker": 6,
    }
    # driver 1 + 3, chat 4 + 3, control 1 + 3, codex 1 + 3, emails 3 + 3
    assert groups["connectionsOneRunworkerPerRole"] == 4 + 7 + 4 + 4 + 6
    page = admin_client.get("/admin/jobs/job/dashboard/").content.decode()
    assert "Worker groups: settings and connections" in page and "emails" in page

    health = api.client.get("/healthz").json()
    assert {"group": "emails", "liveProcesses": 1} in health["workerGroups"]
    assert {"group": "chat", "liveProcesses": 0} in health["workerGroups"]

    listed = admin_client.get("/admin/jobs/job/", {"group": "emails"}).content.decode()
    assert job["id"] in listed and "?group=emails" in listed


def test_diagnosis_names_a_group_without_a_live_worker_and_one_no_longer_declared(
    api, emails, settings
):
    job = api.enqueue("mailer", {"payload": {"kind": "acme.ping"}, "queue": "emails"})["job"]
    status, body = api.get(f"/jobs/{job['id']}/diagnosis")
    assert status == 200
    blockers = {b["code"]: b["detail"] for b in body["blockers"]}
    assert "no live runworker process serves group 'emails'" in blockers["no_live_process"]
    assert "runworker --role emails" in blockers["no_live_process"]
    assert "undeclared_group" not in blockers
    settings.RECEIPT = dataclasses.replace(settings.RECEIPT, worker_groups={})
    status, body = api.get(f"/jobs/{job['id']}/diagnosis")
    assert status == 200
    blockers = {b["code"]: b["detail"] for b in body["blockers"]}
    assert "worker group 'emails', which this deployment no longer" in blockers["undeclared_group"]
    assert (
        "declare it again in RECEIPT['worker_groups'] (or the RECEIPT_WORKER_GROUPS"
        in (blockers["undeclared_group"])
    )


def test_the_cli_enqueues_on_a_queue_and_refuses_an_undeclared_one(emails):
    import json
    from io import StringIO

    from django.core.management.base import CommandError

    out = StringIO()
    call_command(
        "jobs",
        "enqueue",
        "mailer",
        '{"kind": "acme.ping"}',
        "--queue",
        "emails",
        "--json",
        stdout=out,
    )
    assert json.loads(out.getvalue())["job"]["routedGroup"] == "emails"
    with pytest.raises(CommandError, match="unknown_queue"):
        call_command("jobs", "enqueue", "mailer", '{"kind": "acme.ping"}', "--queue", "nope")
