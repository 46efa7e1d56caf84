"""A handler's transient database errors are the platform's, not the job's (D-5): the
handler runs again within the same attempt, so no attempt is spent on them; any other
exception is the handler's failure."""

from __future__ import annotations

from typing import cast

import pytest
from django.db import OperationalError

from jobs import handlers
from jobs.handler_contract import HandlerContext, JobResult
from jobs.runtime import worker

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


def test_a_handler_that_started_a_command_is_not_run_again(monkeypatch, tmp_path):
    """C-9: after a transient error, a handler that started a command is not re-entered
    (the command would run twice in one attempt): the error fails the attempt."""
    from objectives import processes

    calls = []

    def runs_then_fails(job, ctx):
        calls.append(1)
        processes.run(
            "echo ran >> f",
            cwd=tmp_path,
            env=processes.scrubbed_env({}),
            stdout_path=tmp_path / "o",
            stderr_path=tmp_path / "e",
        )
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setitem(handlers._HANDLERS, "test-transient", runs_then_fails)
    monkeypatch.setattr(worker.time, "sleep", lambda s: None)
    result, error = worker._call_handler(_Job(), _ctx())
    assert isinstance(error, OperationalError) and result is None
    assert len(calls) == 1 and (tmp_path / "f").read_text() == "ran\n"


def test_a_progress_write_that_keeps_failing_is_dropped_not_raised(monkeypatch):
    """C-9: a transient error in a progress write is tried again, then that report is
    dropped; it never reaches the handler."""
    from jobs import queue
    from jobs.core.state import Fence

    tries = []

    def down(job_id, data, *, fence):
        tries.append(data)
        raise OperationalError("database is locked")

    monkeypatch.setattr(queue, "progress", down)
    written = worker._write_progress("j-progress", {"n": 1}, Fence("w:1", 1), _ctx())
    assert written is None and len(tries) == worker.PROGRESS_TRIES


def test_a_progress_write_is_tried_again_after_a_transient_error(monkeypatch):
    from jobs import queue
    from jobs.core.state import Fence

    tries = []
    applied = cast(queue.WriteResult, object())

    def flaky(job_id, data, *, fence):
        tries.append(data)
        if len(tries) == 1:
            raise OperationalError("database is locked")
        return applied

    monkeypatch.setattr(queue, "progress", flaky)
    written = worker._write_progress("j-progress", {"n": 1}, Fence("w:1", 1), _ctx())
    assert written is applied and len(tries) == 2
