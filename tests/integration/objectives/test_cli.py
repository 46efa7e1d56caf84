"""`manage.py objectives` (O-11, P-4): the developer CLI goes through the same services
as the API and the admin; `--json` is the detail the API returns."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from objectives import selectors
from objectives.core import vocabulary as v
from tests.integration.objectives.conftest import diamond, drain


def run(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("objectives", *args, stdout=out)
    return out.getvalue()


def test_create_plan_show_react_and_cancel_from_the_cli(factory, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(diamond()))
    created = json.loads(
        run(
            "create",
            "--title",
            "Ship it",
            "--tasks-file",
            str(plan),
            "--org",
            "org-9",
            "--id",
            "obj-cli-1",
            "--json",
            "--by",
            "cli:ann",
        )
    )
    assert created["created"] is True and created["objective"]["id"] == "obj-cli-1"
    state = selectors.get("obj-cli-1")
    assert state.organization_id == "org-9" and state.title == "Ship it"
    before = run("show", "obj-cli-1")
    assert "tasks given, not planned yet" in before and "    d  " in before

    drain(skip=frozenset({v.KIND_TASK_RUN, v.KIND_MONITOR}))  # planned; task a dispatched, queued
    shown = run("show", "obj-cli-1")
    lines = [line.strip() for line in shown.splitlines()]
    assert lines[0] == "obj-cli-1  Ship it"
    graph = [line for line in shown.splitlines() if line.startswith("    ")]
    assert [g.split()[0] for g in graph] == ["a", "b", "c", "d"]
    assert graph[3].startswith("        d") and "(after b, c)" in graph[3]

    board = run("list")
    assert "obj-cli-1" in board and "Ship it" in board
    listed = json.loads(run("list", "--json", "--org", "org-9"))
    ids = [o["id"] for section in listed["board"] for o in section["objectives"]]
    assert ids == ["obj-cli-1"]
    assert json.loads(run("list", "--json", "--org", "org-other"))["board"][0]["objectives"] == []

    reacted = json.loads(run("react", "obj-cli-1", "--message", "go on", "--json"))
    assert reacted["ok"] is True
    assert any(r.body.get("message") == "go on" for r in _receipts("obj-cli-1"))

    canceled = json.loads(run("cancel", "obj-cli-1", "--reason", "not needed", "--json"))
    assert canceled["objective"]["status"] == "canceled"
    assert [r.body.get("by") for r in _receipts("obj-cli-1") if r.type == "objective.canceled"] == [
        _by()
    ]


def test_without_a_user_name_the_cli_acts_as_cli_unknown(factory, monkeypatch):
    """A container may run the command under a uid with no name: it still acts."""

    def nameless() -> str:
        raise KeyError("getpwuid(): uid not found: 1234")

    monkeypatch.setattr("getpass.getuser", nameless)
    created = json.loads(run("create", "--title", "Nameless", "--id", "obj-cli-2", "--json"))
    assert created["objective"]["id"] == "obj-cli-2"
    run("cancel", "obj-cli-2", "--reason", "not needed", "--json")
    canceled = [r.body.get("by") for r in _receipts("obj-cli-2") if r.type == "objective.canceled"]
    assert canceled == ["cli:unknown"]


def _by() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


def _receipts(objective_id: str):
    from objectives.core.vocabulary import objective_stream
    from receipts import store

    return store.read(objective_stream(objective_id))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("show", "obj-missing"), "objective_not_found"),
        (("create",), "--title or --prompt"),
        (("create", "--title", "x", "--task", "{nope"), "--task is not valid JSON"),
        (("create", "--title", "x", "--tasks-file", "/nonexistent/plan.json"), "cannot read"),
        (
            (
                "create",
                "--title",
                "x",
                "--task",
                '{"id": "a", "dependsOn": ["zz"]}',
                "--id",
                "bad id!",
            ),
            "invalid_objective_id",
        ),
    ],
)
def test_cli_errors_name_the_problem_and_write_nothing(factory, args, said):
    with pytest.raises(CommandError, match=said.replace("(", r"\(")):
        run(*args)
    from objectives.models import ObjectiveSummary

    assert not ObjectiveSummary.objects.exists()
