"""Factory on a real database, with jobs run in this process by a tiny stand-in worker.

`work(job_id)` leases a queued job, runs its registered handler under a real fence and
settles it through the queue service, exactly the writes a worker makes (D-5) without
django-q2. Tests use real transactions (`transaction=True`) so after-commit listeners
(the outbox, reconciliation, the ledger) run as they do in production.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from django.conf import settings

from jobs import handlers, queue
from jobs.core.state import Fence
from jobs.handler_contract import HandlerContext, JobResult
from jobs.models import Job
from objectives import selectors
from objectives.core import vocabulary as v
from tests.integration.api.conftest import anonymous, api, api_for, issue  # noqa: F401
from tests.support import present

AUTH = {"userId": "u-1", "organizationId": "org-1"}
SKIP_BY_DEFAULT = frozenset({v.KIND_MONITOR})


@pytest.fixture
def factory(transactional_db, tmp_path, monkeypatch):
    """tmp_path holds the data directory (`data/`) and the workspaces (`workspaces/`).
    Commands run on the host here (RECEIPT_COMMAND_SANDBOX=host): these tests watch them
    through files outside their workspaces. The sandbox has its own tests (test_sandbox)."""
    monkeypatch.setattr(settings, "DATA_DIR", tmp_path / "data")
    monkeypatch.setattr(settings, "WORKSPACE_DIR", tmp_path / "workspaces")
    (tmp_path / "data").mkdir()
    monkeypatch.setattr(
        settings,
        "RECEIPT",
        dataclasses.replace(
            settings.RECEIPT,
            factory_monitor_interval_ms=100,
            command_sandbox="host",
            data_dir=str(tmp_path / "data"),
            workspace_dir=str(tmp_path / "workspaces"),
        ),
    )
    return tmp_path


def configure(monkeypatch, **fields: Any) -> None:
    monkeypatch.setattr(settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, **fields))


def work(job_id: str, *, worker: str = "test:worker", deadline_s: float = 60.0) -> Any:
    """Run one queued job to settlement; returns the settled job."""
    leased = queue.lease(job_id, worker_id=worker)
    assert leased.applied, (job_id, leased.outcome)
    job = present(leased.job)
    fence = Fence(worker, job.attempt)
    job = present(queue.heartbeat(job_id, fence=fence).job)
    ctx = HandlerContext(
        job=job,
        fence=fence,
        deadline_monotonic=time.monotonic() + deadline_s,
        pull=lambda types: list(queue.consume_commands(job_id, fence=fence, types=types).commands),
        report=lambda data: queue.progress(job_id, data, fence=fence).applied,
    )
    if job.abort_requested:
        return queue.cancel(job_id, reason=job.abort_reason or "abort", fence=fence).job
    try:
        result = present(handlers.handler_for(job.agent_id))(job, ctx)
    except Exception as error:  # a handler exception is a retryable failure (D-7)
        result = JobResult.failure(f"{type(error).__name__}: {error}")
    current = queue.get(job_id)
    if current.abort_requested:
        return queue.cancel(job_id, reason=present(current.abort_reason), fence=fence).job
    if result.ok:
        return queue.complete(job_id, result.result, fence=fence).job
    return queue.fail(
        job_id,
        result.error or "failed",
        fence=fence,
        no_retry=result.no_retry,
        result=result.result,
    ).job


def queued(skip: frozenset[str] = SKIP_BY_DEFAULT) -> list[str]:
    return list(
        Job.objects.filter(status="queued")
        .exclude(kind__in=skip)
        .order_by("created_at", "id")
        .values_list("id", flat=True)
    )


def drain(*, rounds: int = 200, skip: frozenset[str] = SKIP_BY_DEFAULT) -> list[str]:
    """Run queued jobs (oldest first) until none is left; returns the ids run."""
    ran: list[str] = []
    for _ in range(rounds):
        ids = queued(skip)
        if not ids:
            return ran
        work(ids[0])
        ran.append(ids[0])
    raise AssertionError(f"jobs still queued after {rounds} rounds: {queued(skip)}")


def dispatch(action: str = "create", *, org: str = "org-1", **fields: Any):
    """Enqueue a factory.dispatch job and run it; returns the settled job."""
    payload = {
        "kind": v.KIND_DISPATCH,
        "action": action,
        "authContext": {"userId": "u-1", "organizationId": org},
        **fields,
    }
    job = queue.enqueue(v.FACTORY_AGENT, payload).job
    return work(job.job_id)


def create(**fields: Any) -> str:
    settled = dispatch("create", **fields)
    assert settled.status == "completed", settled.last_error
    return settled.result["objectiveId"]


def objective(objective_id: str):
    state = selectors.get(objective_id)
    assert state is not None
    return state


def diamond(command: str = "true") -> list[dict[str, Any]]:
    return [
        {"id": "a", "title": "A", "command": command},
        {"id": "b", "title": "B", "command": command, "dependsOn": ["a"]},
        {"id": "c", "title": "C", "command": command, "dependsOn": ["a"]},
        {"id": "d", "title": "D", "command": command, "dependsOn": ["b", "c"]},
    ]
