"""A limit over a Django task (issue 34 item 4): the task is covered by its path and a
cap's key is its argument by name, passed by keyword or by position."""

from __future__ import annotations

import pytest

from jobs import limits, queue
from jobs.core.limits import Limit
from tests.integration.tasks import defs

pytestmark = pytest.mark.django_db


@pytest.fixture
def per_a():
    limit = limits.register_limit(
        Limit(name="per-a", kinds=("tests.integration.tasks.defs.add",), concurrency=1, key="a")
    )
    yield limit
    limits.forget(limit.name)


def _governing(result):
    job = queue.get(result.id)
    assert job is not None
    return limits.governing(job)


def test_a_task_argument_keys_its_cap_by_keyword_or_position(per_a):
    by_position, by_keyword = defs.add.enqueue(7, 1), defs.add.enqueue(b=2, a=7)
    assert _governing(by_position).cap_key == _governing(by_keyword).cap_key == "per-a:7"
    assert _governing(by_position).cap is per_a
    assert _governing(defs.add.enqueue(8, 1)).cap_key == "per-a:8"
    assert not _governing(defs.urgent_add.enqueue(7, 1))  # another task's path


def test_a_call_without_the_argument_shares_the_limit_s_own_slots(per_a):
    limits.forget(per_a.name)
    loose = limits.register_limit(
        Limit(name="per-a", kinds=("tests.integration.tasks.defs.echo",), concurrency=1, key="a")
    )
    assert _governing(defs.echo.enqueue(1, 2)).cap_key == "per-a"  # *args: no name a
    assert _governing(defs.echo.enqueue(a="x")).cap_key == "per-a:x"
    assert loose.name == "per-a"
