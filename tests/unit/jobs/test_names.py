"""The names of promises and clusters: the Python function and the SQL expression
rendered beside it give the same name for every case."""

from __future__ import annotations

import sqlite3

import pytest

from jobs.core import names


@pytest.mark.parametrize(
    ("job_id", "attempt", "driver_id", "expected"),
    [
        ("job-1", 1, "job-1", "job-1:attempt:1"),
        ("job-1", 3, "job-1", "job-1:attempt:3"),
        ("job-1", 2, "job-1:redrive:1:5", "job-1:attempt:2:dispatch:job-1:redrive:1:5"),
        ("job-1", 1, "job-1:recovery:4", "job-1:attempt:1:dispatch:job-1:recovery:4"),
    ],
)
def test_an_execute_promise_is_named_alike_in_python_and_sql(
    job_id: str, attempt: int, driver_id: str, expected: str
) -> None:
    assert names.execute_promise_id(job_id, attempt, driver_id) == expected
    sql = names.execute_promise_id_sql("?1", "?2", "?3")
    (rendered,) = (
        sqlite3.connect(":memory:")
        .execute(f"SELECT {sql}", [job_id, attempt, driver_id])
        .fetchone()
    )
    assert rendered == expected


@pytest.mark.parametrize("group", ["chat", "control", "codex"])
def test_a_worker_cluster_is_named_alike_in_python_and_sql(group: str) -> None:
    cluster = names.worker_cluster(group)
    (rendered,) = (
        sqlite3.connect(":memory:")
        .execute(f"SELECT {names.worker_cluster_sql('?1')}", [group])
        .fetchone()
    )
    assert rendered == cluster == f"worker-{group}"
    assert names.group_of_cluster(cluster) == group


@pytest.mark.parametrize("cluster", ["driver", "api", ""])
def test_a_cluster_that_is_not_a_worker_cluster_has_no_group(cluster: str) -> None:
    assert names.group_of_cluster(cluster) is None


@pytest.mark.parametrize(
    ("job_id", "generation", "expected"),
    [("job-1", 1, "job-1:recovery:1"), ("job-1", 32, "job-1:recovery:32")],
)
def test_a_delivery_generation_names_its_driver_promise(
    job_id: str, generation: int, expected: str
) -> None:
    assert names.recovery_generation_id(job_id, generation) == expected
