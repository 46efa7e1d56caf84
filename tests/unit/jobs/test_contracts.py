"""Kinds, payload validation, the contract table and routing (K-1 .. K-5)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobs.core import contracts
from jobs.core.contracts import (
    BUILTIN_AGENT_IDS,
    CONTRACTS,
    KINDS,
    ContractError,
    KindContract,
    contract_for,
    contract_group,
    contracts_table,
    routed_group,
    validate_payload,
)

AUTH = {"userId": "u-1", "organizationId": "org-1"}
NINE = (
    "factory.dispatch",
    "factory.run",
    "factory.integration.publish",
    "factory.integration.validate",
    "factory.objective.audit",
    "factory.objective.control",
    "factory.objective.watchdog",
    "factory.task.monitor",
    "factory.task.run",
)


def test_there_are_exactly_the_nine_kinds_in_spec_order() -> None:
    """K-1."""
    assert KINDS == NINE
    assert set(CONTRACTS) == set(NINE)


# --- validate_payload (K-1, K-2) -------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "code", "message"),
    [
        (["factory.run"], "payload_not_object", "payload must be a JSON object, got array"),
        ("factory.run", "payload_not_object", "payload must be a JSON object, got string"),
        (None, "payload_not_object", "payload must be a JSON object, got null"),
        (3, "payload_not_object", "payload must be a JSON object, got number"),
        (
            {"kind": "factory.nope", "authContext": AUTH},
            "unknown_kind",
            "unknown payload kind 'factory.nope'; expected one of: " + ", ".join(NINE),
        ),
        ({"authContext": AUTH}, "unknown_kind", "payload has no kind; expected one of: "),
        ({"kind": 5}, "unknown_kind", "unknown payload kind 5"),
        (
            {"kind": "factory.run"},
            "auth_context_required",
            "payload.authContext with userId and organizationId is required for kind factory.run",
        ),
        (
            {"kind": "factory.run", "authContext": None},
            "auth_context_required",
            "is required for kind factory.run",
        ),
        (
            {"kind": "factory.run", "authContext": "u-1"},
            "auth_context_required",
            "payload.authContext must be a JSON object, got string",
        ),
        (
            {"kind": "factory.task.run", "authContext": {"organizationId": "org-1"}},
            "auth_context_required",
            "payload.authContext.userId must be a non-empty string for kind factory.task.run",
        ),
        (
            {"kind": "factory.task.run", "authContext": {"userId": "", "organizationId": "o"}},
            "auth_context_required",
            "payload.authContext.userId must be a non-empty string",
        ),
        (
            {"kind": "factory.dispatch", "authContext": {"userId": "u-1"}},
            "auth_context_required",
            "payload.authContext.organizationId must be a non-empty string",
        ),
        (
            {"kind": "factory.dispatch", "authContext": {"userId": "u", "organizationId": 7}},
            "auth_context_required",
            "payload.authContext.organizationId must be a non-empty string",
        ),
        (
            {"kind": "factory.run", "authContext": {**AUTH, "workspaceId": 5}},
            "auth_context_required",
            "payload.authContext.workspaceId must be a string when present, got number",
        ),
        (
            {"kind": "factory.run", "authContext": {**AUTH, "source": ["cli"]}},
            "auth_context_required",
            "payload.authContext.source must be a string when present, got array",
        ),
        (
            {"kind": "factory.objective.watchdog", "authContext": {"userId": "u"}},
            "auth_context_required",
            "payload.authContext.organizationId must be a non-empty string",
        ),
    ],
)
def test_rejected_payload_carries_a_code_and_a_sentence(
    payload: Any, code: str, message: str
) -> None:
    """K-1 / K-2 / A-1: rejected before anything is written."""
    with pytest.raises(ContractError) as err:
        validate_payload(payload)
    assert err.value.code == code
    assert message in str(err.value)
    assert err.value.message == str(err.value)


@pytest.mark.parametrize(
    "payload",
    [{"kind": kind, "authContext": AUTH} for kind in NINE]
    + [
        {
            "kind": "factory.run",
            "authContext": {
                **AUTH,
                "workspaceId": "ws",
                "receiptConnectGatewayUrl": "https://gw",
                "sessionId": "s",
                "source": "",
                "extra": {"kept": True},
            },
        },
        {"kind": "factory.run", "authContext": {**AUTH, "workspaceId": None}},
        {"kind": "factory.objective.watchdog"},
        {"kind": "factory.objective.watchdog", "authContext": None},
    ],
)
def test_accepted_payload_is_returned_unchanged(payload: dict[str, Any]) -> None:
    """K-2: every kind but the watchdog needs userId and organizationId."""
    assert validate_payload(payload) is payload


def test_contract_error_is_a_value_error_with_api_status_400() -> None:
    error = ContractError("unknown_kind", "unknown payload kind 'x'")
    assert isinstance(error, ValueError)
    assert (error.code, error.status, str(error)) == (
        "unknown_kind",
        400,
        "unknown payload kind 'x'",
    )


# --- the K-3 table -------------------------------------------------------------------

# Copied from SPEC K-3, column for column ("-" is None).
_SPEC_TABLE = [
    ("factory.dispatch", "control", None, False, False, False, False, False),
    ("factory.run", "chat", "run", False, False, False, True, False),
    ("factory.integration.publish", "codex", None, False, True, True, True, False),
    ("factory.integration.validate", "codex", None, False, True, True, True, False),
    ("factory.objective.audit", "control", None, False, True, False, False, False),
    ("factory.objective.control", "control", "objective-control", False, True, False, False, True),
    ("factory.objective.watchdog", "control", None, False, False, False, False, False),
    ("factory.task.monitor", "control", None, False, True, False, True, False),
    ("factory.task.run", "codex", None, True, True, True, True, False),
]


@pytest.mark.parametrize("row", _SPEC_TABLE, ids=[r[0] for r in _SPEC_TABLE])
def test_kind_contract_matches_the_spec_table(row: tuple[Any, ...]) -> None:
    """K-3."""
    kind, group, workflow, activity, scoped, reconcile, live, audit = row
    assert contract_for(kind) == KindContract(
        kind=kind,
        worker_group=group,
        durable_workflow=workflow,
        durable_activity=activity,
        objective_scoped=scoped,
        reconcile_on_terminal_or_expired_lease=reconcile,
        live_execution=live,
        terminal_objective_audit=audit,
        auth_context_required=kind != "factory.objective.watchdog",  # K-2
    )


def test_contracts_table_is_json_rows_in_kind_order_with_camel_case_columns() -> None:
    """K-3: one table in code, shown in the admin and the API."""
    table = contracts_table()
    assert json.loads(json.dumps(table)) == table
    assert [row["kind"] for row in table if row["builtIn"]] == list(NINE)
    assert list(table[5]) == [
        "kind",
        "workerGroup",
        "durableWorkflow",
        "durableActivity",
        "objectiveScoped",
        "reconcileOnTerminalOrExpiredLease",
        "liveExecution",
        "terminalObjectiveAudit",
        "authContextRequired",
        "builtIn",
    ]
    assert table[5]["durableWorkflow"] == "objective-control"
    assert table[5]["terminalObjectiveAudit"] is True


def test_contract_table_cannot_be_changed_at_runtime() -> None:
    with pytest.raises(TypeError):
        CONTRACTS["factory.run"] = CONTRACTS["factory.dispatch"]  # type: ignore[index]


# --- agents and routing (K-4, K-5) ---------------------------------------------------


def test_builtin_agent_ids_are_exactly_the_four() -> None:
    """K-4."""
    assert BUILTIN_AGENT_IDS == ("factory", "factory-control", "factory-monitor", "codex")


@pytest.mark.parametrize(
    ("agent_id", "kind", "group"),
    [
        ("codex", "factory.task.run", "codex"),
        ("codex", "factory.dispatch", "codex"),  # agent first
        ("codex", None, "codex"),
        ("factory", "factory.integration.publish", "codex"),  # then kind prefix
        ("factory-control", "factory.integration.validate", "codex"),
        ("somebody", "factory.integration.anything", "codex"),
        ("factory-control", "factory.objective.control", "control"),
        ("factory-control", None, "control"),
        ("factory", "factory.dispatch", "chat"),  # contract says control (K-5 example)
        ("factory", "factory.run", "chat"),
        ("factory-monitor", "factory.task.monitor", "chat"),
        ("unknown-agent", "factory.task.run", "chat"),
        ("unknown-agent", None, "chat"),
        ("factory", "factory.integrationX", "chat"),  # prefix includes the dot
    ],
)
def test_routing_is_agent_first_then_kind(agent_id: str, kind: str | None, group: str) -> None:
    """K-5."""
    assert routed_group(agent_id, kind) == group


@pytest.mark.parametrize(
    ("kind", "group"),
    [
        ("factory.dispatch", "control"),
        ("factory.run", "chat"),
        ("factory.task.run", "codex"),
        ("factory.nope", None),
        (None, None),
    ],
)
def test_contract_group_is_the_table_group_or_none(kind: str | None, group: str | None) -> None:
    assert contract_group(kind) == group


def test_dispatch_on_agent_factory_is_a_visible_group_mismatch() -> None:
    """K-5: the job detail flags contractGroup != routedGroup."""
    kind = "factory.dispatch"
    assert (contract_group(kind), routed_group("factory", kind)) == ("control", "chat")


# ---- a deployment's own kinds (P-6) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "options", "said"),
    [
        ("factory.mine", {}, "reserved"),
        ("factory.run", {}, "reserved"),
        ("Acme.Report", {}, "lowercase"),
        ("acme report", {}, "lowercase"),
        ("acme..report", {}, "lowercase"),
        ("a" * 101, {}, "at most 100"),
        # a group's name is checked here; whether it is declared, at enqueue (issue 33 item 5)
        ("acme.report", {"worker_group": "driver"}, "reserved"),
        ("acme.report", {"worker_group": "GPU farm"}, "lowercase"),
        ("acme.report", {"worker_group": "worker-gpu"}, "reserved"),
    ],
)
def test_register_kind_refuses_bad_names_and_groups(kind, options, said):
    with pytest.raises(ValueError, match=said):
        contracts.register_kind(kind, **options)
    assert contracts.contract_for(kind) is None or kind == "factory.run"


def test_register_kind_is_idempotent_but_never_redefines():
    try:
        first = contracts.register_kind("acme.unit", worker_group="control")
        assert contracts.register_kind("acme.unit", worker_group="control") == first
        with pytest.raises(ValueError, match="another contract"):
            contracts.register_kind("acme.unit", worker_group="chat")
        assert contracts.routed_group("someone", "acme.unit") == "control"
        assert contracts.validate_payload({"kind": "acme.unit"})
    finally:
        contracts.unregister_kind("acme.unit")
    with pytest.raises(contracts.ContractError) as gone:
        contracts.validate_payload({"kind": "acme.unit"})
    assert gone.value.code == "unknown_kind"


def test_a_deployments_kind_needs_an_auth_context_only_when_it_asks_for_one():
    """Issue 33 item 1: a plain task carries no authContext; the chat product's may ask."""
    try:
        plain = contracts.register_kind("acme.plain")
        chat = contracts.register_kind("acme.chat", auth_context_required=True)
        assert plain.auth_context_required is False and chat.auth_context_required is True
        assert contracts.validate_payload({"kind": "acme.plain"})
        with pytest.raises(contracts.ContractError) as refused:
            contracts.validate_payload({"kind": "acme.chat"})
        assert refused.value.code == "auth_context_required"
        assert contracts.validate_payload(
            {"kind": "acme.chat", "authContext": {"userId": "u", "organizationId": "o"}}
        )
        # the built-in kinds keep their contracts
        with pytest.raises(contracts.ContractError) as built_in:
            contracts.validate_payload({"kind": "factory.run"})
        assert built_in.value.code == "auth_context_required"
    finally:
        contracts.unregister_kind("acme.plain")
        contracts.unregister_kind("acme.chat")


def test_without_factory_its_kinds_are_neither_offered_nor_accepted():
    """Issue 33 item 1: a project without `objectives` sees only its own kinds."""
    task_kind = None
    try:
        contracts.register_kind("acme.plain")
        contracts.offer_factory_kinds(False)
        own = {"acme.plain", "django.task"}  # the task framework's kind may be registered
        assert "acme.plain" in contracts.all_kinds() and set(contracts.all_kinds()) <= own
        assert {row["kind"] for row in contracts.contracts_table()} == set(contracts.all_kinds())
        assert contracts.contract_for("factory.run") is None
        with pytest.raises(contracts.ContractError) as refused:
            contracts.validate_payload(
                {"kind": "factory.run", "authContext": {"userId": "u", "organizationId": "o"}}
            )
        assert refused.value.code == "unknown_kind"
        assert "expected one of: acme.plain" in refused.value.message
        assert "factory." not in refused.value.message.partition("expected")[2]
        contracts.unregister_kind("acme.plain")
        task_kind = contracts.contract_for("django.task")
        contracts.unregister_kind("django.task")
        with pytest.raises(contracts.ContractError, match="no kind is registered"):
            contracts.validate_payload({"kind": "acme.plain"})
    finally:
        contracts.offer_factory_kinds(True)
        contracts.unregister_kind("acme.plain")
        if task_kind is not None:
            contracts.register_kind(
                "django.task",
                worker_group=task_kind.worker_group,
                auth_context_required=task_kind.auth_context_required,
            )
    assert contracts.all_kinds()[: len(contracts.KINDS)] == contracts.KINDS


@pytest.mark.parametrize(
    ("agent", "kind", "by_design"),
    [
        ("factory", "factory.dispatch", True),  # chat, contract control: the built-in routing
        ("factory-control", "factory.objective.control", True),
        ("acme", "factory.dispatch", False),  # a deployment's agent carrying a built-in kind
        ("factory", "acme.unknown", False),
        ("factory", None, False),
    ],
)
def test_routing_by_design_is_a_builtin_agent_with_a_builtin_kind(agent, kind, by_design):
    assert contracts.routing_by_design(agent, kind) is by_design


# ---- a deployment's own worker groups (issue 33 item 5) -------------------------------------


def test_a_kind_may_name_a_group_the_deployment_declares():
    try:
        contract = contracts.register_kind("acme.mail", worker_group="emails")
        assert contract.worker_group == "emails"
        assert contracts.routed_group("mailer", "acme.mail") == "emails"
        assert contracts.contract_group("acme.mail") == "emails"
    finally:
        contracts.unregister_kind("acme.mail")


@pytest.mark.parametrize(
    ("agent", "kind", "queue", "group"),
    [
        ("mailer", "acme.any", "emails", "emails"),  # the enqueue's choice first
        ("codex", "factory.task.run", None, "codex"),
        ("mailer", "acme.any", None, "chat"),
    ],
)
def test_an_enqueues_queue_comes_before_agent_and_kind(agent, kind, queue, group):
    assert contracts.routed_group(agent, kind, queue) == group


@pytest.mark.parametrize(
    ("agent", "kind", "fixed"),
    [
        ("factory", "acme.any", True),  # Factory's agents
        ("codex", None, True),
        ("mailer", "factory.run", True),  # Factory's kinds
        ("mailer", "acme.any", False),
        ("mailer", None, False),
    ],
)
def test_factorys_own_work_keeps_its_route(agent, kind, fixed):
    assert contracts.fixed_route(agent, kind) is fixed
