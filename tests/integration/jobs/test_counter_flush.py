"""X-2: process counters reach `jobs_counter` in one upsert statement per flush: a new
series is inserted, a known one updated in place, and nothing else of the table moves."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Counter
from jobs.runtime import counters

pytestmark = pytest.mark.django_db


def rows() -> dict[tuple[str, str], float]:
    mine = Counter.objects.filter(process_id=counters.process_id(), name__startswith="t_flush")
    return {(c.name, c.labels): c.value for c in mine}


def test_a_flush_upserts_every_changed_series_in_one_statement():
    Counter.objects.create(name="t_flush_other", labels="", process_id="elsewhere:1", value=7)
    counters.incr("t_flush_a", 2, kind="x")
    counters.incr("t_flush_b")
    counters.flush(force=True)
    assert rows() == {("t_flush_a", 'kind="x"'): 2.0, ("t_flush_b", ""): 1.0}
    counters.incr("t_flush_a", 3, kind="x")
    counters.incr("t_flush_c", 5)
    with CaptureQueriesContext(connection) as queries:
        assert counters.flush(force=True) == 2
    assert len([q for q in queries.captured_queries if "jobs_counter" in q["sql"]]) == 1
    assert rows() == {
        ("t_flush_a", 'kind="x"'): 5.0,
        ("t_flush_b", ""): 1.0,
        ("t_flush_c", ""): 5.0,
    }
    assert Counter.objects.get(process_id="elsewhere:1").value == 7
