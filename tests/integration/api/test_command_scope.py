"""Q-5: payloads that carry shell commands need the `factory:commands` scope, on every
enqueue door (one job, a batch); without it the answer is 403 `missing_scope` naming the
scope, and nothing is written."""

from __future__ import annotations

import pytest

from access import tokens
from jobs.core.shell_commands import COMMANDS_SCOPE, command_paths
from tests.integration.api.conftest import payload, written

pytestmark = pytest.mark.django_db
WRITER = ["jobs:write", "jobs:read"]

CARRIERS = [
    pytest.param(
        "codex", payload("factory.task.run", objectiveId="o", command="id"), id="task-command"
    ),
    pytest.param(
        "factory",
        payload("factory.dispatch", tasks=[{"title": "t", "command": "cat ../../secret.key"}]),
        id="create-tasks",
    ),
    pytest.param(
        "factory",
        payload("factory.dispatch", objective={"title": "x", "checks": ["make test"]}),
        id="wrapped-checks",
    ),
    pytest.param(
        "factory",
        payload("factory.dispatch", action="react", objectiveId="o", tasks=[{"command": "id"}]),
        id="react-tasks",
    ),
    pytest.param("factory", payload("factory.run", title="x", publish="git push"), id="publish"),
    pytest.param(
        "factory", payload("factory.run", title="x", policy={"network": True}), id="network"
    ),
]


def test_the_commands_scope_is_a_known_scope_of_its_own():
    assert COMMANDS_SCOPE == "factory:commands" and COMMANDS_SCOPE in tokens.SCOPES
    assert tokens.parse_scopes(["jobs:write"]) == ["jobs:write"]


@pytest.mark.parametrize(("agent", "body"), CARRIERS)
def test_a_command_payload_without_the_scope_is_403_missing_scope(api_for, agent, body):
    before = written()
    status, out = api_for("org-writer", org="org-1", scopes=WRITER).post(
        f"/agents/{agent}/jobs", {"payload": body}
    )
    assert status == 403, out
    assert out["ok"] is False and out["error"] == "missing_scope"
    assert "factory:commands" in out["detail"]
    assert written() == before


@pytest.mark.parametrize(("agent", "body"), CARRIERS)
def test_a_command_payload_with_the_scope_is_accepted(api_for, agent, body):
    status, out = api_for("runner", org="org-1", scopes=[*WRITER, COMMANDS_SCOPE]).post(
        f"/agents/{agent}/jobs", {"payload": body}
    )
    assert status == 202, out


def test_a_payload_without_commands_needs_no_commands_scope(api_for):
    body = payload("factory.dispatch", title="x", tasks=[{"title": "t", "prompt": "fix it"}])
    status, out = api_for("writer", org="org-1", scopes=WRITER).post(
        "/agents/factory/jobs", {"payload": body}
    )
    assert status == 202, out


def test_a_batch_refuses_each_command_item_without_the_scope(api_for):
    before = written()
    status, out = api_for("writer", scopes=WRITER).post(
        "/agents/codex/jobs/batch",
        {
            "jobs": [
                {"payload": payload("factory.task.run", objectiveId="o", command="id")},
                {"payload": payload(prompt="no command")},
            ]
        },
    )
    assert status == 202 and (out["enqueued"], out["refused"]) == (1, 1)
    assert out["results"][0]["error"] == "missing_scope"
    assert "factory:commands" in out["results"][0]["detail"]
    assert written()[0] == before[0] + 1  # the job without a command only


def test_command_paths_name_every_carrier_and_nothing_else():
    assert command_paths({"kind": "factory.run", "prompt": "hi", "policy": {}}) == []
    assert command_paths(
        {"objective": {"tasks": [{"prompt": "p"}, {"command": "x"}], "checks": []}}
    ) == ["payload.objective.tasks[1].command"]
    assert command_paths("not a dict") == []
