"""O-4 policy defaults and validation; O-11 create input."""

from __future__ import annotations

import pytest

from objectives.core.intake import IntakeError, read_checks, read_input
from objectives.core.policy import DEFAULT_POLICY, PolicyError, resolve_policy


def test_defaults_are_the_specified_ones():
    p = resolve_policy(None, mode="delivery")
    assert (
        p.max_active_tasks,
        p.max_task_runs,
        p.max_candidate_passes_per_task,
        p.max_objective_minutes,
        p.max_dispatches_per_react,
        p.auto_promote,
    ) == (5, 50, 4, 1440, 10, True)
    assert p == DEFAULT_POLICY


def test_investigation_never_auto_promotes():
    assert resolve_policy({"autoPromote": True}, mode="investigation").auto_promote is False


def test_client_values_override_within_range():
    p = resolve_policy({"maxActiveTasks": 2, "autoPromote": False}, mode="delivery")
    assert (p.max_active_tasks, p.auto_promote) == (2, False)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"maxActiveTask": 2},
            "unknown policy key(s) maxActiveTask; known: maxActiveTasks, "
            "maxTaskRuns, maxCandidatePassesPerTask, maxObjectiveMinutes, "
            "maxDispatchesPerReact, autoPromote, network",
        ),
        ({"maxActiveTasks": 0}, "policy.maxActiveTasks must be an integer in 1..100, got 0"),
        ({"maxTaskRuns": True}, "policy.maxTaskRuns must be an integer in 1..10000, got True"),
        ({"autoPromote": "yes"}, "policy.autoPromote must be true or false, got 'yes'"),
        ([], "policy must be an object, got list"),
    ],
)
def test_bad_policies_are_refused_naming_the_key(raw, message):
    with pytest.raises(PolicyError) as error:
        resolve_policy(raw, mode="delivery")
    assert str(error.value) == message


def test_input_takes_the_title_from_the_prompt_when_missing():
    spec = read_input({"prompt": "Fix the login page\nIt breaks on Safari"})
    assert (spec.title, spec.mode, spec.severity) == ("Fix the login page", "delivery", 3)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "an objective needs a title or a prompt"),
        ({"title": "x", "mode": "fast"}, "mode must be one of delivery, investigation, got 'fast'"),
        ({"title": "x", "severity": 9}, "severity must be an integer in 1..5, got 9"),
        ({"title": "x", "tasks": {}}, "tasks must be a list, got dict"),
        ({"title": "x", "checks": [3]}, "check-1 must be a command string or an object"),
    ],
)
def test_bad_input_is_refused(raw, message):
    with pytest.raises(IntakeError) as error:
        read_input(raw)
    assert str(error.value) == message


def test_checks_accept_strings_and_objects():
    checks = read_checks(["make test", {"name": "lint", "command": "ruff .", "timeoutMs": 5000}])
    assert [(c.name, c.command, c.timeout_ms) for c in checks] == [
        ("check-1", "make test", None),
        ("lint", "ruff .", 5000),
    ]
