"""Factory with real runworker processes (O-5 .. O-13, L-3, L-4, C-3).

Every role runs as its own `runworker` subprocess on the test database with short
timings. Task commands are shell commands that leave marks in files, so tests count real
executions instead of trusting the runtime's bookkeeping.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from jobs import queue
from jobs.models import Job
from objectives import selectors, services
from objectives.core import vocabulary as v
from receipts import store
from tests.conftest import wait_for

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]

FACTORY_ENV = {
    "JOB_LEASE_MS": "20000",
    "CODEX_JOB_LEASE_MS": "8000",
    "FACTORY_CONTROL_JOB_LEASE_MS": "4000",
    "CHAT_JOB_CONCURRENCY": "8",
    "CODEX_JOB_CONCURRENCY": "3",
    "RECEIPT_HANDLER_MODULES": "",
    "RECEIPT_FACTORY_MONITOR_INTERVAL_MS": "500",
    "RECEIPT_OBJECTIVE_CONTROL_OUTBOX_REDRIVE_INTERVAL_MS": "300",
    "RECEIPT_FACTORY_OBJECTIVE_WATCHDOG_ENABLED": "0",
}
PATCHED = {
    "job_lease_ms": 20000,
    "codex_job_lease_ms": 8000,
    "factory_control_job_lease_ms": 4000,
    "factory_monitor_interval_ms": 500,
}
AUTH = {"userId": "u-1", "organizationId": "org-1"}
ROLES = ("driver", "chat", "control", "codex")


@pytest.fixture
def factory(stack, monkeypatch):
    monkeypatch.setattr(settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, **PATCHED))
    stack.env.update(FACTORY_ENV)
    return stack


def start(stack, *roles: str, **extra_env: str) -> None:
    procs = [stack.start(role, name=role, wait=False, **extra_env) for role in roles]
    from jobs.models import WorkerProcess

    for role, proc in zip(roles, procs, strict=True):

        def up(p: subprocess.Popen[bytes] = proc) -> bool:
            return WorkerProcess.objects.filter(pid=p.pid).exists() or p.poll() is not None

        wait_for(up, timeout=30, message=f"{role} to register")
        assert proc.poll() is None, stack.log(role)


def dispatch(action: str, **fields) -> str:
    payload = {"kind": v.KIND_DISPATCH, "action": action, "authContext": dict(AUTH), **fields}
    return queue.enqueue(v.FACTORY_AGENT, payload).job.job_id


def settled(job_id: str, timeout: float = 30):
    return wait_for(
        lambda: (j := queue.get(job_id)) is not None and j.is_terminal and j,
        timeout=timeout,
        message=f"job {job_id} to settle",
    )


def create(**fields) -> str:
    job = settled(dispatch("create", **fields))
    assert job.status == "completed", job.last_error
    return job.result["objectiveId"]


def until(objective_id: str, *statuses: str, timeout: float = 60):
    def reached():
        state = selectors.get(objective_id)
        return state is not None and state.status in statuses and state

    return wait_for(
        reached,
        timeout=timeout,
        interval=0.1,
        message=f"objective {objective_id} to be {'/'.join(statuses)}",
    )


def audited(objective_id: str, timeout: float = 30):
    return wait_for(
        lambda: (s := selectors.get(objective_id)) and s.audit.status == "recorded" and s,
        timeout=timeout,
        message=f"audit of {objective_id}",
    )


def marked(task_id: str, log: Path, *, seconds: float = 0.0) -> str:
    """A command that records its start and end (with times) in `log`."""
    return (
        f"echo start {task_id} $(date +%s.%N) >> {log}; sleep {seconds}; "
        f"echo end {task_id} $(date +%s.%N) >> {log}"
    )


def spans(log: Path) -> dict[str, tuple[float, float]]:
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for line in log.read_text().splitlines():
        kind, task, at = line.split()
        (starts if kind == "start" else ends)[task] = float(at)
    return {task: (starts[task], ends[task]) for task in ends}


def test_diamond_runs_in_dependency_order_within_max_active_tasks(factory, tmp_path):
    start(factory, *ROLES)
    log, checked = tmp_path / "runs.log", tmp_path / "checked"
    tasks = [
        {"id": "a", "title": "A", "command": marked("a", log, seconds=0.3)},
        {"id": "b", "title": "B", "command": marked("b", log, seconds=1.5), "dependsOn": ["a"]},
        {"id": "c", "title": "C", "command": marked("c", log, seconds=1.5), "dependsOn": ["a"]},
        {
            "id": "d",
            "title": "D",
            "command": marked("d", log, seconds=0.3),
            "dependsOn": ["b", "c"],
        },
        {"id": "e", "title": "E", "command": marked("e", log, seconds=1.5), "dependsOn": ["a"]},
    ]
    oid = create(
        title="Diamond", tasks=tasks, policy={"maxActiveTasks": 2}, checks=[f"touch {checked}"]
    )
    state = until(oid, "completed", "blocked", "failed", timeout=90)
    assert state.status == "completed", state.blocked_reason
    runs = spans(log)
    assert runs["a"][1] <= min(runs[t][0] for t in "bce")
    assert runs["d"][0] >= max(runs["b"][1], runs["c"][1])
    moments = sorted({t for span in runs.values() for t in span})
    overlap = max(sum(1 for s, e in runs.values() if s <= m < e) for m in moments)
    assert overlap == 2  # b, c and e were ready together; two at a time
    assert checked.exists()
    assert {t.status for t in state.tasks} == {"integrated"}
    state = audited(oid)
    summary = state.audit.summary
    assert summary["verified"]["ok"] and summary["verified"]["brokenJobs"] == []
    jobs = Job.objects.filter(objective_id=oid)
    assert summary["verified"]["jobsChecked"] >= jobs.filter(kind=v.KIND_TASK_RUN).count() == 5
    assert summary["attempts"] >= 5 and "durations" in summary
    assert Job.objects.filter(kind=v.KIND_AUDIT, objective_id=oid).count() == 1
    assert store.verify(v.objective_stream(oid)).ok
    checkpoints = [r for r in store.read(v.objective_stream(oid)) if r.type == v.MONITOR_CHECKPOINT]
    assert checkpoints, "monitors recorded checkpoints"


def test_failing_task_blocks_with_its_stderr_then_note_and_react_unblock(factory, tmp_path):
    start(factory, *ROLES)
    flag = tmp_path / "ready.flag"
    command = f"test -f {flag} || {{ echo flag {flag.name} is missing >&2; exit 4; }}"
    oid = create(
        title="Needs a flag",
        tasks=[{"id": "t", "title": "T", "command": command}],
        policy={"maxCandidatePassesPerTask": 2},
    )
    state = until(oid, "blocked")
    assert state.blocked_reason.endswith(f"stderr tail: flag {flag.name} is missing")
    assert len(state.task("t").runs) == 2
    flag.write_text("")
    settled(dispatch("note", objectiveId=oid, text="created the flag"))
    settled(dispatch("react", objectiveId=oid))
    state = until(oid, "completed", timeout=60)
    assert len(state.task("t").runs) == 3 and state.notes[-1].text == "created the flag"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_task_printing_nul_bytes_and_a_lone_surrogate_completes(factory):
    """O-6, S-3, D-7: output no database stores reaches every receipt as U+FFFD (progress
    tails, the verdict, the task's outcome) and the objective completes with sound chains."""
    start(factory, *ROLES)
    command = r"printf 'out\000put \355\240\200 end'; printf 'err\000' >&2"
    oid = create(title="Noisy", tasks=[{"id": "t", "title": "T", "command": command}])
    state = until(oid, "completed", "blocked", "failed", timeout=60)
    assert state.status == "completed", state.blocked_reason
    run = state.task("t").runs[-1]
    assert (run.stdout_tail, run.stderr_tail) == (
        "out\ufffdput \ufffd\ufffd\ufffd end",
        "err\ufffd",
    )
    assert store.verify(v.objective_stream(oid)).ok
    assert store.verify(f"jobs/{run.job_id}").ok


def test_cancel_kills_the_running_task_and_cancels_the_objective(factory, tmp_path):
    start(factory, *ROLES)
    pid_file = tmp_path / "pid"
    oid = create(
        title="Long",
        tasks=[{"id": "t", "title": "T", "command": f"echo $$ > {pid_file}; sleep 60"}],
    )
    wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip(),
        timeout=30,
        message="the task to start",
    )
    pid = int(pid_file.read_text())
    assert _alive(pid)
    assert settled(dispatch("cancel", objectiveId=oid)).status == "completed"
    state = until(oid, "canceled")
    job = settled(v.task_job_id(oid, "t", 1))
    assert (job.status, job.cancel_reason) == ("canceled", "stopped by the user")
    wait_for(lambda: not _alive(pid), timeout=10, message=f"task process {pid} to be gone")
    assert audited(oid).audit.summary["status"] == "canceled"
    settled(dispatch("archive", objectiveId=oid))
    board = selectors.board()
    assert oid in [row.id for row in board["archived"]]
    assert oid not in [
        row.id for key in ("active", "needs_attention", "queued", "completed") for row in board[key]
    ]
    assert state.status == "canceled"


def test_killed_codex_and_control_workers_still_complete_each_command_once(factory, tmp_path):
    start(factory, "driver", "chat")
    start(factory, "control", RECEIPT_FAULTS="factory_control_after_commit")
    start(factory, "codex")
    done, began = tmp_path / "done.log", tmp_path / "began.log"
    tasks: list[dict[str, Any]] = [
        {
            "id": t,
            "title": t.upper(),
            "command": f"echo {t} >> {began}; sleep 3; echo {t} >> {done}",
        }
        for t in ("a", "b")
    ]
    tasks[1]["dependsOn"] = ["a"]
    oid = create(title="Survivor", tasks=tasks)
    wait_for(
        lambda: began.exists() and "a" in began.read_text(), timeout=30, message="task a to start"
    )
    factory.kill("codex")  # mid-task: the command dies with its worker
    wait_for(lambda: factory.marks("fault"), timeout=30, message="a control pass to pause")
    factory.kill("control")  # mid-pass: its receipts committed, its job never settled
    assert not done.exists()
    start(factory, "control", "codex")
    state = until(oid, "completed", "blocked", "failed", timeout=90)
    assert state.status == "completed", state.blocked_reason
    assert sorted(done.read_text().split()) == ["a", "b"]  # each ran to completion once
    assert began.read_text().split().count("a") == 2  # started twice, finished once
    job = queue.get(v.task_job_id(oid, "a", 1))
    assert job.attempt == 2 and job.status == "completed"
    first_control = queue.get(v.control_job_id(oid, 1))
    assert first_control.status == "completed" and first_control.attempt == 2


def test_watchdog_job_reconciles_an_objective_whose_control_job_was_lost(factory, tmp_path):
    start(factory, "driver", "chat", "codex")
    oid = create(title="Orphan", tasks=[{"title": "x", "command": "true"}])
    lost = v.control_job_id(oid, 1)
    queue.abort(lost, reason="lost in transit")  # no control role yet: it never ran
    start(factory, "control")
    watchdog = queue.enqueue(v.CONTROL_AGENT, {"kind": v.KIND_WATCHDOG, "quietMs": 0}).job
    result = settled(watchdog.job_id).result
    assert result["reconciled"] == [
        {
            "objectiveId": oid,
            "reason": "no_active_objective_work",
            "jobId": v.control_job_id(oid, 2),
        }
    ]
    assert until(oid, "completed", timeout=60).status == "completed"


def test_control_role_redrives_a_recorded_but_never_enqueued_request(factory):
    state, _ = services.create(
        "obj-outbox-1",
        {"title": "Outbox", "tasks": [{"title": "x", "command": "true"}]},
        auth_context=AUTH,
        by="test",
    )
    oid = state.objective_id
    queue.abort(v.control_job_id(oid, 1), reason="lost")

    def decide(state):
        return services.Mutation(services.control_request_events(state, "reconcile", force=True)[0])

    services.mutate(oid, decide)
    pending = selectors.get(oid).unenqueued_requests[-1].job_id
    assert queue.get(pending) is None
    start(factory, *ROLES)
    assert until(oid, "completed", timeout=60).status == "completed"
    assert Job.objects.filter(pk=pending).count() == 1
    enqueued = [
        r
        for r in store.read(v.objective_stream(oid))
        if r.type == v.CONTROL_ENQUEUED and r.body["jobId"] == pending
    ]
    assert len(enqueued) == 1


def test_investigation_runs_without_slot_checks_or_promotion(factory):
    start(factory, *ROLES)
    oid = create(
        title="Look",
        mode="investigation",
        checks=["false"],
        tasks=[{"title": "look", "command": "echo the cache is cold"}],
    )
    state = until(oid, "completed", "blocked", timeout=60)
    assert state.status == "completed" and "the cache is cold" in state.result_summary
    types = {r.type for r in store.read(v.objective_stream(oid))}
    assert not types & {v.SLOT_ACQUIRED, v.INTEGRATION_REQUESTED, v.PUBLISH_REQUESTED}
