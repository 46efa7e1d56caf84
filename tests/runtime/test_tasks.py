"""`@task` enqueues run in a real runworker (issue 33 item 2): the result read back
through the framework, refreshed from the fold, is the worker's."""

from __future__ import annotations

import pytest

from jobs.tasks import receipt_options
from jobs.tasks.framework import TaskResult, TaskResultStatus
from tests.conftest import wait_for
from tests.integration.tasks import defs
from tests.runtime.helpers import assert_settled_once

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]


def test_tasks_run_in_a_real_worker_and_their_results_come_back(stack):
    stack.start("driver")
    stack.start("chat")
    added = defs.add.enqueue(20, b=22)
    failing = receipt_options(defs.raise_custom, max_attempts=1).enqueue()
    for result in (added, failing):

        def finished(result: TaskResult = result) -> bool:
            result.refresh()  # the fold, read again
            return result.is_finished

        wait_for(finished, timeout=30, message=f"task result {result.id} to finish")
        assert_settled_once(result.id)
    assert added.status == TaskResultStatus.SUCCESSFUL and added.return_value == 42
    assert added.worker_ids[0].startswith("chat:") and added.attempts == 1
    assert None not in (added.enqueued_at, added.started_at, added.finished_at)
    assert failing.status == TaskResultStatus.FAILED and failing.attempts == 1
    error = failing.errors[0]
    assert error.exception_class_path == "tests.integration.tasks.defs.CustomError"
    assert error.exception_class is defs.CustomError
    assert "CustomError: custom failure" in error.traceback
