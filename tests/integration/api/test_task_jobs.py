"""A task enqueued over HTTP is a task like any other (issue 33 item 2): kind
`django.task` needs no authContext, runs on the real attempt machine, and its result reads
back through the framework and the API alike."""

from __future__ import annotations

import pytest

from jobs.tasks.framework import TaskResultStatus, default_task_backend

# A payload may name a task only in a module the process has loaded or an installed app
# holds (jobs.tasks.payload): the project's own task module, loaded as a project's is.
# Without it this test passed only after another had imported it.
from tests.integration.tasks import defs  # noqa: F401

pytestmark = pytest.mark.django_db


def test_a_task_enqueued_over_http_runs_and_reads_back(api, receipt_worker):
    status, out = api.post(
        "/agents/django-task/jobs",
        {
            "payload": {
                "kind": "django.task",
                "task": "tests.integration.tasks.defs.add",
                "args": [19],
                "kwargs": {"b": 23},
            }
        },
    )
    assert status == 202, out
    job_id = out["job"]["id"]
    receipt_worker.run()
    result = default_task_backend.get_result(job_id)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42
    status, job = api.get(f"/jobs/{job_id}")
    assert status == 200 and job["status"] == "completed" and job["result"] == 42
