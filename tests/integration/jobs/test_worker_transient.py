"""A handler's transient database errors are the platform's, not the job's (D-5): the
handler runs again within the same attempt, so no attempt is spent on them; any other
exception is the handler's failure."""

from __future__ import annotations

from typing import cast

import pytest
from django.db import OperationalError

from jobs import handlers
from jobs.runtime import worker
from jobs.runtime.context import HandlerContext, JobResult

pytestmark = pytest.mark.django_db


class _Ctx:
    def __init__(self) -> None:
        import threading

        self.aborted = threading.Event()


def _ctx() -> HandlerContext:
    """A stand-in with only what `_call_handler` reads."""
    return cast(HandlerContext, _Ctx())


class _Job:
    job_id = "j-transient"
    agent_id = "test-transient"


def test_transient_database_errors_rerun_the_handler_in_the_same_attempt(monkeypatch):
    calls = []

    def flaky(job, ctx):
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("connection failed: FATAL:  sorry, too many clients already")
        return JobResult.success("done")

    monkeypatch.setitem(handlers._HANDLERS, "test-transient", flaky)
    monkeypatch.setattr(worker.time, "sleep", lambda s: None)
    result, error = worker._call_handler(_Job(), _ctx())
    assert error is None and result.result == "done" and len(calls) == 3


def test_a_handler_bug_is_its_own_failure_at_once(monkeypatch):
    calls = []

    def broken(job, ctx):
        calls.append(1)
        raise KeyError("missing")

    monkeypatch.setitem(handlers._HANDLERS, "test-transient", broken)
    result, error = worker._call_handler(_Job(), _ctx())
    assert isinstance(error, KeyError) and result is None and len(calls) == 1


def test_transient_errors_that_persist_fail_the_attempt(monkeypatch):
    def down(job, ctx):
        raise OperationalError("connection failed: Connection refused")

    monkeypatch.setitem(handlers._HANDLERS, "test-transient", down)
    monkeypatch.setattr(worker.time, "sleep", lambda s: None)
    result, error = worker._call_handler(_Job(), _ctx())
    assert isinstance(error, OperationalError) and result is None
