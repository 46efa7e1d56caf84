from __future__ import annotations

from jobs import queue
from jobs.core.reducer import fold_job, reduce
from receipts import store
from tests.conftest import wait_for
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload


def enqueue(agent: str, *, job_id: str | None = None, **fields):
    options = {
        k: fields.pop(k)
        for k in ("max_attempts", "session_key", "singleton_mode", "lane")
        if k in fields
    }
    return queue.enqueue(agent, payload(**fields), job_id=job_id, **options).job


def wait_status(job_id: str, *statuses: str, timeout: float = 30.0):
    return wait_for(
        lambda: (j := queue.get(job_id)) is not None and j.status in statuses and j,
        timeout=timeout,
        message=f"job {job_id} to be {'/'.join(statuses)}",
    )


def receipt_types(job_id: str) -> list[str]:
    return [r.type for r in store.read(f"jobs/{job_id}")]


def assert_settled_once(job_id: str) -> None:
    """At most one terminal receipt, a sound chain, and the read model equal to the fold."""
    state, settled = None, 0
    for receipt in store.read(f"jobs/{job_id}"):
        before = state.is_terminal if state else False
        state = reduce(state, receipt)
        if state is not None and state.is_terminal and not before:
            settled += 1
    assert settled <= 1
    assert fold_job(store.read(f"jobs/{job_id}")) == queue.get(job_id)
    assert_read_model_matches_receipts(job_id)
