"""Query parameters and path ids are checked alike on every list and every id (issue 31).

`/factory/api/objectives?cursor=zzz` once answered page 1 and ignored filters it does not
know, where `/jobs` refuses a bad cursor; and an over-long id or filter value came back
whole in the error.
"""

from __future__ import annotations

import pytest

from tests.integration.api.conftest import written

pytestmark = pytest.mark.django_db

LONG = "a" * 5000


def assert_refused(out: tuple[int, dict], status: int, code: str) -> str:
    got, body = out
    assert (got, body["error"]) == (status, code), body
    return body["detail"]


@pytest.mark.parametrize(
    "query", ["cursor=zzz", "status=bogus", "page=2", "stauts=failed", "limit=5&offset=10"]
)
def test_the_objectives_list_refuses_a_parameter_it_does_not_read(api, query):
    detail = assert_refused(api.get(f"/factory/api/objectives?{query}"), 400, "unknown_parameter")
    assert "limit" in detail  # names what it does take


def test_a_typo_in_a_jobs_filter_is_refused_not_ignored(api):
    api.enqueue()
    detail = assert_refused(api.get("/jobs?stauts=failed"), 400, "unknown_parameter")
    assert "stauts" in detail and "status" in detail


@pytest.mark.parametrize(
    "path",
    [
        "/jobs/j-1?verbose=1",
        "/jobs/j-1/receipts?from=3",
        "/jobs/j-1/state?when=3",
        "/kinds?all=1",
        "/factory/api/objectives/o-1?full=1",
        "/factory/api/objectives/o-1/receipts?after=3",
    ],
)
def test_every_read_refuses_an_unknown_parameter(api, path):
    assert_refused(api.get(path), 400, "unknown_parameter")


def test_an_unknown_parameter_on_a_write_writes_nothing(api):
    before = written()
    status, out = api.post("/agents/factory/jobs?dryRun=1", {"payload": {"kind": "factory.run"}})
    assert (status, out["error"]) == (400, "unknown_parameter")
    assert written() == before


def test_the_parameters_an_endpoint_reads_still_work(api):
    api.enqueue()
    status, out = api.get("/jobs?status=queued&limit=1")
    assert status == 200 and len(out["jobs"]) == 1
    assert api.get(f"/jobs?cursor={out['nextCursor'] or ''}")[0] == 200
    assert api.get("/jobs?cursor=zzz")[1]["error"] == "invalid_cursor"
    assert api.get("/factory/api/objectives?limit=5")[0] == 200


@pytest.mark.parametrize("suffix", ["", "/receipts", "/state", "/diagnosis", "/callbacks"])
def test_an_over_long_job_id_is_not_found_and_not_echoed_whole(api, suffix):
    detail = assert_refused(api.get(f"/jobs/{LONG}{suffix}"), 404, "job_not_found")
    assert len(detail) < 120 and "5000 characters" in detail


def test_an_over_long_job_id_in_a_command_is_not_echoed_whole(api):
    out = api.post(f"/jobs/{LONG}/abort", {})
    assert len(assert_refused(out, 404, "job_not_found")) < 120


@pytest.mark.parametrize("name", ["agentId", "sessionKey", "objectiveId", "organizationId"])
def test_an_over_long_filter_value_is_refused_without_its_whole_text(api, name):
    detail = assert_refused(api.get(f"/jobs?{name}={LONG}"), 400, "invalid_filter")
    assert len(detail) < 200 and name in detail


def test_an_over_long_objective_id_is_not_echoed_whole(api):
    detail = assert_refused(api.get(f"/factory/api/objectives/{LONG}"), 404, "objective_not_found")
    assert len(detail) < 120
