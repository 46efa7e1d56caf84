"""D-9: a runworker command line names its django-q2 cluster before Django starts, so the
command does not re-execute itself to set it."""

from __future__ import annotations

import pytest

from jobs.runtime.roles import preset_cluster_name


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["manage.py", "runworker", "--role", "chat"], {}, "worker-chat"),
        (["receipt", "runworker", "--role=codex"], {}, "worker-codex"),
        (["manage.py", "runworker", "--role", "driver"], {}, "driver"),
        (["manage.py", "runworker", "--role", "worker-control"], {}, "worker-control"),
        (["manage.py", "runworker"], {"RECEIPT_PROCESS_ROLE": "chat"}, "worker-chat"),
        # the command line wins over the environment, as in the command itself
        (
            ["manage.py", "runworker", "--role", "codex"],
            {"RECEIPT_PROCESS_ROLE": "chat"},
            "worker-codex",
        ),
    ],
)
def test_a_runworker_command_line_names_its_cluster(argv, environ, expected):
    preset_cluster_name(argv, environ)
    assert environ["Q_CLUSTER_NAME"] == expected


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["manage.py", "runworker", "--role", "nonsense"], {}),  # the command reports it
        (["manage.py", "runworker"], {}),  # --role is required: the command says so
        (["manage.py", "migrate", "--role", "chat"], {}),  # not a worker
        (["manage.py", "runworker", "--role", "chat"], {"Q_CLUSTER_NAME": "driver"}),
    ],
)
def test_anything_else_is_left_to_the_command(argv, environ):
    before = dict(environ)
    preset_cluster_name(argv, environ)
    assert environ == before
