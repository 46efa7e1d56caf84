"""Two runworkers per role under a SIGKILL campaign while objectives run (D-11, L-1, L-2).

Every role (driver, chat, control, codex) runs as two `runworker` processes. A seeded
random campaign kills one of them at a time, across every role, each time the system
has made progress since the last kill, and starts a replacement of the same role so the
work can finish. Each kill follows a new objective's creation (through
`factory.dispatch`), so objectives are being created, controlled and worked on all
through the campaign. Half of the kills take the whole process group, half the main pid only
(its cluster then dies with it). The seed is printed and named in every failure;
RECEIPT_TEST_SEED replays a campaign.

Afterwards: every objective completed, every task's command ran to its end, every job
settled at most once with its read model equal to its fold, and every chain of jobs and
objectives verifies with no drift in either read model.
"""

from __future__ import annotations

import functools
import io
import os
import random
import signal
from pathlib import Path

import pytest
from django.core.management import call_command

from jobs import selectors
from jobs.diagnosis import diagnosis
from jobs.models import Job
from objectives import selectors as objective_selectors
from objectives.core import vocabulary as v
from receipts import store
from receipts.models import Receipt
from tests.conftest import wait_for
from tests.runtime.helpers import assert_settled_once
from tests.runtime.test_factory import (  # noqa: F401
    ROLES,
    dispatch,
    factory,
    settled,
    start,
    until,
)

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]

PER_ROLE = 2
TASKS = ("a", "b", "c")
BUSY_WAIT_S = 3.0  # how long a kill waits for a victim in the middle of an attempt
TERMINAL = ("completed", "failed", "canceled")


def _waiting(objective_id: str) -> list[tuple]:
    """The objective's status, then each of its jobs not settled, with diagnosis's blockers."""
    state = objective_selectors.get(objective_id)
    open_jobs = Job.objects.filter(objective_id=objective_id).exclude(status__in=TERMINAL)
    return [
        (state and state.status, state and [(t.id, t.status) for t in state.tasks]),
        *(
            (job.id, job.status, job.worker_group, job.attempt, diagnosis(job.id)["blockers"])
            for job in open_jobs
        ),
    ]


def _tasks(began: Path, done: Path, prefix: str) -> list[dict]:
    """a, then b and c side by side: control passes between the steps."""
    deps: dict[str, list[str]] = {"a": [], "b": ["a"], "c": ["a"]}
    return [
        {
            "id": t,
            "title": t.upper(),
            "command": f"echo {prefix}{t} >> {began}; sleep 1; echo {prefix}{t} >> {done}",
            "dependsOn": deps[t],
        }
        for t in TASKS
    ]


def _settled_jobs() -> int:
    return Job.objects.filter(status__in=TERMINAL).count()


def _settled_since(last: int) -> int:
    """The settled jobs now if more than `last`, else 0."""
    settled = _settled_jobs()
    return settled if settled > last else 0


def _busy(stack, role: str, names: list[str]) -> list[str]:
    """Those of `names` holding an attempt within a few seconds (a kill mid-attempt is
    the interesting one); none for the driver, which holds no leases."""
    if role == "driver":
        return []

    def holding() -> list[str]:
        workers = [f"{w}:" for _, _, w in selectors.held_in_group(role, limit=100) if w]
        return [n for n in names if any(f":{stack.procs[n].pid}:" in w for w in workers)]

    try:
        return wait_for(holding, timeout=BUSY_WAIT_S, message="a busy runworker")
    except AssertionError:
        return []


def _kill(stack, name: str, whole_group: bool) -> None:
    proc = stack.procs[name]
    if whole_group:
        stack.kill(name)
    else:  # the main pid alone: its sentinel, workers and commands die with it
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_sigkills_across_roles_with_two_runworkers_each_lose_and_double_nothing(
    factory,  # noqa: F811
    tmp_path,
):
    seed = int(os.environ.get("RECEIPT_TEST_SEED") or random.SystemRandom().randrange(2**32))
    print(f"kill campaign seed={seed} (RECEIPT_TEST_SEED={seed} replays it)")
    rng = random.Random(seed)
    alive: dict[str, list[str]] = {}
    for role in ROLES:
        start(factory, role)  # named after the role
        alive[role] = [role]
        for n in range(2, PER_ROLE + 1):
            factory.start(role, name=f"{role}-{n}")
            alive[role].append(f"{role}-{n}")
    began, done = tmp_path / "began.log", tmp_path / "done.log"
    # every role at least once, in a random order, then two more anywhere
    victims = rng.sample(ROLES, len(ROLES)) + [rng.choice(ROLES) for _ in range(2)]
    creates: list[str] = []  # one new objective per kill (and one after): work is always
    campaign: list[str] = []  # starting, running and finishing when a process dies
    last = _settled_jobs()
    for round_no in range(len(victims) + 1):
        creates.append(
            dispatch(
                "create",
                title=f"Campaign {len(creates)}",
                tasks=_tasks(began, done, f"o{len(creates)}"),
                policy={"maxActiveTasks": 2, "maxCandidatePassesPerTask": 10},
            )
        )
        if round_no == len(victims):
            break
        role = victims[round_no]
        # a kill only once something settled since the last one: the campaign never
        # outruns the recovery it is testing
        last = wait_for(
            functools.partial(_settled_since, last),
            timeout=60,
            message=f"progress before killing a {role} (seed {seed}, so far {campaign})",
        )
        name = rng.choice(_busy(factory, role, alive[role]) or alive[role])
        whole_group = rng.random() < 0.5
        _kill(factory, name, whole_group)
        campaign.append(f"{name}{'' if whole_group else ' (main pid)'}")
        alive[role].remove(name)
        replacement = f"{role}-r{len(campaign)}"
        factory.start(role, name=replacement)
        alive[role].append(replacement)
    print("kills:", campaign)
    objectives = []
    for job_id in creates:
        job = settled(job_id, timeout=120)
        assert job.status == "completed", (seed, campaign, job.last_error)
        objectives.append(job.result["objectiveId"])
    for oid in objectives:
        try:
            state = until(oid, "completed", "blocked", "failed", timeout=120)
        except AssertionError as timed_out:  # say what it waits on, for the next reader
            raise AssertionError(
                f"{timed_out} (seed {seed}, {campaign}): {_waiting(oid)}"
            ) from None
        assert state.status == "completed", (seed, campaign, oid, state.blocked_reason)
        assert {t.status for t in state.tasks} == {"integrated"}, (seed, campaign, state.tasks)
    finished = done.read_text().split()
    reruns = len(began.read_text().split()) - len(finished)
    expired = Receipt.objects.filter(
        stream__startswith="jobs/", event_type="job.lease_expired"
    ).count()
    print(f"commands cut short: {reruns}, leases expired or released: {expired}")
    expected = sorted(f"o{i}{t}" for i in range(len(creates)) for t in TASKS)
    assert sorted(set(finished)) == expected, (seed, campaign, finished)
    jobs = list(Job.objects.values_list("id", flat=True))
    assert len(jobs) >= len(creates) * len(TASKS)
    for job_id in jobs:
        assert_settled_once(job_id)
    # every chain, as an operator checks them: a broken one fails the command
    call_command("receipts", "verify", "--strict", stdout=io.StringIO())
    for prefix in ("jobs/", v.OBJECTIVE_STREAM_PREFIX):
        report = store.replay(prefix, dry_run=True)
        assert report.checked and not report.refused and not report.drift, (
            seed,
            campaign,
            report.to_wire(),
        )
