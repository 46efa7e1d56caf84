"""D-9: a runworker command line names its django-q2 cluster before Django starts, so the
command does not re-execute itself to set it."""

from __future__ import annotations

import pytest

from jobs.core.groups import GroupSettings
from jobs.core.timing import TimingSettings
from jobs.runtime.roles import (
    UnknownRole,
    cluster_config,
    connection_budget,
    is_cluster,
    normalize_role,
    preset_cluster_name,
    role_names,
)


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


# ---- declared worker groups are roles too (issue 33 item 5) -------------------------------


def test_a_declared_group_in_the_environment_names_its_cluster_before_django_starts():
    environ = {"RECEIPT_WORKER_GROUPS": "emails:2"}
    preset_cluster_name(["manage.py", "runworker", "--role", "emails"], environ)
    assert environ["Q_CLUSTER_NAME"] == "worker-emails"
    environ = {"RECEIPT_WORKER_GROUPS": "emails:2"}
    preset_cluster_name(["manage.py", "runworker", "--role", "worker-emails"], environ)
    assert environ["Q_CLUSTER_NAME"] == "worker-emails"
    # not declared here (a settings block may declare it): left to the command
    environ = {"RECEIPT_WORKER_GROUPS": "bulk"}
    preset_cluster_name(["manage.py", "runworker", "--role", "emails"], environ)
    assert "Q_CLUSTER_NAME" not in environ


def test_only_existing_groups_are_roles_once_the_groups_are_known():
    known = ("chat", "control", "codex", "emails")
    assert normalize_role("emails", known) == normalize_role("worker-emails", known)
    assert normalize_role("chat", known) == "worker-chat"
    with pytest.raises(UnknownRole, match="unknown role 'reports'; expected one of driver, chat"):
        normalize_role("reports", known)
    with pytest.raises(UnknownRole):
        normalize_role("worker-driver", None)


def test_runworker_refuses_a_role_that_is_no_group_saying_where_groups_are_declared():
    from django.core.management.base import CommandError

    from jobs.management.commands.runworker import resolve_role

    assert resolve_role("emails", None, ("chat", "control", "codex", "emails")) == (
        "worker-emails",
        None,
    )
    with pytest.raises(CommandError) as caught:
        resolve_role("emails", None, ("chat", "control", "codex"))
    assert str(caught.value) == (
        "unknown role 'emails'; expected one of driver, chat, control, codex (or "
        "worker-<group>); to add a group, declare it in RECEIPT['worker_groups'] (or the "
        "RECEIPT_WORKER_GROUPS environment variable)"
    )


EMAILS = GroupSettings(name="emails", concurrency=6, lease_ms=2_000_000)
TIMING = TimingSettings(worker_groups=(EMAILS, GroupSettings(name="bulk")))


def test_the_cluster_configuration_has_a_cluster_per_declared_group():
    config = cluster_config(timing=TIMING, broker_url=None, poll_s=0.05)
    clusters = config["ALT_CLUSTERS"]
    assert list(clusters) == [
        "driver",
        "worker-chat",
        "worker-control",
        "worker-codex",
        "worker-emails",
        "worker-bulk",
    ]
    assert clusters["worker-emails"]["workers"] == 6 and clusters["worker-bulk"]["workers"] == 4
    # a task may run as long as the group's lease: django-q2 must not hand it out again
    assert clusters["worker-emails"]["timeout"] == 2_000 + 60
    assert clusters["worker-emails"]["retry"] > clusters["worker-emails"]["timeout"]
    # a worker's next task waits beside it where there are two workers or more
    assert [clusters[c]["queue_limit"] for c in ("driver", "worker-codex", "worker-emails")] == [
        1,
        1,
        2,
    ]
    assert (
        clusters["worker-chat"]
        == cluster_config(timing=TimingSettings(), broker_url=None, poll_s=0.05)["ALT_CLUSTERS"][
            "worker-chat"
        ]
    )


def test_the_connection_budget_counts_every_group():
    """Each runworker: concurrency + 3; driver 1, chat 4, control 1, codex 1, emails 6, bulk 4."""
    assert connection_budget(TimingSettings()) == 4 + 7 + 4 + 4
    assert connection_budget(TIMING) == 4 + 7 + 4 + 4 + 9 + 7
    assert connection_budget(TIMING, runworkers_per_role=2) == 2 * (19 + 16)
    assert role_names(TIMING) == ("driver", "chat", "control", "codex", "emails", "bulk")
    assert is_cluster("worker-emails") and is_cluster("driver") and not is_cluster("api")
