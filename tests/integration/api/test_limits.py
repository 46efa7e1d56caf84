"""GET /limits (issue 34 item 4): every declared limit with its use; a credential bound to
an organization sees the totals but not the busiest keys, which are other customers'."""

from __future__ import annotations

import pytest

from jobs import limits, queue
from jobs.core.limits import Limit
from tests.integration.api.conftest import payload

pytestmark = pytest.mark.django_db


@pytest.fixture
def declared():
    cap = limits.register_limit(
        Limit(name="per-customer", kinds=("factory.run",), concurrency=2, key="customer")
    )
    rate = limits.register_limit(Limit(name="provider", queues=("chat",), rate=60, per_ms=60_000))
    yield cap, rate
    limits.forget("per-customer")
    limits.forget("provider")


def _running_under(key: str) -> None:
    job = queue.enqueue("factory", payload("factory.run", customer="acme")).job
    start, _ = queue.start_attempt(job.job_id, worker_id="chat:h:1", attempt=1, gate=lambda j: key)
    assert start is queue.Start.LEASED


def test_limits_are_listed_with_their_use(api, declared):
    _running_under("per-customer:acme")
    status, body = api.get("/limits")
    assert status == 200, body
    by_name = {limit["name"]: limit for limit in body["limits"]}
    cap = by_name["per-customer"]
    assert (cap["kinds"], cap["queues"], cap["covers"]) == (
        ["factory.run"],
        [],
        "kind factory.run",
    )
    assert cap["concurrency"] == {
        "of": 2,
        "key": "customer",
        "busiest": [{"key": "acme", "running": 1, "full": False}],
        "held": 0,
    }
    assert "rate" not in cap
    assert by_name["provider"]["rate"] == {"text": "60/m", "used": 0, "of": 60, "held": 0}


def test_an_organization_credential_sees_totals_not_keys(api_for, anonymous, declared):
    _running_under("per-customer:acme")
    assert anonymous.get("/limits")[0] == 401
    status, body = api_for("tenant", org="org-1", scopes=["jobs:read"]).get("/limits")
    assert status == 200
    [cap] = [limit for limit in body["limits"] if limit["name"] == "per-customer"]
    assert cap["concurrency"]["busiest"] == []
