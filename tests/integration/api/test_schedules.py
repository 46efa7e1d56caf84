"""Issue 34 item 1: GET /schedules lists the schedules with their next run, last run and
last outcome, by name in keyset pages, with the token auth of every endpoint; an
organization-bound token sees its organization's schedules only."""

from __future__ import annotations

import pytest

from jobs import schedules
from jobs.core.schedules import Schedule, tick_job_id
from tests.integration.api.conftest import payload

pytestmark = pytest.mark.django_db

T0 = 1_900_000_020_000  # a whole minute


def declare() -> None:
    items = [
        Schedule("a-nightly", "factory", payload(), cron="0 3 * * *", timezone="Europe/Paris"),
        Schedule("b-pulse", "factory", payload(), cron="* * * * *"),
        Schedule("c-other", "factory", payload(org="org-2"), every_s=30, missed="skip"),
    ]
    assert schedules.sync([(s, "settings") for s in items], now_ms=T0 - 30_000).errors == []


def test_the_list_shows_each_schedule_with_its_runs_and_outcome(api):
    declare()
    schedules.fire_due(now_ms=T0)
    status, body = api.get("/schedules")
    assert status == 200 and body["nextCursor"] is None
    listed = {s["name"]: s for s in body["schedules"]}
    assert list(listed) == ["a-nightly", "b-pulse", "c-other"]
    pulse = listed["b-pulse"]
    assert pulse["trigger"] == "cron * * * * * (UTC)" and pulse["status"] == "active"
    assert pulse["lastJobId"] == tick_job_id("b-pulse", T0) and pulse["lastOutcome"] == "queued"
    assert pulse["nextRunAt"] == T0 + 60_000 and pulse["stream"] == "schedules/b-pulse"
    assert listed["a-nightly"]["trigger"] == "cron 0 3 * * * (Europe/Paris)"
    assert listed["a-nightly"]["lastRunAt"] is None and listed["c-other"]["missed"] == "skip"


def test_pages_by_name_with_a_cursor(api):
    declare()
    status, first = api.get("/schedules", limit=2)
    assert status == 200 and [s["name"] for s in first["schedules"]] == ["a-nightly", "b-pulse"]
    status, rest = api.get("/schedules", limit=2, cursor=first["nextCursor"])
    assert [s["name"] for s in rest["schedules"]] == ["c-other"] and rest["nextCursor"] is None


def test_an_organization_bound_token_sees_its_own_schedules(api_for):
    declare()
    status, body = api_for("tenant", org="org-2").get("/schedules")
    assert status == 200 and [s["name"] for s in body["schedules"]] == ["c-other"]


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"limit": "0"}, "invalid_limit"),
        ({"cursor": "Not A Name"}, "invalid_cursor"),
        ({"colour": "red"}, "unknown_parameter"),
    ],
)
def test_bad_parameters_are_a_400_naming_them(api, params, code):
    status, body = api.get("/schedules", **params)
    assert status == 400 and body["error"] == code


def test_the_list_needs_a_token_with_the_read_scope(anonymous, api_for):
    assert anonymous.get("/schedules")[0] == 401
    assert api_for("writer", scopes=["jobs:write"]).get("/schedules")[0] == 403
