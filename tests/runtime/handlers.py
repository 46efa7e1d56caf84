"""Handlers for runtime tests, loaded in worker processes via RECEIPT_HANDLER_MODULES.

Each records what ran (job, attempt, pid, group) in a marker file so tests count real
executions instead of trusting the runtime's own bookkeeping.
"""

from __future__ import annotations

import json
import os
import time

from jobs.handler_contract import JobResult
from jobs.handlers import register_handler, register_kind
from tests.runtime.policies import BACKOFF_POLICY


def _mark(job, ctx, event: str) -> None:
    path = os.environ.get("RECEIPT_TEST_MARKER")
    if not path:
        return
    line = json.dumps(
        {
            "event": event,
            "jobId": job.job_id,
            "attempt": ctx.attempt,
            "pid": os.getpid(),
            "workerId": ctx.worker_id,
            "t": time.time(),
        }
    )
    with open(path, "a") as handle:
        handle.write(line + "\n")


def _echo(job, ctx):
    _mark(job, ctx, "start")
    group = ctx.worker_id.split(":", 1)[0]
    return JobResult.success(
        {"echo": (job.payload or {}).get("message"), "group": group, "pid": os.getpid()}
    )


register_handler("test-echo")(_echo)

# A deployment's own kind, routed by its contract (P-6, K-3): the README's whole path.
register_kind("test.report", worker_group="codex")

# A kind with a retry policy (issue 34 item 2): waits of 0.5-1 s, then 1-2 s.
register_kind("test.backoff", worker_group="chat", retry=BACKOFF_POLICY)

# A kind a rate limit covers in tests/runtime/test_limits.py.
register_kind("test.rated", worker_group="chat")


@register_handler("test-report")
def report(job, ctx):
    _mark(job, ctx, "start")
    return JobResult.success({"kind": job.kind, "group": ctx.worker_id.split(":", 1)[0]})


register_handler("factory-control")(_echo)  # routing tests: routes to control


@register_handler("codex")  # routes to codex, with the codex lease (15 minutes by default)
def codex(job, ctx):
    """Echoes; with `sleepMs` sleeps like test-sleep, with `stubbornMs` ignores aborts."""
    payload = job.payload or {}
    if "stubbornMs" in payload:
        return stubborn(job, ctx, sleep_ms=payload["stubbornMs"])
    if "sleepMs" in payload:
        return sleep_handler(job, ctx)
    return _echo(job, ctx)


@register_handler("test-sleep")
def sleep_handler(job, ctx):
    """Sleeps `sleepMs` in small steps, honouring abort; reports progress once."""
    _mark(job, ctx, "start")
    payload = job.payload or {}
    total = payload.get("sleepMs", 1000) / 1000
    if ctx.attempt > 1 and "laterSleepMs" in payload:
        total = payload["laterSleepMs"] / 1000
    ctx.progress({"phase": "sleeping"})
    end = time.monotonic() + total
    while time.monotonic() < end:
        if ctx.aborted.wait(0.05):
            _mark(job, ctx, "aborted")
            return JobResult.failure("aborted")
    _mark(job, ctx, "end")
    return JobResult.success({"slept": total})


@register_handler("test-stubborn")
def stubborn(job, ctx, sleep_ms=None):
    """Ignores abort and deadlines entirely (execution-timeout tests)."""
    _mark(job, ctx, "start")
    payload = job.payload or {}
    sleep_ms = payload.get("sleepMs", 10_000) if sleep_ms is None else sleep_ms
    if ctx.attempt > 1 and "laterSleepMs" in payload:
        sleep_ms = payload["laterSleepMs"]
    time.sleep(sleep_ms / 1000)
    return JobResult.success("finished late")


@register_handler("test-fail")
def fail(job, ctx):
    _mark(job, ctx, "start")
    return JobResult.failure(
        "deliberate failure", no_retry=bool((job.payload or {}).get("noRetry"))
    )


@register_handler("test-flaky")
def flaky(job, ctx):
    """Fails its attempts up to `failThrough`, then succeeds (attempt numbers keep counting
    up across an operator's retry, so a retried job succeeds on its next attempt)."""
    _mark(job, ctx, "start")
    if ctx.attempt <= (job.payload or {}).get("failThrough", 1):
        return JobResult.failure(f"flaky failure on attempt {ctx.attempt}")
    return JobResult.success({"attempt": ctx.attempt})


@register_handler("test-raise")
def explode(job, ctx):
    _mark(job, ctx, "start")
    raise RuntimeError("handler exploded")


@register_handler("test-commands")
def commands(job, ctx):
    """Waits for a steer command and returns its payload."""
    _mark(job, ctx, "start")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not ctx.aborted.is_set():
        pulled = ctx.pull_commands(["steer"])
        if pulled:
            return JobResult.success({"steered": pulled[0].payload})
        time.sleep(0.1)
    return JobResult.failure("no steer arrived")


@register_handler("test-command")
def command(job, ctx):
    """Runs payload `command` through Factory's process runner (objectives.processes), as a
    Factory task does, in payload `dir`; honours abort and the handler deadline. With
    `reportProgress`, reports its start and output tails as Factory's executor does."""
    from pathlib import Path

    from objectives import processes

    _mark(job, ctx, "start")
    payload = job.payload or {}
    where = Path(payload["dir"])
    reporting = {}
    if payload.get("reportProgress"):  # as Factory's executor reports: a start, then tails
        from objectives.executors import progress_reporter

        reporting = {
            "on_start": lambda pid: ctx.progress({"phase": "started", "pid": pid}),
            "on_output": progress_reporter(ctx),
        }
    ran = processes.run(
        payload["command"],
        cwd=where,
        env=processes.scrubbed_env({}),
        stdout_path=where / "stdout.log",
        stderr_path=where / "stderr.log",
        timeout_s=ctx.remaining_s(),
        aborted=ctx.aborted,
        **reporting,
    )
    _mark(job, ctx, "end")
    return JobResult.success({"exitCode": ran.exit_code, "pid": ran.pid})
