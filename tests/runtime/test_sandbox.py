"""Q-5 with real runworker processes: a fork bomb and a memory hog in task commands fail
their jobs in the sandbox, and the codex worker stays healthy and runs the next task; a
codex worker without bubblewrap says so at startup and in /healthz."""

from __future__ import annotations

import dataclasses

import pytest
from django.conf import settings

from jobs import queue
from objectives.core import vocabulary as v
from tests.conftest import BACKEND
from tests.integration.objectives.test_sandbox import bwrap_or_skip
from tests.runtime.test_factory import (
    FACTORY_ENV,
    PATCHED,
    ROLES,
    create,
    settled,
    start,
    until,
)

pytestmark = [
    pytest.mark.runtime,
    pytest.mark.django_db(transaction=True),
    # the sandbox's limits, not the database: once is enough
    pytest.mark.skipif(BACKEND != "sqlite", reason="runs once, in the SQLite leg"),
]

SMALL_SANDBOX = {
    "RECEIPT_COMMAND_SANDBOX": "bwrap",
    "RECEIPT_COMMAND_PROCESSES": "32",
    "RECEIPT_COMMAND_MEMORY_MB": "128",
    # One task at a time: a root worker's commands share one unprivileged user, and the
    # process limit counts that user's processes on the host (docs/operator-guide.md).
    "CODEX_JOB_CONCURRENCY": "1",
}


@pytest.fixture
def factory(stack, monkeypatch):  # as in test_factory: every role, Factory's timings
    monkeypatch.setattr(settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, **PATCHED))
    stack.env.update(FACTORY_ENV)
    return stack


def test_a_fork_bomb_and_a_memory_hog_fail_their_jobs_and_the_worker_carries_on(factory):
    bwrap_or_skip()
    start(factory, *ROLES, **SMALL_SANDBOX)
    codex = factory.procs["codex"]
    oid = create(
        title="Hostile",
        tasks=[
            {"id": "bomb", "title": "Bomb", "command": "b() { b | b; }; b"},
            {"id": "hog", "title": "Hog", "command": "tail /dev/zero"},
        ],
        policy={"maxCandidatePassesPerTask": 1},
    )
    jobs = {task: settled(v.task_job_id(oid, task, 1), timeout=90) for task in ("bomb", "hog")}
    for task, job in jobs.items():  # each ran, failed its pass, and settled cleanly
        assert job.status == "completed" and job.result["outcome"] == "failed", (task, job)
        assert job.result["exitCode"] not in (0, None) and not job.result["timedOut"]
    assert "fork" in jobs["bomb"].result["stderrTail"].lower()
    assert "memory exhausted" in jobs["hog"].result["stderrTail"]
    assert until(oid, "blocked", "failed", "completed").status == "blocked"
    assert codex.poll() is None, factory.log("codex")
    after = create(title="Next", tasks=[{"id": "t", "title": "T", "command": "echo fine"}])
    assert until(after, "completed", "blocked", timeout=60).status == "completed"
    job = queue.get(v.task_job_id(after, "t", 1))
    assert job.result["stdoutTail"].strip() == "fine"
    assert codex.poll() is None


def test_a_codex_worker_without_bubblewrap_says_so_in_health(stack, client):
    stack.start("codex", RECEIPT_COMMAND_SANDBOX="bwrap", RECEIPT_BWRAP_PATH="/nonexistent/bwrap")
    health = client.get("/healthz").json()
    assert health["degraded"] is True
    assert "a worker-codex process: commands disabled: no sandbox" in health["warnings"]
    assert "commands disabled: no sandbox" in stack.log("codex-1")  # its startup log
