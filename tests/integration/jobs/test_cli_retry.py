"""Issue 34 item 3: `manage.py jobs retry <id>` and `jobs retry --status failed --kind ...`,
through the same service as the admin and the API, signed `by` the operator."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs import queue
from receipts import store
from tests.integration.jobs.retry_builders import T, failed_job, job_payload, running_job

pytestmark = pytest.mark.django_db


def jobs(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("jobs", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_one_job_is_retried_and_signed_by_the_operator():
    job_id = failed_job()
    out, _ = jobs("retry", job_id, "--by", "alice", "--reason", "disk freed")
    assert out.strip() == f"retry: job {job_id} is queued (retry 1, delivery {job_id}:retry:1)"
    receipt = store.read(f"jobs/{job_id}")[-1]
    assert (receipt.type, receipt.body["by"], receipt.body["reason"]) == (
        "job.retried",
        "alice",
        "disk freed",
    )


def test_one_job_as_json_and_a_canceled_one_only_when_asked():
    job_id = queue.enqueue("factory", job_payload(), now_ms=T).job.job_id
    queue.abort(job_id, by="ops")
    with pytest.raises(CommandError, match=r"job_not_retryable: .* is canceled"):
        jobs("retry", job_id)
    out, _ = jobs("retry", job_id, "--include-canceled", "--json")
    data = json.loads(out)
    assert (data["ok"], data["retry"], data["job"]["status"]) == (True, 1, "queued")


def test_a_running_job_is_refused_with_the_reason():
    job_id, _ = running_job()
    with pytest.raises(
        CommandError, match=f"job_not_retryable: job {job_id} is running; only a failed"
    ):
        jobs("retry", job_id)


def test_a_filter_retries_in_batches_and_reports_progress():
    runs = [failed_job(at_ms=T + n) for n in range(5)]
    other = failed_job(kind="factory.dispatch", at_ms=T + 9)
    out, err = jobs(
        "retry", "--status", "failed", "--kind", "factory.run", "--batch-size", "2", "--by", "bob"
    )
    assert out.strip() == "retry: Retried 5 job(s) in 3 batch(es)."
    assert err.splitlines() == [
        "batch 1: 2 retried, 0 skipped",
        "batch 2: 4 retried, 0 skipped",
        "batch 3: 5 retried, 0 skipped",
    ]
    assert {queue.get(j).status for j in runs} == {"queued"}
    assert queue.get(other).status == "failed"
    assert store.read(f"jobs/{runs[0]}")[-1].body["by"] == "bob"


def test_since_a_span_back_from_now_and_a_limit():
    old = failed_job(at_ms=T)
    out, _ = jobs("retry", "--status", "failed", "--since", "1d")
    assert out.strip() == "retry: Retried 0 job(s) in 0 batch(es)."  # T is long ago
    failed_job(at_ms=T + 1)
    out, _ = jobs("retry", "--status", "failed", "--limit", "1", "--json")
    data = json.loads(out)
    assert (data["retried"], data["batches"]) == (1, 1) and data["nextCursor"]
    assert queue.get(old).status == "queued"  # oldest settlement first


def test_a_dry_run_counts_and_retries_nothing():
    ids = [failed_job(at_ms=T + n) for n in range(3)]
    out, _ = jobs("retry", "--status", "failed", "--dry-run")
    assert out.strip() == "retry: 3 job(s) match; none retried"
    assert {queue.get(j).status for j in ids} == {"failed"}


def test_skipped_jobs_are_named():
    failed_job(agent="codex", objective="obj-9")
    out, _ = jobs("retry", "--status", "failed")
    lines = out.splitlines()
    assert lines[0] == "retry: Retried 0 job(s) in 1 batch(es); skipped 1 (1 objective)."
    assert lines[1].startswith("  skipped ") and lines[1].endswith(" (objective)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give a job id, or --status failed|canceled to retry many"),
        (("j-1", "--status", "failed"), "give a job id or a filter"),
        (("--status", "failed", "--include-canceled"), "--include-canceled is for one job"),
        (("--status", "failed", "--batch-size", "0"), "--batch-size must be 1 to 10000"),
        (("--status", "failed", "--kind", "no.such"), "--kind='no.such' is not one of"),
        (("--status", "failed", "--since", "last week"), "invalid_since: since must be ms"),
        (("nope",), "job_not_found: job nope not found"),
    ],
)
def test_bad_arguments_are_command_errors(args, message):
    with pytest.raises(CommandError, match=message.replace("|", r"\|")):
        jobs("retry", *args)
