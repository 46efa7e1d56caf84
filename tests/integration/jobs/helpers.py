"""Shared builders for job tests."""

from __future__ import annotations

from typing import Any

from jobs.core.reducer import fold_job
from jobs.core.state import JobState
from jobs.core.wire import job_to_wire
from jobs.models import Job
from jobs.projector import row_for
from receipts import store

AUTH = {"userId": "u-1", "organizationId": "org-1"}


def payload(kind: str = "factory.run", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "authContext": dict(AUTH), **extra}


def assert_read_model_matches_receipts(job_id: str) -> None:
    """J-5/S-5: the row equals the fold of the receipts; the chain verifies."""
    stream = f"jobs/{job_id}"
    # The row first: it commits with its receipts, so the prefix it names is all there even
    # when a live worker appends more between the two reads.
    row = Job.objects.filter(pk=job_id).values().first()
    receipts = store.read(stream)
    assert store.verify(stream).ok
    if row is not None:
        receipts = receipts[: row["state"]["receiptCount"]]
    folded = fold_job(receipts)
    if folded is None:
        assert row is None
        return
    expected = row_for(folded)
    assert row == expected, {k: (row.get(k), v) for k, v in expected.items() if row.get(k) != v}
    assert row["state"] == job_to_wire(folded)


def terminal_receipts(job_id: str) -> list[str]:
    """Receipt types that actually settled the job (at most one may exist)."""
    settled = []
    state: JobState | None = None
    from jobs.core.reducer import reduce

    for receipt in store.read(f"jobs/{job_id}"):
        before = state.status if state else None
        state = reduce(state, receipt)
        if (
            state is not None
            and state.is_terminal
            and before not in ("completed", "failed", "canceled")
        ):
            settled.append(receipt.type)
    return settled
