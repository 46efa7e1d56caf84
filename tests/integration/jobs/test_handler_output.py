"""Handler output no database can store (D-7, S-3, Q-3): a NUL or a lone surrogate in what a
handler writes (progress, result, error text, an exception's message) becomes U+FFFD on
its way to the receipt, and the job settles as it would have. Runs the real worker path
(`worker.execute`: begin, handler, settle) on both backends."""

from __future__ import annotations

import subprocess

import pytest

from jobs import handlers, queue
from jobs.handler_contract import JobResult
from jobs.runtime import driver, worker
from jobs.runtime.dispatch import start_driver
from receipts import store
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload

pytestmark = pytest.mark.django_db

AGENT = "test-noisy-output"
# NUL bytes, and ED A0 80: U+D800 written as if it were a character (CESU-8).
COMMAND = r"printf 'out\000put \355\240\200 end\000'"
CLEAN = "out\ufffdput \ufffd end\ufffd"


def command_output() -> str:
    """What a handler that keeps every byte it can gets: NULs and a lone surrogate."""
    raw = subprocess.run(["/bin/sh", "-c", COMMAND], capture_output=True, check=True).stdout
    text = raw.decode("utf-8", "surrogatepass")
    assert "\x00" in text and "\ud800" in text
    return text


def run_job(handler, monkeypatch, tmp_path):
    monkeypatch.setitem(handlers._HANDLERS, AGENT, handler)
    monkeypatch.setenv("RECEIPT_KEEPER_DIR", str(tmp_path))  # no keeper thread in the test
    job = queue.enqueue(AGENT, payload("factory.run"), max_attempts=1).job
    start_driver(job)
    driver.drive(job.job_id)
    outcome = worker.execute(f"{job.job_id}:attempt:1")
    return outcome, queue.get(job.job_id)


def bodies(job_id: str, kind: str) -> list[dict]:
    return [r.body for r in store.read(f"jobs/{job_id}") if r.type == kind]


def test_progress_and_result_with_nul_and_lone_surrogates_complete_the_job(monkeypatch, tmp_path):
    """D-7, S-3: the task completes; its receipts hold U+FFFD where the bad text was."""

    def noisy(job, ctx):
        out = command_output()
        assert ctx.progress({"stdoutTail": out, f"key{out[3]}": [out]})
        return JobResult.success({"stdoutTail": out, out: "as a key"})

    outcome, job = run_job(noisy, monkeypatch, tmp_path)
    assert outcome["status"] == "completed" and job.status == "completed"
    assert bodies(job.job_id, "job.progress")[-1]["progress"] == {
        "stdoutTail": CLEAN,
        "key\ufffd": [CLEAN],
    }
    assert job.result == {"stdoutTail": CLEAN, CLEAN: "as a key"}
    assert store.verify(job.stream).ok
    assert_read_model_matches_receipts(job.job_id)


@pytest.mark.parametrize("how", ["failure", "exception"])
def test_error_text_with_nul_and_lone_surrogates_fails_the_job_normally(how, monkeypatch, tmp_path):
    """D-6, D-7, S-3: a failure reported or raised with the bad text still settles."""

    def failing(job, ctx):
        out = command_output()
        if how == "exception":
            raise RuntimeError(out)
        return JobResult.failure(f"command said {out}", no_retry=True, result={"tail": out})

    outcome, job = run_job(failing, monkeypatch, tmp_path)
    assert outcome["status"] == "failed" and job.status == "failed"
    expected = f"RuntimeError: {CLEAN}" if how == "exception" else f"command said {CLEAN}"
    assert job.last_error == expected
    assert bodies(job.job_id, "job.failed")[-1]["error"] == expected
    if how == "failure":
        assert job.result == {"status": "failed", "tail": CLEAN}
    assert store.verify(job.stream).ok
    assert_read_model_matches_receipts(job.job_id)
