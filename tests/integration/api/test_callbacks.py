"""D-8 over HTTP: a job's callbacks and their delivery, read with the job's own rules
(jobs:read, the caller's organization)."""

from __future__ import annotations

import dataclasses

import pytest
from django.conf import settings

from jobs import queue
from jobs.runtime import callbacks
from tests.integration.api.conftest import payload

pytestmark = pytest.mark.django_db
T = 1_800_000_000_000
URL = "http://127.0.0.1:9/hooks/secret-path?token=s3cr3t"  # port 9: nothing answers


@pytest.fixture
def hooked(monkeypatch):
    monkeypatch.setattr(
        settings,
        "RECEIPT",
        dataclasses.replace(settings.RECEIPT, resonate_callback_url=None, event_callback_url=URL),
    )


def canceled(job_id: str, org: str = "org-1") -> str:
    queue.enqueue("factory", payload(org=org), job_id=job_id, now_ms=T)
    queue.command(job_id, "abort", reason="stop", now_ms=T + 5)
    return job_id


def test_the_owner_reads_each_callback_with_its_body_and_its_last_try(hooked, api_for):
    """D-8, A-2: GET /jobs/<id>/callbacks lists the records newest first; the URL shows
    only its origin."""
    job_id = canceled("api-cb-1")
    callbacks.deliver_due(now_ms=T + 10)  # refused: a failed try, retried in 1 s
    status, out = api_for("one", org="org-1").get(f"/jobs/{job_id}/callbacks")
    assert status == 200
    [record] = out["callbacks"]
    assert out["jobId"] == job_id
    assert record["body"] == {
        "event": "canceled",
        "jobId": job_id,
        "stream": f"jobs/{job_id}",
        "status": "canceled",
        "attempt": 0,
        "agentId": "factory",
        "kind": "factory.run",
        "at": T + 5,
    }
    assert {
        k: record[k]
        for k in (
            "event",
            "state",
            "attempts",
            "lastStatus",
            "createdAt",
            "nextAt",
            "giveUpAt",
            "finishedAt",
        )
    } == {
        "event": "canceled",
        "state": "pending",
        "attempts": 1,
        "lastStatus": None,
        "createdAt": T + 5,
        "nextAt": T + 1010,
        "giveUpAt": T + 5 + 3_600_000,
        "finishedAt": None,
    }
    assert record["lastError"] and record["url"] == "http://127.0.0.1:9/••••"
    assert "s3cr3t" not in str(out)


def test_another_organizations_callbacks_are_404(hooked, api_for):
    """D-8, Q-2: the same organization rule as reading the job."""
    job_id = canceled("api-cb-2", org="org-2")
    status, out = api_for("one", org="org-1").get(f"/jobs/{job_id}/callbacks")
    assert (status, out["error"]) == (404, "job_not_found")
    assert api_for("two", org="org-2").get(f"/jobs/{job_id}/callbacks")[0] == 200


def test_callbacks_need_the_read_scope(hooked, api_for, anonymous):
    job_id = canceled("api-cb-3")
    assert api_for("w", scopes=["jobs:write"]).get(f"/jobs/{job_id}/callbacks")[0] == 403
    assert anonymous.get(f"/jobs/{job_id}/callbacks")[0] == 401


def test_a_job_without_callbacks_has_an_empty_list(api):
    queue.enqueue("factory", payload(), job_id="api-cb-none", now_ms=T)
    assert api.get("/jobs/api-cb-none/callbacks") == (
        200,
        {"jobId": "api-cb-none", "callbacks": []},
    )
    assert api.get("/jobs/no-such-job/callbacks")[0] == 404


def test_the_schema_describes_the_callbacks_endpoint(api):
    schema = api.client.get("/api/schema/", {"format": "json"}, **api.headers()).json()
    operation = schema["paths"]["/jobs/{job_id}/callbacks"]["get"]
    assert operation["operationId"] == "list_job_callbacks"
    assert "200" in operation["responses"] and "404" in operation["responses"]
