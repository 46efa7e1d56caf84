"""A promise the runtime names by id is found through its key, whatever the planner
believes about the table (D-1, D-5, T-3). The claim and the settlements are prepared
statements: PostgreSQL plans them once for any id (a generic plan) from the statistics it
has at the time, and a table that looked empty when it did (new install, TRUNCATE, a burst
before autovacuum) once made that plan read every pending promise through the deliverable
or state index and filter for the id, on every claim and settlement of a backlog."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db import connection

from jobs import promise_sql as sql
from jobs.runtime import driver

pytestmark = [pytest.mark.django_db, pytest.mark.postgres_only]

STATEMENTS: dict[str, tuple[str, list[Any]]] = {
    "claim": (sql.CLAIM["postgresql"], ["worker-1", "job-1:attempt:1"]),
    "settle": (
        sql.SETTLE["postgresql"],
        ["resolved", 1, '{"status": "ok"}', None, "job-1:attempt:1"],
    ),
    "settle_many": (
        sql.SETTLE_MANY_PG,
        ["resolved", 1, '{"job-1": {"status": "dispatched"}}', ["job-1", "job-2"]],
    ),
    "drive_queued": (driver.DRIVE_QUEUED[True], [["job-1"], 60_000, 1, 1, 1, 1, 60_000, 1, "q"]),
}


def _generic_plan(sql: str, params: list[Any]) -> dict[str, Any]:
    counter = iter(range(1, len(params) + 1))
    numbered = re.sub(r"%s", lambda _: f"${next(counter)}", sql)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE probe AS {numbered}")
        try:
            marks = ", ".join(["%s"] * len(params))
            cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE probe({marks})", params)
            (document,) = cursor.fetchone()
        finally:
            cursor.execute("DEALLOCATE probe")
    plan = json.loads(document) if isinstance(document, str) else document
    return plan[0]["Plan"]


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_a_promise_named_by_id_is_found_by_its_key(name: str) -> None:
    # Many pending, deliverable promises; the table never analyzed (a fresh test database).
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_delivery_promise (id, function, job_id, attempt, target_group, "
            "dispatch_key, state, timeout_at, created_at, available_at) "
            "SELECT 'job-' || i || ':attempt:1', 'execute', 'job-' || i, 1, 'chat', "
            "'job-' || i, 'pending', 10000000000000, 1, 1 FROM generate_series(1, 5000) AS i"
        )
    sql, params = STATEMENTS[name]
    nodes = _nodes(_generic_plan(sql, params))
    used = {n.get("Index Name") for n in nodes} - {None}
    assert used & {"promise_deliverable", "promise_state_timeout"} == set(), nodes
    keyed = [n for n in nodes if "(id)::text" in (n.get("Index Cond") or "")]
    assert keyed, nodes


def test_the_drivers_statement_reads_each_job_by_its_key_however_many_are_queued() -> None:
    """A backlog of queued jobs in a table never analyzed: the driver's one statement
    still looks each of its jobs up by id, never walking the queued jobs for them."""
    from jobs import queue
    from tests.integration.jobs.helpers import payload

    queue.enqueue_many(
        [queue.build_request("test-plans", payload("factory.run", i=i)) for i in range(300)]
    )
    sql, params = STATEMENTS["drive_queued"]
    nodes = _nodes(_generic_plan(sql, params))
    reads_of_jobs = [n for n in nodes if n.get("Relation Name") == "jobs_job"]
    assert reads_of_jobs, nodes
    for node in reads_of_jobs:
        assert node.get("Index Name") == "jobs_job_pkey", node
        assert "(id)::text" in (node.get("Index Cond") or ""), node
