"""C-9: a task command never runs twice within one attempt.

A transient database error in a progress write while the command runs (the second
write: the first reports its start, the second its output) must neither abandon the
command nor run the handler again beside it. The command leaves one line in a file per
run, so the test counts real runs."""

from __future__ import annotations

import dataclasses

import pytest
from django.conf import settings

from tests.runtime.helpers import assert_settled_once, enqueue, receipt_types, wait_status

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]

# Prints first, so the second progress write (the output tail, at most once a second)
# falls inside the command's run; without output it would come only with the 30 s
# still-alive report.
COMMAND = "echo begun; sleep 3; echo once >> f"
DEFAULT_LEASE_MS = 300_000  # production's: no execution timeout near the command's 3 s


def test_a_transient_error_in_a_progress_write_runs_the_command_once(stack, tmp_path, monkeypatch):
    monkeypatch.setattr(
        settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, job_lease_ms=DEFAULT_LEASE_MS)
    )
    stack.env["JOB_LEASE_MS"] = str(DEFAULT_LEASE_MS)
    workdir = tmp_path / "work"
    workdir.mkdir()
    stack.start("driver")
    stack.start("chat", name="chat", RECEIPT_FAULTS="progress_transient@2")
    job = enqueue("test-command", command=COMMAND, dir=str(workdir), reportProgress=True)
    done = wait_status(job.job_id, "completed", "failed", timeout=60)
    assert [m["fault"] for m in stack.marks("fault")] == ["progress_transient"]
    assert "worker.progress_retry" in stack.log("chat")  # said so in the log
    assert (workdir / "f").read_text() == "once\n"
    assert done.status == "completed" and done.attempt == 1
    assert len(stack.marks("start", job.job_id)) == 1  # the handler was never re-entered
    assert receipt_types(job.job_id).count("job.completed") == 1
    assert_settled_once(job.job_id)
