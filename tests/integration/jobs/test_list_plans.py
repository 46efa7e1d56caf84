"""Filtered lists and capped counts of jobs stop at their end, whatever the planner knows
(T-5, A-3, U-1; jobs.index_walks).

A backlog enqueued in a burst on a table never analyzed once made `?agentId=factory&
kind=factory.run` a BitmapAnd of both indexes and a sort of every match (105 ms at 100k
queued, 14.5x its figure at 1k), `?status=queued` a bitmap of the whole status, and the
capped count of queued jobs a bitmap of all of them. The plans here are of such a table
(the test database is never analyzed), on PostgreSQL; the results on both backends.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count, QuerySet
from django.test.utils import CaptureQueriesContext

from jobs import counts, index_walks, queue, selectors
from jobs.models import Job
from tests.integration.admin.conftest import CHANGELIST
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db
NOW = 1_900_000_000_000
API_VALUES = {
    "status": "queued",
    "agentId": "factory",
    "kind": "factory.run",
    "lane": "chat",
    "routedGroup": "chat",
    "organizationId": "org-1",
    "sessionKey": "chat:7",
    "objectiveId": "obj-7",
}
LEAD_INDEX = {
    "objective_id": "job_objective_newest",
    "status": "job_status_newest",
    "organization_id": "job_org_newest",
    "agent_id": "job_agent_newest",
    "kind": "job_kind_newest",
    "session_key": "job_session_status",
    None: "job_newest",
}


def backlog(n: int = 3000) -> None:
    """`n` queued rows straight into the read model (the plans need rows, not folds)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_job (id, agent_id, lane, kind, status, session_key, "
            "organization_id, objective_id, worker_group, attempt, created_at, updated_at, "
            "state) SELECT 'j-' || i, CASE WHEN i %% 3 = 0 THEN 'codex' ELSE 'factory' END, "
            "CASE WHEN i %% 2 = 0 THEN 'chat' ELSE 'collect' END, "
            "CASE WHEN i %% 5 = 0 THEN 'factory.dispatch' ELSE 'factory.run' END, "
            "CASE WHEN i %% 7 = 0 THEN 'failed' ELSE 'queued' END, 'chat:' || (i %% 400), "
            "'org-' || (i %% 4), CASE WHEN i %% 10 = 0 THEN 'obj-' || (i %% 300) END, "
            "CASE WHEN i %% 3 = 0 THEN 'codex' ELSE 'chat' END, 0, %s + i, %s + i, '{}' "
            "FROM generate_series(1, %s) AS i",
            [NOW, NOW, n],
        )


def plan_of(rows: QuerySet[Any]) -> list[dict[str, Any]]:
    sql, params = rows.query.sql_with_params()
    with index_walks.walking(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        (document,) = cursor.fetchone()
    plan = json.loads(document) if isinstance(document, str) else document
    return nodes(plan[0]["Plan"])


def nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in nodes(child))]


def page_rows(filters: dict[str, str]) -> QuerySet[Any]:
    narrowed = selectors.conditions(filters)
    assert narrowed is not None
    return index_walks.narrowed(Job.objects.all(), narrowed).values_list("state")[:51]


FILTER_SETS = [{key: value} for key, value in API_VALUES.items()] + [
    {a: API_VALUES[a], b: API_VALUES[b]} for a, b in itertools.combinations(API_VALUES, 2)
]


@pytest.mark.postgres_only
@pytest.mark.parametrize("filters", FILTER_SETS, ids=lambda f: "&".join(f))
def test_a_page_walks_one_index_in_order_never_a_bitmap(filters: dict[str, str]) -> None:
    backlog()
    narrowed = selectors.conditions(filters)
    assert narrowed is not None
    lead = index_walks.lead_of(narrowed)
    found = plan_of(page_rows(filters))
    kinds = [n["Node Type"] for n in found]
    assert not any(kind.startswith("Bitmap") for kind in kinds), kinds
    scans = [n for n in found if n["Node Type"] in ("Index Scan", "Index Only Scan")]
    assert [n["Index Name"] for n in scans] == [LEAD_INDEX[lead]], kinds
    if lead == index_walks.GATHERED:  # a session's few jobs, sorted
        assert "Sort" in kinds
    else:  # in the index's order: the LIMIT stops the walk
        assert "Sort" not in kinds and "Seq Scan" not in kinds, kinds


@pytest.mark.postgres_only
def test_a_capped_count_of_a_status_walks_its_index() -> None:
    backlog()
    with CaptureQueriesContext(connection) as queries:
        counts.by_status(["queued", "failed"], cap=100)
    (read,) = [q["sql"] for q in queries.captured_queries if "jobs_job" in q["sql"]]
    with index_walks.walking(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + read)
        (document,) = cursor.fetchone()
    plan = json.loads(document) if isinstance(document, str) else document
    kinds = [n["Node Type"] for n in nodes(plan[0]["Plan"])]
    assert not any(kind.startswith("Bitmap") for kind in kinds), kinds


@pytest.mark.postgres_only
def test_the_settled_window_is_a_range_of_each_status() -> None:
    """The dashboard's last hour of settlements: each status's range of job_status_updated
    from `since`, never the whole index tested for `updated_at` (which `status IN (every
    settled status)`, the index's own condition, made it: 67 ms at 1M for 712 rows)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_job (id, agent_id, lane, kind, status, worker_group, attempt, "
            "created_at, updated_at, state) SELECT 'j-' || i, 'factory', 'chat', 'factory.run', "
            "(ARRAY['completed', 'failed', 'canceled'])[1 + i %% 3], 'chat', 1, %s + i, %s + i, "
            "'{}' FROM generate_series(1, 3000) AS i",
            [NOW, NOW],
        )
    counted = []
    for settled in selectors.settled_since(NOW + 2990):
        rows = settled.values("status").annotate(n=Count("id"))
        sql, params = rows.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            (document,) = cursor.fetchone()
        plan = json.loads(document) if isinstance(document, str) else document
        (scan,) = [n for n in nodes(plan[0]["Plan"]) if "Index Cond" in n]
        assert scan["Index Name"] == "job_status_updated", scan
        assert "status" in scan["Index Cond"] and "updated_at" in scan["Index Cond"], scan
        counted += [n for _, n in rows.values_list("status", "n")]
    assert sorted(counted) == [3, 4, 4]  # i = 2990..3000


@pytest.mark.postgres_only
def test_walking_puts_back_the_settings_inside_a_transaction() -> None:
    show = "SELECT " + ", ".join(f"current_setting('{n}')" for n in index_walks.WALK)
    with connection.cursor() as cursor:  # the test runs inside a transaction
        cursor.execute(show)
        before = cursor.fetchone()
        assert before[:3] == ("on", "on", "on")
        with index_walks.walking():
            cursor.execute(show)
            assert cursor.fetchone() == ("off", "off", "off", "0")
        cursor.execute(show)
        assert cursor.fetchone() == before


@pytest.mark.postgres_only
@pytest.mark.parametrize(
    "query",
    ["status=queued&agent=factory", "kind=factory.run&group=chat", "lane=chat&org=org-1"],
)
def test_the_changelist_page_and_count_walk_one_index(admin_client, query: str) -> None:
    backlog()
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(f"{CHANGELIST}?{query}")
    assert response.status_code == 200
    reads = [
        q["sql"]
        for q in queries.captured_queries
        if 'FROM "jobs_job"' in q["sql"] and "ORDER" in q["sql"]
    ]
    assert len(reads) == 2, reads  # the capped count and the page, both in the walk's order
    for read in reads:
        with index_walks.walking(), connection.cursor() as cursor:
            cursor.execute("EXPLAIN (FORMAT JSON) " + read)
            (document,) = cursor.fetchone()
        plan = json.loads(document) if isinstance(document, str) else document
        kinds = [n["Node Type"] for n in nodes(plan[0]["Plan"])]
        assert not any(k.startswith("Bitmap") for k in kinds) and "Sort" not in kinds, kinds


# ---- what the shaped lists return (both backends) -----------------------------------------


def test_a_filtered_changelist_counts_up_to_its_cap(admin_client, monkeypatch) -> None:
    from jobs.admin import changelist

    monkeypatch.setattr(changelist.JobPaginator, "filtered_cap", 2)
    for i in range(3):
        enqueue("factory", "factory.run", at=NOW + i, lane="chat")
    enqueue("codex", "factory.run", at=NOW + 9, lane="chat")
    response = admin_client.get(f"{CHANGELIST}?agent=factory&lane=chat")
    cl = response.context["cl"]
    assert cl.paginator.count_label == "more than 2"
    assert '<span id="rcpt-result-count">more than 2</span> results' in response.content.decode()
    assert len(cl.result_list) == 3
    response = admin_client.get(f"{CHANGELIST}?agent=codex&lane=chat")
    assert response.context["cl"].paginator.count_label == "1"


def test_a_column_search_narrows_like_a_filter(admin_client) -> None:
    mine = enqueue("factory", "factory.run", at=NOW, lane="chat")
    enqueue("factory", "factory.run", at=NOW + 1, lane="collect")
    enqueue("codex", "factory.run", at=NOW + 2, lane="chat")
    response = admin_client.get(f"{CHANGELIST}?lane=chat&q=agent:factory")
    assert [job.id for job in response.context["cl"].result_list] == [mine]
    response = admin_client.get(f"{CHANGELIST}?agent=codex&q=agent:factory")
    assert list(response.context["cl"].result_list) == []  # two agents at once: none
    response = admin_client.get(f"{CHANGELIST}?lane=chat&q={mine}")  # an id: not walked
    assert [job.id for job in response.context["cl"].result_list] == [mine]


def enqueue(agent: str, kind: str, *, at: int, lane: str = "collect", org: str = "org-1") -> str:
    body = dict(payload(kind), authContext={"userId": "u-1", "organizationId": org})
    return queue.enqueue(agent, body, lane=lane, now_ms=at).job.job_id


def test_pairs_of_filters_page_through_exactly_their_jobs() -> None:
    made = [
        (enqueue(agent, kind, at=NOW + i, lane=lane), agent, kind, lane)
        for i, (agent, kind, lane) in enumerate(
            list(
                itertools.product(
                    ("factory", "codex"), ("factory.run", "factory.dispatch"), ("chat", "collect")
                )
            )
            * 2
        )
    ]
    for filters, keep in (
        (
            {"agentId": "factory", "kind": "factory.run"},
            lambda a, k, ln: a == "factory" and k == "factory.run",
        ),
        (
            {"kind": "factory.dispatch", "lane": "chat"},
            lambda a, k, ln: k == "factory.dispatch" and ln == "chat",
        ),
        ({"status": "queued", "lane": "collect"}, lambda a, k, ln: ln == "collect"),
        ({"lane": "chat"}, lambda a, k, ln: ln == "chat"),
    ):
        expected = [job_id for job_id, a, k, ln in reversed(made) if keep(a, k, ln)]
        seen, cursor = [], None
        while True:
            page = selectors.page(filters, limit=3, cursor=cursor)
            seen += [job.job_id for job in page.jobs]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == expected, filters


def test_an_org_bound_caller_filtering_another_organization_sees_nothing() -> None:
    enqueue("factory", "factory.run", at=NOW, org="org-1")
    enqueue("factory", "factory.run", at=NOW + 1, org="org-2")
    assert selectors.page({"organizationId": "org-2"}, organization_id="org-1").jobs == []
    (mine,) = selectors.page({}, organization_id="org-1").jobs
    assert mine.organization_id == "org-1"
