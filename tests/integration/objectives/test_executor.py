"""O-5 / O-6 / Q-4: the executor and planner plug points, process rules, result.json."""

from __future__ import annotations

import itertools
import json
import threading
import time

import pytest

from objectives import processes
from objectives.core import vocabulary as v
from objectives.core.control import PlanOutcome
from objectives.core.dag import TaskSpec
from receipts import store
from tests.integration.objectives.conftest import configure, create, drain, objective

pytestmark = pytest.mark.django_db(transaction=True)


def run_one(command: str, **fields) -> str:
    oid = create(title="One", tasks=[{"id": "t", "title": "T", "command": command}], **fields)
    drain()
    return oid


def test_tasks_see_only_a_scrubbed_environment(factory, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "s3cret")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:pw@db/x")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_x")
    out = factory / "env.txt"
    oid = run_one(f"env > {out}")
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert set(env) - {"PWD", "SHLVL", "_", "OLDPWD"} <= {
        "PATH",
        "HOME",
        "LANG",
        "RECEIPT_OBJECTIVE_ID",
        "RECEIPT_TASK_ID",
        "RECEIPT_JOB_ID",
    }
    assert (env["RECEIPT_OBJECTIVE_ID"], env["RECEIPT_TASK_ID"]) == (oid, "t")
    assert env["RECEIPT_JOB_ID"] == v.task_job_id(oid, "t", 1)
    assert env["PWD"] == str(factory / "workspaces" / oid)


def test_output_is_kept_as_artifacts_and_tails_reach_the_outcome(factory):
    oid = run_one("echo to-out; echo to-err >&2")
    run = objective(oid).task("t").runs[-1]
    assert (run.stdout_tail.strip(), run.stderr_tail.strip()) == ("to-out", "to-err")
    art = factory / "workspaces" / ".logs" / oid / "t" / run.job_id  # the worker's, not the task's
    assert (art / "stdout.log").read_text() == "to-out\n"
    assert (art / "stderr.log").read_text() == "to-err\n"


def test_result_json_decides_over_the_exit_code(factory):
    write = (
        "mkdir -p artifacts/$RECEIPT_TASK_ID/$RECEIPT_JOB_ID && printf '%s' "
        '\'{"outcome": "blocked", "summary": "needs a human", '
        '"completion": {"changed": [], "proof": "", "remaining": ["all"]}}\' '
        "> artifacts/$RECEIPT_TASK_ID/$RECEIPT_JOB_ID/result.json"
    )
    oid = run_one(write)
    state = objective(oid)
    assert state.status == "blocked"
    assert state.blocked_reason == "task 't' blocked: needs a human"
    assert state.task("t").runs[-1].completion == {"changed": [], "proof": "", "remaining": ["all"]}


def test_a_timeout_fails_the_pass(factory):
    oid = create(
        title="Slow",
        tasks=[{"id": "t", "title": "T", "command": "sleep 5", "timeoutMs": 300}],
        policy={"maxCandidatePassesPerTask": 1},
    )
    started = time.monotonic()
    drain()
    assert time.monotonic() - started < 4.5
    state = objective(oid)
    assert state.task("t").runs[-1].summary == "timed out after 300 ms"
    assert state.status == "blocked"


def test_a_prompt_only_task_without_an_agent_blocks_naming_the_setting(factory):
    oid = create(title="Think", tasks=[{"id": "t", "title": "T", "prompt": "fix the bug"}])
    drain()
    state = objective(oid)
    assert state.status == "blocked" and "RECEIPT_FACTORY_AGENT_COMMAND" in state.blocked_reason


def test_a_prompt_only_task_runs_the_agent_in_a_task_packet(factory, monkeypatch):
    seen = factory / "seen.txt"
    configure(
        monkeypatch,
        factory_agent_command=(
            f"cat > {seen}; ls >> {seen}; ls output >> {seen}; cat task.json >> {seen}"
        ),
    )
    oid = create(title="Think", tasks=[{"id": "t", "title": "T", "prompt": "fix the bug"}])
    drain()
    assert objective(oid).status == "completed"
    text = seen.read_text()
    assert text.startswith("fix the bug")
    for name in ("objective.json", "output", "prompt.md", "task.json"):
        assert name in text
    assert '"prompt": "fix the bug"' in text


def fixed_executor(request, ctx):
    return {"outcome": "approved", "summary": f"pretended to run {request.task_id}"}


def fixed_planner(state, *, timeout_s):
    return PlanOutcome(
        tasks=(TaskSpec(id="p", title="planned", command="true"),), source="test-planner"
    )


def test_the_executor_and_planner_are_pluggable(factory, monkeypatch):
    configure(
        monkeypatch,
        factory_executor=f"{__name__}.fixed_executor",
        factory_planner=f"{__name__}.fixed_planner",
    )
    oid = create(title="Plugged", prompt="anything")
    drain()
    state = objective(oid)
    assert state.status == "completed" and state.plan_source == "test-planner"
    assert state.task("p").runs[-1].summary == "pretended to run p"


def test_process_output_is_reported_at_most_once_a_second(tmp_path):
    reports = []
    result = processes.run(
        "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.2; done",
        cwd=tmp_path,
        env=processes.scrubbed_env({}),
        stdout_path=tmp_path / "o",
        stderr_path=tmp_path / "e",
        on_output=lambda out, err: reports.append((time.monotonic(), out)),
    )
    assert result.exit_code == 0 and result.stdout_tail.split()[-1] == "10"
    assert 1 <= len(reports) <= 3
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(reports)]
    assert all(gap >= 0.95 for gap in gaps)


def test_abort_kills_the_whole_process_group(tmp_path):
    aborted = threading.Event()
    pids: list[int] = []
    threading.Timer(0.5, aborted.set).start()
    result = processes.run(
        f"sleep 30 & echo $! > {tmp_path}/child; sleep 30",
        cwd=tmp_path,
        env=processes.scrubbed_env({}),
        stdout_path=tmp_path / "o",
        stderr_path=tmp_path / "e",
        aborted=aborted,
        on_start=pids.append,
    )
    assert result.aborted and result.exit_code is None
    child = int((tmp_path / "child").read_text())
    import os

    for pid in (pids[0], child):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_planner_command_output_is_validated_like_an_explicit_plan(factory, monkeypatch):
    configure(
        monkeypatch,
        factory_planner_command=(
            "echo '"
            + json.dumps(
                {"tasks": [{"id": "a", "title": "A", "command": "true", "dependsOn": ["zz"]}]}
            )
            + "'"
        ),
    )
    oid = create(prompt="plan it")
    drain()
    state = objective(oid)
    assert state.blocked_reason == "plan rejected: task 'a' depends on unknown task 'zz'"


def test_a_command_printing_nul_bytes_and_a_lone_surrogate_settles_normally(factory):
    """O-6, S-3: output no database stores reaches the tails as U+FFFD; the task's job
    completes and every chain verifies (PostgreSQL refused the NUL before)."""
    oid = run_one(r"printf 'out\000put \355\240\200 end'; printf 'err\000' >&2")
    state = objective(oid)
    run = state.task("t").runs[-1]
    assert (run.job_status, run.outcome) == ("completed", "approved")
    assert run.stdout_tail == "out\ufffdput \ufffd\ufffd\ufffd end"
    assert run.stderr_tail == "err\ufffd"
    assert store.verify(v.objective_stream(oid)).ok
    assert store.verify(f"jobs/{run.job_id}").ok
