"""O-3 / O-5: plan validation messages, ready sets and order."""

from __future__ import annotations

import pytest

from objectives.core.dag import (
    PlanError,
    depths,
    find_cycle,
    ready_set,
    topological_order,
    validate_plan,
)


def task(task_id: str, *deps: str, **extra):
    return {
        "id": task_id,
        "title": task_id.upper(),
        "command": "true",
        "dependsOn": list(deps),
        **extra,
    }


def test_unknown_dependency_is_rejected_naming_both_ids():
    with pytest.raises(PlanError) as error:
        validate_plan([task("a"), task("b", "a", "x")])
    assert str(error.value) == "plan rejected: task 'b' depends on unknown task 'x'"


def test_cycle_is_rejected_naming_the_cycle():
    with pytest.raises(PlanError) as error:
        validate_plan([task("a", "c"), task("b", "a"), task("c", "b"), task("d")])
    assert str(error.value) == "plan rejected: dependency cycle a -> c -> b -> a"


def test_self_dependency_is_a_cycle():
    with pytest.raises(PlanError) as error:
        validate_plan([task("a"), task("b", "b")])
    assert str(error.value) == "plan rejected: dependency cycle b -> b"


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ([], "plan rejected: no tasks"),
        ({"tasks": []}, "plan rejected: tasks must be a list, got dict"),
        ([task("a"), task("a")], "plan rejected: duplicate task id 'a'"),
        ([{"id": "a", "title": "A"}], "plan rejected: task 'a' needs a command or a prompt"),
        (
            [{"id": "a", "command": "x"}],
            "plan rejected: task 'a': title must be a non-empty string of at most 300 characters",
        ),
        (
            [{"id": "a b", "title": "A", "command": "x"}],
            "plan rejected: task 1: id 'a b' must be 1..40 characters of letters, digits, '.', '_' "
            "or '-' (starting with a letter or digit)",
        ),
        (
            [{"title": "A", "command": "x", "deps": []}],
            "plan rejected: task 1 has unknown key(s) deps",
        ),
        (
            [task("a", timeoutMs=0)],
            "plan rejected: task 'a': timeoutMs must be an integer in 1..86400000",
        ),
    ],
)
def test_malformed_plans_are_rejected_with_the_reason(plan, message):
    with pytest.raises(PlanError) as error:
        validate_plan(plan)
    assert str(error.value) == message


def test_ids_default_to_their_position_and_specs_are_normalised():
    specs = validate_plan(
        [
            {"title": "first", "prompt": "look"},
            {"title": " second ", "command": "ls", "dependsOn": ["t1", "t1"]},
        ]
    )
    assert [(s.id, s.title, s.depends_on) for s in specs] == [
        ("t1", "first", ()),
        ("t2", "second", ("t1",)),
    ]


def test_topological_order_and_depths_follow_the_plan_order_on_ties():
    graph = {"d": ("b", "c"), "a": (), "c": ("a",), "b": ("a",)}
    assert topological_order(graph) == ["a", "c", "b", "d"]
    assert depths(graph) == {"a": 0, "b": 1, "c": 1, "d": 2}
    assert find_cycle(graph) is None


def test_ready_set_needs_every_dependency_done():
    graph = {"a": (), "b": ("a",), "c": ("a", "b")}
    done = frozenset({"approved", "integrated"})
    assert ready_set(graph, {"a": "pending", "b": "pending", "c": "pending"}, done) == ["a"]
    assert ready_set(graph, {"a": "approved", "b": "pending", "c": "pending"}, done) == ["b"]
    assert ready_set(graph, {"a": "approved", "b": "running", "c": "pending"}, done) == []
    assert ready_set(graph, {"a": "integrated", "b": "approved", "c": "pending"}, done) == ["c"]
