"""The job's camelCase wire form (A-2, J-5): what the read model stores and rebuilds compare."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.core.reducer import fold_job
from jobs.core.state import Command, JobState
from jobs.core.vocabulary import STATUSES, job_stream
from jobs.core.wire import job_from_wire, job_to_wire
from receipts.core.canonical import canonical_json
from receipts.core.chain import Receipt, seal

JOB = "job-wire"

# A-2 lists these; contractGroup and routedGroup are derived by the API from contracts.
A2_FIELDS = {
    "id",
    "agentId",
    "lane",
    "kind",
    "status",
    "attempt",
    "maxAttempts",
    "sessionKey",
    "singletonMode",
    "payload",
    "workerId",
    "leaseUntil",
    "leaseMs",
    "abortRequested",
    "commands",
    "result",
    "lastError",
    "createdAt",
    "updatedAt",
    "stream",
    "receiptCount",
    "head",
}
# Carried beyond A-2 so the wire form rebuilds the state exactly.
EXTRA_FIELDS = {
    "abortReason",
    "settledBy",
    "cancelReason",
    "organizationId",
    "objectiveId",
    "taskId",
    "queue",  # the worker group an enqueue chose (issue 33 item 5)
}
# A job's operator retries (issue 34 item 3): optional, since rows stored before retries
# existed lack them (a job never retried).
RETRY_FIELDS = {"retries", "retriedBy", "retriedAt", "retriedAfterAttempt"}
COMMAND_FIELDS = {"id", "command", "lane", "payload", "by", "createdAt", "consumedAt"}


def chain(*bodies: dict[str, Any]) -> list[Receipt]:
    receipts: list[Receipt] = []
    prev: str | None = None
    for index, body in enumerate(bodies):
        receipt = seal(
            stream=job_stream(JOB),
            prev=prev,
            body={"jobId": JOB, **body},
            ts=5_000 + index,
            random_hex16="0" * 16,
        )
        receipts.append(receipt)
        prev = receipt.hash
    return receipts


def busy_job() -> JobState:
    job = fold_job(
        chain(
            {
                "type": "job.enqueued",
                "agentId": "factory-control",
                "lane": "chat",
                "payload": {
                    "kind": "factory.objective.control",
                    "authContext": {"userId": "u", "organizationId": "org"},
                    "objectiveId": "obj",
                    "nested": {"list": [1, 2.5, None, True, "ü"]},
                },
                "maxAttempts": 3,
                "sessionKey": "s",
                "singletonMode": "steer",
                "leaseMs": 900_000,
            },
            {"type": "job.leased", "workerId": "w", "attempt": 1, "leaseUntil": 9_000},
            {
                "type": "queue.command",
                "commandId": "c1",
                "command": "steer",
                "lane": "steer",
                "payload": {"text": "hi"},
                "by": "me",
            },
            {
                "type": "queue.command",
                "commandId": "c2",
                "command": "abort",
                "payload": {"reason": "stop"},
                "by": "op",
            },
            {"type": "queue.command.consumed", "commandIds": ["c1"], "workerId": "w", "attempt": 1},
            {
                "type": "job.canceled",
                "reason": "abort requested",
                "by": "w",
                "workerId": "w",
                "attempt": 1,
            },
        )
    )
    assert job is not None
    return job


def test_wire_form_has_the_a2_names_plus_the_rebuild_fields() -> None:
    wire = job_to_wire(busy_job())
    assert set(wire) == A2_FIELDS | EXTRA_FIELDS | RETRY_FIELDS
    assert {k for c in wire["commands"] for k in c} == COMMAND_FIELDS
    assert wire["stream"] == "jobs/job-wire"
    assert (wire["status"], wire["abortRequested"], wire["abortReason"]) == (
        "canceled",
        True,
        "stop",
    )
    assert wire["commands"][0]["consumedAt"] == 5_004
    assert (wire["organizationId"], wire["objectiveId"], wire["taskId"]) == ("org", "obj", None)


def test_folded_job_round_trips_through_json_text_exactly() -> None:
    """J-5 / S-8: the read model stores the wire form as JSON; rebuilds compare it."""
    job = busy_job()
    wire = job_to_wire(job)
    text = canonical_json(wire)
    assert job_from_wire(json.loads(text)) == job
    assert canonical_json(job_to_wire(job_from_wire(json.loads(text)))) == text


def test_a_shared_wire_form_is_the_same_json_without_copies() -> None:
    """The projector writes the form as JSON text at once: nothing for it to copy."""
    job = busy_job()
    shared = job_to_wire(job, share=True)
    assert canonical_json(shared) == canonical_json(job_to_wire(job))
    assert shared["payload"] is job.payload and shared["result"] is job.result
    assert shared["commands"][0]["payload"] is job.commands[0].payload


def test_wire_form_is_a_copy_of_the_state() -> None:
    job = busy_job()
    wire = job_to_wire(job)
    wire["payload"]["nested"]["list"].append("mutated")
    wire["commands"][0]["payload"]["text"] = "mutated"
    assert job.payload["nested"]["list"] == [1, 2.5, None, True, "ü"]
    assert job.commands[0].payload == {"text": "hi"}


def test_extra_api_fields_are_ignored_when_reading_the_wire_form() -> None:
    """A-2 adds contractGroup/routedGroup; they are derived, not stored."""
    job = busy_job()
    wire = {**job_to_wire(job), "contractGroup": "control", "routedGroup": "control"}
    assert job_from_wire(wire) == job


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"status": "paused"}, "job wire form: 'status' 'paused' is not a job status"),
        ({"attempt": True}, "job wire form: 'attempt' must be an integer, got True"),
        ({"attempt": "1"}, "job wire form: 'attempt' must be an integer, got '1'"),
        ({"leaseUntil": 1.5}, "job wire form: 'leaseUntil' must be an integer, got 1.5"),
        ({"workerId": 3}, "job wire form: 'workerId' must be a string or null, got 3"),
        ({"abortRequested": 0}, "job wire form: 'abortRequested' must be a boolean, got 0"),
        ({"commands": {}}, "job wire form: 'commands' must be a list of objects"),
        ({"commands": [{"id": "c"}]}, "command wire form lacks 'command'"),
    ],
)
def test_malformed_wire_form_is_refused_with_the_key_named(
    change: dict[str, Any], message: str
) -> None:
    wire = {**job_to_wire(busy_job()), **change}
    with pytest.raises(ValueError) as err:
        job_from_wire(wire)
    assert str(err.value) == message


@pytest.mark.parametrize("key", sorted((A2_FIELDS | EXTRA_FIELDS) - {"stream", "queue"}))
def test_every_stored_key_is_required(key: str) -> None:
    wire = job_to_wire(busy_job())
    del wire[key]
    with pytest.raises(ValueError, match=f"^job wire form lacks '{key}'$"):
        job_from_wire(wire)


def test_a_form_stored_before_retries_existed_reads_as_never_retried() -> None:
    """Issue 34 item 3: job rows written before the retry fields still read."""
    job = busy_job()
    wire = {k: v for k, v in job_to_wire(job).items() if k not in RETRY_FIELDS}
    read = job_from_wire(wire)
    assert read == job
    assert (read.retries, read.retried_by, read.retried_at, read.retried_after_attempt) == (
        0,
        None,
        None,
        0,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"retries": "1"}, "job wire form: 'retries' must be an integer, got '1'"),
        ({"retriedBy": 7}, "job wire form: 'retriedBy' must be a string or null, got 7"),
        ({"retriedAt": 1.5}, "job wire form: 'retriedAt' must be an integer, got 1.5"),
    ],
)
def test_a_malformed_retry_field_is_refused_with_the_key_named(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as err:
        job_from_wire({**job_to_wire(busy_job()), **change})
    assert str(err.value) == message


def test_stream_is_derived_and_may_be_absent() -> None:
    job = busy_job()
    wire = job_to_wire(job)
    del wire["stream"]
    assert job_from_wire(wire) == job


def test_a_row_stored_before_queues_existed_reads_as_the_default_route() -> None:
    """Issue 33 item 5: `queue` is absent from read-model rows written before it."""
    job = busy_job()
    wire = job_to_wire(replace(job, queue="emails"))
    assert wire["queue"] == "emails" and job_from_wire(wire).queue == "emails"
    del wire["queue"]
    assert job_from_wire(wire).queue is None


# --- random states ---------------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
_ids = st.from_regex(r"[A-Za-z0-9._:-]{1,128}", fullmatch=True)
_opt_text = st.none() | st.text(max_size=10)
_opt_int = st.none() | st.integers(min_value=0, max_value=2**53)
_ms = st.integers(min_value=0, max_value=2**53)

_commands = st.builds(
    Command,
    id=st.text(min_size=1, max_size=8),
    command=st.sampled_from(["steer", "follow_up", "abort"]),
    lane=st.none() | st.sampled_from(["steer", "follow_up"]),
    payload=_json,
    by=_opt_text,
    created_at=_ms,
    consumed_at=_opt_int,
)

_states = st.builds(
    JobState,
    job_id=_ids,
    agent_id=st.text(max_size=12),
    lane=st.sampled_from(["chat", "collect", "steer", "follow_up"]),
    kind=_opt_text,
    status=st.sampled_from(STATUSES),
    attempt=st.integers(min_value=0, max_value=8),
    max_attempts=st.integers(min_value=1, max_value=8),
    session_key=_opt_text,
    singleton_mode=st.sampled_from(["allow", "cancel", "steer"]),
    payload=_json,
    worker_id=_opt_text,
    lease_until=_opt_int,
    lease_ms=_opt_int,
    abort_requested=st.booleans(),
    abort_reason=_opt_text,
    commands=st.lists(_commands, max_size=3).map(tuple),
    result=_json,
    last_error=_opt_text,
    created_at=_ms,
    updated_at=_ms,
    organization_id=_opt_text,
    objective_id=_opt_text,
    task_id=_opt_text,
    receipt_count=st.integers(min_value=1, max_value=10**6),
    head=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    settled_by=_opt_text,
    cancel_reason=_opt_text,
    queue=st.none() | st.sampled_from(["emails", "reports"]),
    run_at=_opt_int,
    priority=st.integers(min_value=-100, max_value=100),
    retries=st.integers(min_value=0, max_value=50),
    retried_by=_opt_text,
    retried_at=_opt_int,
    retried_after_attempt=st.integers(min_value=0, max_value=8),
)


@settings(max_examples=200, deadline=None)
@given(state=_states)
def test_any_state_round_trips_through_the_wire_form_exactly(state: JobState) -> None:
    wire = job_to_wire(state)
    assert job_from_wire(wire) == state
    assert job_from_wire(json.loads(canonical_json(wire))) == state
