"""C-2: `manage.py simulate` drives the real delivery runtime on a virtual clock with
seeded interleavings and faults, checks invariants after every step and prints a
replayable seed on failure (both backends)."""

from __future__ import annotations

import json
from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs import projector, queue
from jobs.core.state import Fence, FenceOutcome
from jobs.models import DeliveryPromise, Job
from jobs.runtime import loops, promises, recovery
from jobs.simulation import actions, world
from jobs.simulation.run import SimulationRefused, simulate
from receipts import store
from receipts.models import Receipt
from tests.conftest import BACKEND
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db
# Each leg runs its own seeds (swarm testing: more interleavings for the same time).
SEEDS = (1, 3, 5) if BACKEND == "postgres" else (2, 4, 6)


@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_run_keeps_every_invariant_and_settles_every_job(seed):
    report = simulate(seed, 300)
    assert report.ok, (report.violation, report.replay, report.trace[-15:])
    assert report.steps_run == 300 and len(report.trace) == 300 + report.liveness_steps
    assert report.jobs_created > 0
    assert sum(report.settled.values()) == report.jobs_created
    assert set(report.settled) <= {"completed", "failed", "canceled"}


# Properties of the simulation itself, not of a database: run once, in the SQLite leg.
_ONCE = pytest.mark.skipif(BACKEND != "sqlite", reason="runs once, in the SQLite leg")


@_ONCE
def test_runs_exercise_every_action_and_fault():
    # Each run scales its action weights (swarm testing), so coverage is over a few runs.
    actions_seen: set[str] = set()
    outcomes: Counter[str] = Counter()
    for seed in (31, 32, 33, 35, 37):  # chosen to cover them all, an operator's retry too
        report = simulate(seed, 200)
        assert report.ok, (report.violation, report.replay)
        actions_seen |= set(report.actions)
        outcomes.update(report.outcomes)
    assert actions_seen == {a.name for a in actions.ACTIONS}
    for seen in (
        "deliver_driver:dispatched",
        "deliver_execute:running",
        "handler_ok:completed",
        "redrive:acted",
        "expire:acted",
        "enqueue:steered",
        "heartbeat:beat",
        "retry:retried",  # issue 34 item 3: the invariants hold across retries
    ):
        assert outcomes[seen] > 0, seen


@_ONCE
def test_the_same_seed_gives_the_same_actions_and_outcomes():
    first = simulate(21, 200)
    second = simulate(21, 200)
    assert first.trace == second.trace
    assert {**first.to_wire(), "elapsedS": 0} == {**second.to_wire(), "elapsedS": 0}
    assert simulate(22, 200).trace != first.trace


def test_a_run_is_rolled_back_unless_kept():
    before = (Job.objects.count(), Receipt.objects.count(), DeliveryPromise.objects.count())
    simulate(4, 60)
    assert (Job.objects.count(), Receipt.objects.count(), DeliveryPromise.objects.count()) == before
    kept = simulate(4, 60, keep=True)
    assert Job.objects.count() == kept.jobs_created > 0
    assert not Job.objects.exclude(status__in=["completed", "failed", "canceled"]).exists()


def test_a_database_with_active_jobs_is_refused():
    queue.enqueue("factory", payload(), now_ms=1_800_000_000_000)
    with pytest.raises(SimulationRefused, match="1 active job"):
        simulate(1, 10)
    with pytest.raises(CommandError, match="scratch or idle database"):
        call_command("simulate", "--seed", "1", "--steps", "10", stdout=StringIO())


def _complete_twice(monkeypatch):
    """A broken queue: every completion appends a second `job.completed`."""
    original = queue.complete

    def complete(job_id, result=None, *, fence, now_ms=None, known=None):
        written = original(job_id, result, fence=fence, now_ms=now_ms, known=known)
        if written.applied:
            store.append(
                f"jobs/{job_id}",
                {"type": "job.completed", "jobId": job_id, **fence.body(), "result": result},
                now_ms=now_ms,
            )
        return written

    monkeypatch.setattr(queue, "complete", complete)


def test_a_second_settlement_is_reported_with_its_step_and_seed(monkeypatch):
    _complete_twice(monkeypatch)
    report = simulate(3, 300)
    assert not report.ok
    assert report.violation.invariant == "settles_once"
    assert "then job.completed" in report.violation.message
    assert report.violation_step is not None and report.violation_step < 300
    assert report.trace[-1].startswith(f"{report.violation_step} ")
    assert report.replay == "python manage.py simulate --seed 3 --steps 300 --jobs 6"


def test_two_attempts_under_one_live_fence_are_caught(monkeypatch):
    # With one worker id for every process, without the promise claim, and with a
    # start_attempt that lets redelivered work under its own fence start again (a
    # start-fence heartbeat instead of stale_attempt), a duplicated execute delivery runs
    # twice under the same fence: what claim() and start_attempt's STALE prevent (D-5).
    monkeypatch.setattr(world.Process, "worker_id", lambda self, key, job_id: f"{self.group}:one")
    monkeypatch.setattr(promises, "claim", lambda promise_id, worker_id: True)
    monkeypatch.setattr(promises, "send_claim", lambda promise_id, worker_id: lambda: True)
    original = queue.start_attempt

    def start_attempt(job_id, *, worker_id, attempt, now_ms=None, **rest):
        start, job = original(job_id, worker_id=worker_id, attempt=attempt, now_ms=now_ms, **rest)
        if (
            start is queue.Start.STALE
            and job is not None
            and Fence(worker_id, attempt).check(job) is FenceOutcome.OK
        ):
            beat = queue.heartbeat(job_id, fence=Fence(worker_id, attempt), now_ms=now_ms)
            return queue.Start.LEASED, beat.job
        return start, job

    monkeypatch.setattr(queue, "start_attempt", start_attempt)
    report = simulate(4, 150)
    assert report.violation is not None and report.violation.invariant == "one_live_fence"
    assert report.violation_action == "deliver_execute"


def test_a_runtime_call_that_reads_the_wall_clock_is_caught(monkeypatch):
    original = queue.enqueue
    monkeypatch.setattr(
        queue,
        "enqueue",
        lambda agent_id, body, *, now_ms=None, **options: original(agent_id, body, **options),
    )
    report = simulate(1, 50)
    assert report.violation is not None and report.violation.invariant == "virtual_time"
    assert report.violation_action in ("enqueue", "enqueue_undispatched")


def test_a_read_model_that_drifts_from_its_receipts_is_caught(monkeypatch):
    original = projector.row_for

    def row_for(state):
        row = original(state)
        return {**row, "lease_until": None} if state.status == "running" else row

    monkeypatch.setattr(projector, "row_for", row_for)
    report = simulate(1, 300)
    assert report.violation is not None and report.violation.invariant == "read_model"
    assert "lease_until" in report.violation.message


def test_a_job_nothing_redrives_fails_liveness(monkeypatch):
    monkeypatch.setattr(recovery, "redrive_queued", lambda **kwargs: loops.Report("queued_redrive"))
    report = simulate(1, 300)
    assert report.violation is not None and report.violation.invariant == "liveness"
    assert "never settled" in report.violation.message
    assert report.violation_action == "liveness.final"


def run_command(*args):
    out = StringIO()
    call_command("simulate", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_command_prints_a_summary():
    out = run_command("--seed", "2", "--steps", "40", "--jobs", "3")
    lines = out.splitlines()
    assert lines[0] == "simulate seed=2 steps=40 jobs=3: ok"
    assert any(line.strip().startswith("jobs: ") for line in lines)
    assert "replay:" not in out


def test_command_json_report():
    report = json.loads(run_command("--seed", "2", "--steps", "40", "--json", "--trace"))
    assert report["ok"] and report["violation"] is None
    assert report["stepsRun"] == 40 and len(report["trace"]) >= 40
    assert report["replay"] == "python manage.py simulate --seed 2 --steps 40 --jobs 6"


def test_command_exits_non_zero_and_prints_the_replay_line(monkeypatch):
    _complete_twice(monkeypatch)
    out = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("simulate", "--seed", "3", "--steps", "300", stdout=out, stderr=StringIO())
    assert raised.value.returncode == 1
    replay = "replay: python manage.py simulate --seed 3 --steps 300 --jobs 6"
    assert replay in str(raised.value)
    text = out.getvalue()
    assert "simulate seed=3 steps=300 jobs=6: VIOLATION" in text
    assert "violation: settles_once" in text and text.rstrip().endswith(replay)


def test_command_json_on_a_violation_still_prints_the_replay_line(monkeypatch):
    _complete_twice(monkeypatch)
    out = StringIO()
    with pytest.raises(CommandError):
        call_command(
            "simulate", "--seed", "3", "--steps", "300", "--json", stdout=out, stderr=StringIO()
        )
    body, replay = out.getvalue().rstrip().rsplit("\n", 1)
    assert json.loads(body)["violation"]["invariant"] == "settles_once"
    assert replay == "replay: python manage.py simulate --seed 3 --steps 300 --jobs 6"


def test_command_refuses_bad_arguments():
    with pytest.raises(CommandError, match="--jobs: must be at least 1, got 0"):
        run_command("--seed", "1", "--steps", "10", "--jobs", "0")
    with pytest.raises(CommandError, match="--steps: must be at least 0"):
        run_command("--seed", "1", "--steps", "-5")
