"""A deployment's own worker groups (issue 33 item 5): names, settings and the two ways to
write a declaration, all refused with the group and the setting named."""

from __future__ import annotations

import pytest

from jobs.core import groups
from jobs.core.groups import GroupsError, GroupSettings


def test_the_compact_form_names_groups_and_optionally_their_concurrency():
    assert groups.parse(" emails:4 , reports,bulk-2_x ") == (
        GroupSettings(name="emails", concurrency=4),
        GroupSettings(name="reports"),
        GroupSettings(name="bulk-2_x"),
    )


def test_the_json_form_sets_leases_and_timeouts_in_declaration_order():
    declared = groups.parse(
        '{"reports": {"lease_ms": 60000, "execution_timeout_ms": 30000},'
        ' "emails": {"concurrency": 8}, "bulk": null, "tiny": 2}'
    )
    assert declared == (
        GroupSettings(name="reports", lease_ms=60_000, execution_timeout_ms=30_000),
        GroupSettings(name="emails", concurrency=8),
        GroupSettings(name="bulk"),
        GroupSettings(name="tiny", concurrency=2),
    )


def test_blank_declares_no_group():
    assert groups.parse("") == groups.parse("  ") == groups.parse(" , ") == ()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("chat", "'chat' is built in"),
        ("codex:2", "'codex' is built in"),
        ("driver", "'driver' is reserved"),
        ("api", "'api' is reserved"),
        ("worker-emails", "'worker-emails' is reserved"),
        ("Emails", "lowercase letters"),
        ("9lives", "starting with a letter"),
        ("e" * 33, "at most 32 characters"),
        ("emails:four", "concurrency must be an integer, got 'four'"),
        ("emails:0", "concurrency must be an integer from 1 to 256, got 0"),
        ("emails:300", "from 1 to 256, got 300"),
        ("emails,emails:2", "declares group 'emails' twice"),
        ('{"emails": {"lease": 1000}}', "unknown setting lease; expected concurrency"),
        ('{"emails": {"lease_ms": 10}}', "lease_ms must be an integer from 1000"),
        ('{"emails": {"lease_ms": true}}', "got True"),
        ('{"emails": "fast"}', "settings must be an object"),
        ('{"emails": 1, "emails": 2}', "'emails' appears twice"),
        ('{"emails": ', "not a valid JSON object"),
    ],
)
def test_a_bad_declaration_is_refused_saying_what_is_wrong(text, said):
    with pytest.raises(GroupsError, match=said.replace("(", r"\(")):
        groups.parse(text)


def test_a_mapping_is_declared_as_given():
    assert groups.from_mapping({"emails": {"concurrency": 3}, "slow": {"lease_ms": 5_000}}) == (
        GroupSettings(name="emails", concurrency=3),
        GroupSettings(name="slow", lease_ms=5_000),
    )
    with pytest.raises(GroupsError, match="must map group names"):
        groups.from_mapping(["emails"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "ok"),
    [("chat", True), ("emails", True), ("driver", False), ("worker-x", False), ("", False)],
)
def test_group_names_are_the_built_in_ones_and_any_a_deployment_may_declare(name, ok):
    assert groups.is_group_name(name) is ok


def test_a_declaration_is_shown_with_the_settings_it_sets():
    declared = groups.parse('{"emails": {"concurrency": 4, "lease_ms": 60000}, "bulk": {}}')
    assert groups.shown(declared) == "emails(concurrency=4, lease_ms=60000), bulk"
