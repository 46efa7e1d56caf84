"""Retry policies in the pure core (issue 34 item 2): the backoff formula, its derived
jitter, which errors retry, the wire form, and `retryAt` through body, fold, wire and
diagnosis."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from jobs.core import bodies, retry_policy
from jobs.core.diagnosis import Facts, diagnose, utc_text
from jobs.core.reducer import InvariantError, fold_job
from jobs.core.retry_policy import (
    RetryPolicy,
    RetryPolicyError,
    backoff_ms,
    jitter_fraction,
    nominal_backoff_ms,
    retries_error,
)
from jobs.core.state import Fence
from jobs.core.wire import job_from_wire, job_to_wire
from receipts.core.chain import seal
from tests.support import present

NOW = 2_000_000_000_000
LIVE = {"driver": 1, "worker-chat": 1, "worker-codex": 1, "worker-control": 1}


@pytest.mark.parametrize(
    "policy, attempt, expected",
    [
        (RetryPolicy(), 1, 1_000),
        (RetryPolicy(), 2, 2_000),
        (RetryPolicy(), 3, 4_000),
        (RetryPolicy(), 10, 512_000),
        (RetryPolicy(), 11, 600_000),  # capped at ten minutes
        (RetryPolicy(), 1_000, 600_000),  # no float overflow far past the cap
        (RetryPolicy(base_ms=500, factor=3, cap_ms=10_000), 3, 4_500),
        (RetryPolicy(base_ms=500, factor=3, cap_ms=10_000), 4, 10_000),
        (RetryPolicy(base_ms=5_000, factor=1), 7, 5_000),  # constant backoff
        (RetryPolicy(base_ms=0), 5, 0),  # no backoff: retried at once
        (RetryPolicy(base_ms=50_000, cap_ms=1_000), 1, 1_000),  # cap below base
    ],
)
def test_the_nominal_backoff_grows_by_the_factor_up_to_the_cap(policy, attempt, expected):
    assert nominal_backoff_ms(policy, attempt) == expected


def test_equal_jitter_waits_at_least_half_and_at_most_the_nominal_backoff():
    policy = RetryPolicy(base_ms=1_000, cap_ms=600_000)
    waits = set()
    for n in range(200):
        job_id = f"job-{n}"
        for attempt in (1, 2, 5):
            nominal = nominal_backoff_ms(policy, attempt)
            wait = backoff_ms(policy, job_id, attempt)
            assert nominal - nominal // 2 <= wait <= nominal
            waits.add((attempt, wait))
    assert len(waits) > 300  # jobs that failed together spread out


def test_the_jitter_is_derived_from_job_and_attempt_so_it_replays():
    assert jitter_fraction("j1", 2) == jitter_fraction("j1", 2)
    assert jitter_fraction("j1", 2) != jitter_fraction("j1", 3)
    assert jitter_fraction("j1", 2) != jitter_fraction("j2", 2)
    assert 0 <= jitter_fraction("j1", 2) < 1
    policy = RetryPolicy(base_ms=10_000)
    assert backoff_ms(policy, "j1", 2) == backoff_ms(policy, "j1", 2)
    at = retry_policy.retry_at(policy, "j1", 2, failed_at_ms=NOW)
    assert at == NOW + backoff_ms(policy, "j1", 2)
    assert retry_policy.retry_at(RetryPolicy(base_ms=0), "j1", 2, failed_at_ms=NOW) is None


class Transient(Exception):
    pass


class Permanent(ValueError):
    pass


_T = f"{__name__}.Transient"
_P = f"{__name__}.Permanent"


@pytest.mark.parametrize(
    "policy, error, paths, retried",
    [
        (RetryPolicy(), "anything", (), True),  # no rules: every error retries
        (RetryPolicy(never_retry=(_P,)), "x", retry_policy.exception_paths(Permanent()), False),
        # bases count: never_retry a base class refuses its subclasses
        (
            RetryPolicy(never_retry=("builtins.ValueError",)),
            "x",
            retry_policy.exception_paths(Permanent()),
            False,
        ),
        (RetryPolicy(retry_on=(_T,)), "x", retry_policy.exception_paths(Transient()), True),
        (RetryPolicy(retry_on=(_T,)), "x", retry_policy.exception_paths(Permanent()), False),
        # a failure that raised nothing is judged by its text: class rules do not apply
        (RetryPolicy(retry_on=(_T,)), "x", (), True),
        (RetryPolicy(never_retry_matching=r"^invalid_"), "invalid_input: no", (), False),
        (RetryPolicy(never_retry_matching=r"^invalid_"), "timeout talking to it", (), True),
        (RetryPolicy(retry_matching=r"timeout|429"), "HTTP 429 from provider", (), True),
        (RetryPolicy(retry_matching=r"timeout|429"), "HTTP 400 from provider", (), False),
        # a never rule wins over a retry rule
        (
            RetryPolicy(retry_matching="429", never_retry=(_T,)),
            "429",
            retry_policy.exception_paths(Transient()),
            False,
        ),
    ],
)
def test_which_errors_retry(policy, error, paths, retried):
    assert retries_error(policy, error, paths) is retried


@pytest.mark.parametrize(
    "fields, names",
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 101}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"base_ms": -1}, "base_ms"),
        ({"cap_ms": 1.5}, "cap_ms"),
        ({"factor": 0.5}, "factor"),
        ({"factor": "2"}, "factor"),
        ({"retry_on": "mod.Class"}, "retry_on"),
        ({"never_retry": ("NoDots",)}, "never_retry"),
        ({"retry_matching": "("}, "retry_matching"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(fields, names):
    with pytest.raises(RetryPolicyError, match=names):
        RetryPolicy(**fields)


def test_a_policy_may_allow_more_attempts_than_a_clients_clamp():
    assert RetryPolicy(max_attempts=20).max_attempts == 20


def test_the_wire_form_keeps_only_what_differs_and_reads_back():
    assert RetryPolicy().to_wire() == {}
    policy = RetryPolicy(max_attempts=12, base_ms=2_000, never_retry=(_P,), retry_matching="x")
    wire = policy.to_wire()
    assert wire == {"maxAttempts": 12, "baseMs": 2_000, "neverRetry": [_P], "retryMatching": "x"}
    assert retry_policy.from_wire(wire) == policy
    with pytest.raises(RetryPolicyError, match="unknown retry policy keys: jitter"):
        retry_policy.from_wire({"jitter": "full"})


def test_a_jobs_policy_is_its_payloads_own_else_its_kinds():
    kind_policy = RetryPolicy(base_ms=3_000)
    retry_policy.register_retry_policy("test.policy-kind", kind_policy)
    try:
        assert retry_policy.policy_for("test.policy-kind", {}) == kind_policy
        own = {retry_policy.PAYLOAD_KEY: {"baseMs": 7}}
        assert retry_policy.policy_for("test.policy-kind", own) == RetryPolicy(base_ms=7)
        bad = {retry_policy.PAYLOAD_KEY: {"baseMs": -7}}  # unreadable: the kind's applies
        assert retry_policy.policy_for("test.policy-kind", bad) == kind_policy
        assert retry_policy.policy_for("test.other", {}) is None
        with pytest.raises(RetryPolicyError, match="another retry policy"):
            retry_policy.register_retry_policy("test.policy-kind", RetryPolicy())
    finally:
        retry_policy.unregister_retry_policy("test.policy-kind")


# --- retryAt through body, fold, wire and diagnosis -------------------------------------


def _receipts(failed_body: dict[str, Any]) -> list[Any]:
    enqueued = bodies.enqueued(
        "j1",
        agent_id="factory",
        lane="collect",
        payload={"kind": "factory.run"},
        max_attempts=3,
        session_key=None,
        singleton_mode="allow",
        lease_ms=300_000,
    )
    leased = bodies.leased("j1", Fence("w1", 1), lease_until=NOW + 300_000, start=False)[0]
    out, prev = [], None
    for n, body in enumerate([enqueued, leased, failed_body]):
        receipt = seal(stream="jobs/j1", prev=prev, body=body, ts=NOW + n, random_hex16="0" * 16)
        out.append(receipt)
        prev = receipt.hash
    return out


def _leased_job():
    return present(fold_job(_receipts({"type": "job.progress", "jobId": "j1"})[:2]))


def test_a_failed_body_carries_retry_at_only_when_retried_after_a_wait():
    job = _leased_job()
    fence = Fence("w1", 1)
    plain = bodies.failed(job, fence, "boom", no_retry=False)
    assert "retryAt" not in plain  # old bodies are unchanged
    assert bodies.failed(job, fence, "boom", no_retry=False, retry_at=None) == plain
    waited = bodies.failed(job, fence, "boom", no_retry=False, retry_at=NOW + 4_000)
    assert waited["retryAt"] == NOW + 4_000 and waited["willRetry"] is True
    final = bodies.failed(job, fence, "boom", no_retry=True, retry_at=NOW + 4_000)
    assert "retryAt" not in final  # not retried: nothing to wait for


def test_the_fold_keeps_retry_at_until_the_next_lease_and_the_job_waits_for_it():
    job = _leased_job()
    body = bodies.failed(job, Fence("w1", 1), "boom", no_retry=False, retry_at=NOW + 4_000)
    receipts = _receipts(body)
    waiting = present(fold_job(receipts))
    assert (waiting.status, waiting.retry_at, waiting.last_error) == ("queued", NOW + 4_000, "boom")
    assert waiting.scheduled_for(NOW + 3_999) == NOW + 4_000
    assert waiting.scheduled_for(NOW + 4_000) is None
    assert job_from_wire(job_to_wire(waiting)) == waiting
    lease = bodies.leased("j1", Fence("w2", 2), lease_until=NOW + 900_000, start=False)[0]
    again = seal(
        stream="jobs/j1", prev=receipts[-1].hash, body=lease, ts=NOW + 4_001, random_hex16="1" * 16
    )
    assert present(fold_job([*receipts, again])).retry_at is None
    plain = present(fold_job(_receipts(bodies.failed(job, Fence("w1", 1), "x", no_retry=False))))
    assert plain.retry_at is None and "retryAt" not in job_to_wire(plain)


def test_a_malformed_retry_at_is_refused_by_the_fold():
    body = bodies.failed(_leased_job(), Fence("w1", 1), "boom", no_retry=False)
    with pytest.raises(InvariantError, match="retryAt"):
        fold_job(_receipts({**body, "retryAt": "soon"}))


def test_diagnosis_says_when_it_retries_after_which_attempt_and_why():
    job = _leased_job()
    body = bodies.failed(job, Fence("w1", 1), "HTTP 503", no_retry=False, retry_at=NOW + 130_000)
    waiting = replace(present(fold_job(_receipts(body))), attempt=2)
    blockers = diagnose(Facts(job=waiting, now_ms=NOW, has_handler=True, live_processes=LIVE))
    assert [b.code for b in blockers] == ["retrying"]
    assert blockers[0].detail == (
        f"retrying at {utc_text(NOW + 130_000)} (in 2m 10s) after attempt 2 failed: HTTP 503"
    )
    due = diagnose(Facts(job=waiting, now_ms=NOW + 130_000, has_handler=True, live_processes=LIVE))
    assert "retrying" not in [b.code for b in due]
