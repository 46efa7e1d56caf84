"""The job as clients and operators see it (A-2): the fold's wire form plus the derived
contract/routing view and the chain position. One place for API, admin and CLI."""

from __future__ import annotations

from typing import Any

from jobs.core.contracts import contract_group, routed_group
from jobs.core.state import JobState
from jobs.core.wire import job_to_wire

# Fields the fold keeps for exact rebuilds but A-2 does not list; kept in the API too
# since they answer "why" questions (cancelReason, abortReason, settledBy).


def job_json(job: JobState) -> dict[str, Any]:
    wire = job_to_wire(job)
    wire.setdefault("runAt", None)  # stored only when set (jobs.core.wire)
    wire.setdefault("priority", 0)
    wire.setdefault("retryAt", None)  # a retry policy's backoff, while the job waits for it
    contract = contract_group(job.kind)
    routed = routed_group(job.agent_id, job.kind, job.queue)
    wire["contractGroup"] = contract
    wire["routedGroup"] = routed
    wire["groupMismatch"] = contract is not None and contract != routed
    return wire
