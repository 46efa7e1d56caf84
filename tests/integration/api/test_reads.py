"""A-2 to A-4: job detail, keyset list, receipts (verifiable client-side) and time travel."""

from __future__ import annotations

import hashlib
import json

import pytest

from jobs import queue
from jobs.core.state import Fence
from tests.integration.api.conftest import payload, written

pytestmark = pytest.mark.django_db
T0 = 1_800_000_000_000


def enqueue_at(now_ms: int, agent: str = "factory", **options) -> str:
    body = options.pop("payload", None) or payload()
    return queue.enqueue(agent, body, now_ms=now_ms, **options).job.job_id


def test_detail_is_the_a2_job_json(api):
    job_id = api.enqueue()["job"]["id"]
    status, job = api.get(f"/jobs/{job_id}")
    assert status == 200
    for key in (
        "id",
        "agentId",
        "lane",
        "kind",
        "status",
        "attempt",
        "maxAttempts",
        "sessionKey",
        "singletonMode",
        "payload",
        "workerId",
        "leaseUntil",
        "leaseMs",
        "abortRequested",
        "commands",
        "result",
        "lastError",
        "createdAt",
        "updatedAt",
        "stream",
        "receiptCount",
        "head",
        "contractGroup",
        "routedGroup",
    ):
        assert key in job, key
    assert job["id"] == job_id and job["stream"] == f"jobs/{job_id}" and job["receiptCount"] == 1


@pytest.mark.parametrize("job_id", ["missing-1", "bad id", "a" * 200, "x%00y"])
def test_detail_of_a_missing_or_impossible_job_is_404(api, job_id):
    status, out = api.get(f"/jobs/{job_id}")
    assert (status, out["error"]) == (404, "job_not_found")


def test_list_is_newest_first_with_a_keyset_cursor(api):
    ids = [enqueue_at(T0 + i) for i in range(5)]
    status, first = api.get("/jobs", limit=2)
    assert status == 200
    assert [j["id"] for j in first["jobs"]] == [ids[4], ids[3]] and first["nextCursor"]
    _, second = api.get("/jobs", limit=2, cursor=first["nextCursor"])
    assert [j["id"] for j in second["jobs"]] == [ids[2], ids[1]]
    _, third = api.get("/jobs", limit=2, cursor=second["nextCursor"])
    assert [j["id"] for j in third["jobs"]] == [ids[0]] and third["nextCursor"] is None


def test_list_filters(api):
    chat = enqueue_at(T0, lane="chat", session_key="s-a")
    codex = enqueue_at(
        T0 + 1, agent="codex", payload=payload("factory.task.run", objectiveId="o-1")
    )
    control = enqueue_at(
        T0 + 2, agent="factory-control", payload={"kind": "factory.objective.watchdog"}
    )
    queue.cancel(control, reason="test")

    def ids(**params):
        status, out = api.get("/jobs", **params)
        assert status == 200, out
        return [j["id"] for j in out["jobs"]]

    assert ids(lane="chat") == [chat]
    assert ids(agentId="codex") == [codex]
    assert ids(kind="factory.task.run") == [codex]
    assert ids(sessionKey="s-a") == [chat]
    assert ids(objectiveId="o-1") == [codex]
    assert ids(status="canceled") == [control]
    assert ids(status="queued") == [codex, chat]
    assert ids(routedGroup="codex") == [codex]
    assert ids(organizationId="org-1") == [codex, chat]
    assert ids(status="queued", lane="chat") == [chat]


def test_list_limit_takes_1_through_500(api):
    for i in range(3):
        enqueue_at(T0 + i)
    assert len(api.get("/jobs", limit=1)[1]["jobs"]) == 1
    assert len(api.get("/jobs", limit=500)[1]["jobs"]) == 3
    assert len(api.get("/jobs", limit="")[1]["jobs"]) == 3
    assert len(api.get("/jobs")[1]["jobs"]) == 3


# Item 11: one limit rule on every list (before: /jobs clamped, /receipts had a 2^53 bound).
LISTS = [
    ("/jobs", 500),
    ("/jobs/{job}/receipts", 1000),
    ("/factory/api/objectives", 500),
    ("/factory/api/objectives/o-missing/receipts", 1000),
]


@pytest.mark.parametrize(("path", "maximum"), LISTS)
@pytest.mark.parametrize("limit", ["0", "-7", "max+1", "ten", "1.5", str(2**60)])
def test_a_limit_outside_1_through_the_maximum_is_400_naming_the_range(api, path, maximum, limit):
    job_id = api.enqueue()["job"]["id"]
    limit = str(maximum + 1) if limit == "max+1" else limit
    status, out = api.get(path.format(job=job_id), limit=limit)
    assert (status, out["error"]) == (400, "invalid_limit"), out
    assert f"from 1 to {maximum}" in out["detail"]


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/jobs?status=queued&status=failed", "status"),
        ("/jobs?limit=1&limit=2", "limit"),
        ("/jobs?cursor=a&cursor=b", "cursor"),
        ("/jobs/{job}/receipts?after=1&after=2", "after"),
        ("/jobs/{job}/state?at=1&at=2", "at"),
        ("/jobs/{job}/wait?timeoutMs=0&timeoutMs=1", "timeoutMs"),
        ("/factory/api/objectives?limit=1&limit=2", "limit"),
    ],
)
def test_a_repeated_query_parameter_is_400_naming_it(api, path, name):
    """Item 11: not "last one wins"."""
    job_id = api.enqueue()["job"]["id"]
    response = api.client.get(path.format(job=job_id), **api.headers())
    out = response.json()
    assert (response.status_code, out["error"]) == (400, "repeated_parameter"), out
    assert out["detail"].startswith(f"{name} is given more than once")


@pytest.mark.parametrize(
    ("name", "value"),
    [("status", "bogus"), ("lane", "fast"), ("kind", "factory.nope"), ("routedGroup", "gpu")],
)
def test_invalid_filter_lists_the_allowed_values(api, name, value):
    from jobs.api.serializers import JobFilter

    status, out = api.get("/jobs", **{name: value})
    assert (status, out["error"]) == (400, "invalid_filter")
    assert out["detail"] == f"{name}={value!r} is not one of: " + ", ".join(JobFilter.allowed(name))


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"status": "bogus"}, "invalid_filter"),
        ({"lane": "fast"}, "invalid_filter"),
        ({"kind": "factory.nope"}, "invalid_filter"),
        ({"routedGroup": "gpu"}, "invalid_filter"),
        ({"agentId": "x" * 200}, "invalid_filter"),
        ({"sessionKey": "nul\x00"}, "invalid_filter"),
        ({"limit": "ten"}, "invalid_limit"),
        ({"cursor": "not-a-cursor"}, "invalid_cursor"),
        ({"cursor": "OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OmFiYw"}, "invalid_cursor"),  # huge ts
        ({"cursor": "MTphIGI"}, "invalid_cursor"),  # "1:a b" is no job id
    ],
)
def test_bad_list_parameters_are_400(api, params, code):
    status, out = api.get("/jobs", **params)
    assert (status, out["error"]) == (400, code), out
    assert params.get("status", "") in out["detail"]


def _canonical(value) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def test_receipts_page_and_verify_client_side(api):
    job_id = api.enqueue()["job"]["id"]
    for n in range(4):
        api.post(f"/jobs/{job_id}/steer", {"payload": {"n": n}})
    status, out = api.get(f"/jobs/{job_id}/receipts")
    assert status == 200 and out["receiptCount"] == 5 and len(out["receipts"]) == 5
    # S-2, exactly as docs/api.md tells clients to do it
    prev = None
    for receipt in out["receipts"]:
        material = {k: receipt[k] for k in ("id", "ts", "stream", "prev", "body")}
        if "context" in receipt:
            material["context"] = receipt["context"]
        assert receipt["prev"] == prev
        assert hashlib.sha256(_canonical(material)).hexdigest() == receipt["hash"]
        prev = receipt["hash"]
    assert out["head"] == prev
    _, page = api.get(f"/jobs/{job_id}/receipts", after=2, limit=2)
    assert [r["streamSeq"] for r in page["receipts"]] == [3, 4] and page["head"] == prev
    assert [r["body"]["type"] for r in page["receipts"]] == ["queue.command", "queue.command"]


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"after": "x"}, "invalid_after"),
        ({"after": -1}, "invalid_after"),
        ({"limit": "many"}, "invalid_limit"),
        ({"after": 10**30}, "invalid_after"),
    ],
)
def test_bad_receipt_parameters_are_400(api, params, code):
    job_id = api.enqueue()["job"]["id"]
    status, out = api.get(f"/jobs/{job_id}/receipts", **params)
    assert (status, out["error"]) == (400, code)


def test_receipt_limit_takes_1_through_1000(api):
    job_id = api.enqueue()["job"]["id"]
    api.post(f"/jobs/{job_id}/steer", {"payload": {}})
    assert len(api.get(f"/jobs/{job_id}/receipts", limit=1)[1]["receipts"]) == 1
    assert len(api.get(f"/jobs/{job_id}/receipts", limit=1000)[1]["receipts"]) == 2


def test_state_at_folds_the_first_n_receipts(api):
    job_id = api.enqueue()["job"]["id"]
    lease = queue.lease(job_id, worker_id="w1")
    queue.complete(job_id, {"done": True}, fence=Fence("w1", lease.job.attempt))
    status, now = api.get(f"/jobs/{job_id}/state")
    assert status == 200 and now["at"] == 3 and now["receiptCount"] == 3
    assert now["job"]["status"] == "completed" and now["job"]["result"] == {"done": True}
    assert api.get(f"/jobs/{job_id}/state", at=1)[1]["job"]["status"] == "queued"
    assert api.get(f"/jobs/{job_id}/state", at=2)[1]["job"]["status"] == "leased"
    assert api.get(f"/jobs/{job_id}/state", at=0)[1]["job"] is None
    clamped = api.get(f"/jobs/{job_id}/state", at=99)[1]
    assert clamped["at"] == 3 and clamped["job"]["status"] == "completed"
    status, out = api.get(f"/jobs/{job_id}/state", at="x")
    assert (status, out["error"]) == (400, "invalid_at")


@pytest.mark.parametrize("suffix", ["", "/receipts", "/state"])
def test_reads_of_a_missing_job_are_404_and_write_nothing(api, suffix):
    before = written()
    status, out = api.get(f"/jobs/nope{suffix}")
    assert (status, out["error"]) == (404, "job_not_found")
    assert written() == before
