"""Payload kinds, their contracts and routing (K-1 .. K-5).

This module owns the nine kinds, payload validation before anything is written, the
one kind-contract table shown in the admin and the API, and agent/kind routing to a
worker group. It must not know about handlers, storage or processes.

Decided where the spec is silent:

- `validate_payload` checks in order: object, kind, authContext, so the first problem
  is the one reported. A missing or non-string ``kind`` is ``unknown_kind`` too.
- ``authContext`` (K-2): ``userId`` and ``organizationId`` must be non-empty strings;
  ``workspaceId``, ``receiptConnectGatewayUrl``, ``sessionId`` and ``source`` must be
  strings when present (null counts as absent; empty strings are allowed). Other keys
  are left alone.
- ``factory.objective.watchdog`` needs no authContext; a null or absent one is fine, but
  one that is present is checked like any other, so a malformed one is never stored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

from jobs.core import flat_wire
from jobs.core.groups import BUILTIN_GROUPS, GroupsError, check_name
from jobs.core.retry_policy import RetryPolicy, register_retry_policy, unregister_retry_policy
from receipts.core.errors import AppError

# K-1: the nine kinds, in the spec's order.
Kind = Literal[
    "factory.dispatch",
    "factory.run",
    "factory.integration.publish",
    "factory.integration.validate",
    "factory.objective.audit",
    "factory.objective.control",
    "factory.objective.watchdog",
    "factory.task.monitor",
    "factory.task.run",
]
KINDS: Final[tuple[Kind, ...]] = get_args(Kind)
# K-2: the only kind that runs without an authContext.
AUTH_CONTEXT_OPTIONAL_KINDS: Final[frozenset[str]] = frozenset({"factory.objective.watchdog"})
AUTH_CONTEXT_REQUIRED_FIELDS: Final[tuple[str, ...]] = ("userId", "organizationId")
AUTH_CONTEXT_OPTIONAL_FIELDS: Final[tuple[str, ...]] = (
    "workspaceId",
    "receiptConnectGatewayUrl",
    "sessionId",
    "source",
)

# The built-in worker groups; a deployment declares more (`jobs.core.groups`), and a kind
# of its own or an enqueue's `queue` may name those.
WorkerGroup = Literal["chat", "control", "codex"]
WORKER_GROUPS: Final[tuple[WorkerGroup, ...]] = ("chat", "control", "codex")
assert WORKER_GROUPS == BUILTIN_GROUPS

# K-4: agent ids that ship with a handler.
BUILTIN_AGENT_IDS: Final[tuple[str, ...]] = (
    "factory",
    "factory-control",
    "factory-monitor",
    "codex",
)
CODEX_AGENT_ID: Final = "codex"
FACTORY_CONTROL_AGENT_ID: Final = "factory-control"
INTEGRATION_KIND_PREFIX: Final = "factory.integration."


class ContractError(AppError, ValueError):
    """A payload rejected before anything is written (K-1, K-2); `code` is the API error."""

    status = 400

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class KindContract:
    """One row of the K-3 table."""

    kind: str
    worker_group: str  # a built-in group for the table's kinds; any group for the deployment's
    # Factory's flags: off for a deployment's own kinds (`register_kind`)
    durable_workflow: str | None = None  # "-" in the spec table
    durable_activity: bool = False
    objective_scoped: bool = False
    reconcile_on_terminal_or_expired_lease: bool = False
    live_execution: bool = False
    terminal_objective_audit: bool = False
    auth_context_required: bool = True
    built_in: bool = True

    def to_wire(self) -> dict[str, Any]:
        return flat_wire.to_wire(self)


def _row(
    kind: Kind,
    group: WorkerGroup,
    workflow: str | None,
    activity: bool,
    scoped: bool,
    reconcile: bool,
    live: bool,
    audit: bool,
) -> KindContract:
    return KindContract(
        kind=kind,
        worker_group=group,
        durable_workflow=workflow,
        durable_activity=activity,
        objective_scoped=scoped,
        reconcile_on_terminal_or_expired_lease=reconcile,
        live_execution=live,
        terminal_objective_audit=audit,
        auth_context_required=kind not in AUTH_CONTEXT_OPTIONAL_KINDS,
    )


Y, N = True, False
# K-3, column for column:
#   kind, workerGroup, durableWorkflow, durableActivity, objectiveScoped,
#   reconcileOnTerminalOrExpiredLease, liveExecution, terminalObjectiveAudit
CONTRACTS: Final[Mapping[str, KindContract]] = MappingProxyType(
    {
        row.kind: row
        for row in (
            _row("factory.dispatch", "control", None, N, N, N, N, N),
            _row("factory.run", "chat", "run", N, N, N, Y, N),
            _row("factory.integration.publish", "codex", None, N, Y, Y, Y, N),
            _row("factory.integration.validate", "codex", None, N, Y, Y, Y, N),
            _row("factory.objective.audit", "control", None, N, Y, N, N, N),
            _row("factory.objective.control", "control", "objective-control", N, Y, N, N, Y),
            _row("factory.objective.watchdog", "control", None, N, N, N, N, N),
            _row("factory.task.monitor", "control", None, N, Y, N, Y, N),
            _row("factory.task.run", "codex", None, Y, Y, Y, Y, N),
        )
    }
)
del Y, N


# A deployment's own kinds, registered next to their handlers when the handler modules are
# imported (at start-up, in every process); the built-in table above never changes.
_CUSTOM: dict[str, KindContract] = {}
CUSTOM_KIND_PATTERN: Final = re.compile(r"^[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*$")
MAX_KIND_LENGTH: Final = 100


def register_kind(
    kind: str,
    *,
    worker_group: str = "chat",
    auth_context_required: bool = False,
    live_execution: bool = False,
    retry: RetryPolicy | None = None,
) -> KindContract:
    """Add a payload kind of the deployment's own (its handler is registered separately by
    agent id). Factory's flags stay off: they describe Factory's own kinds, and so does a
    required authContext unless asked for. Registering the same contract twice is a
    no-op; a different one under a taken name is an error.

    `worker_group` is a built-in group or one the deployment declares. Registration may
    run before the settings are read (a module imported by an app), so only the name's
    form is checked here; an enqueue of the kind is refused while its group is not
    declared, and a system check names such a kind (`jobs.routing_checks`). `retry`: the
    kind's retry policy (`jobs.core.retry_policy`)."""
    if (
        not isinstance(kind, str)
        or len(kind) > MAX_KIND_LENGTH
        or not CUSTOM_KIND_PATTERN.match(kind)
    ):
        raise ValueError(
            f"kind {kind!r} must be lowercase words separated by dots "
            f"(letters, digits, '-' and '_'), at most {MAX_KIND_LENGTH} characters"
        )
    if kind in CONTRACTS or kind.startswith("factory."):
        raise ValueError(f"kind {kind!r} is reserved for the built-in factory kinds")
    if worker_group not in WORKER_GROUPS:
        try:
            check_name(worker_group)
        except GroupsError as error:
            raise ValueError(f"worker_group of kind {kind!r}: {error}") from None
    contract = KindContract(
        kind=kind,
        worker_group=worker_group,
        live_execution=live_execution,
        auth_context_required=auth_context_required,
        built_in=False,
    )
    existing = _CUSTOM.setdefault(kind, contract)
    if existing != contract:
        raise ValueError(f"kind {kind!r} is already registered with another contract")
    if retry is not None:
        register_retry_policy(kind, retry)
    return contract


def unregister_kind(kind: str) -> None:
    """Tests only: forget a custom kind (and its retry policy)."""
    _CUSTOM.pop(kind, None)
    unregister_retry_policy(kind)


# The built-in kinds are Factory's: offered only where Factory (the `objectives` app) is
# installed. The jobs app says which at start-up.
_factory_offered = True


def offer_factory_kinds(offered: bool) -> None:
    """Whether Factory's kinds are accepted and listed (False without Factory)."""
    global _factory_offered
    _factory_offered = offered


def all_kinds() -> tuple[str, ...]:
    """The built-in kinds in table order (with Factory), then the deployment's own, by name."""
    return (*(KINDS if _factory_offered else ()), *sorted(_CUSTOM))


def contract_for(kind: str | None) -> KindContract | None:
    if kind is None:
        return None
    built_in = CONTRACTS.get(kind) if _factory_offered else None
    return built_in or _CUSTOM.get(kind)


def contracts_table() -> list[dict[str, Any]]:
    """The kind-contract table as JSON rows for the API and the admin: the built-in kinds
    in table order, then the deployment's own."""
    return [contract.to_wire() for kind in all_kinds() if (contract := contract_for(kind))]


def contract_group(kind: str | None) -> str | None:
    """The worker group a kind's contract names, None for an unknown kind."""
    contract = contract_for(kind)
    return contract.worker_group if contract is not None else None


def routed_group(agent_id: str, kind: str | None, queue: str | None = None) -> str:
    """Where a job actually runs (K-5): the `queue` its enqueue chose, if any; else agent
    id first, kind second. A kind the deployment registered runs on the group its
    contract names (unless its agent says otherwise)."""
    if queue is not None:
        return queue
    if agent_id == CODEX_AGENT_ID:
        return "codex"
    if kind is not None and kind.startswith(INTEGRATION_KIND_PREFIX):
        return "codex"
    if agent_id == FACTORY_CONTROL_AGENT_ID:
        return "control"
    custom = _CUSTOM.get(kind) if kind is not None else None
    return custom.worker_group if custom is not None else "chat"  # a deployment's kind: its group


def routing_by_design(agent_id: str, kind: str | None) -> bool:
    """Whether a contract/route group difference is the system's own routing: a built-in
    agent id carrying a built-in kind runs where its agent runs (K-5, agent id first), so
    `factory.dispatch` on agent `factory` runs on chat although its contract names control.
    Anywhere else a difference is worth an operator's look."""
    return agent_id in BUILTIN_AGENT_IDS and kind is not None and kind in CONTRACTS


def fixed_route(agent_id: str, kind: str | None) -> bool:
    """Factory's own work, whose group an enqueue's `queue` may not change: a built-in
    agent id, or a built-in kind (its leases, timeouts and sandbox follow the group)."""
    return agent_id in BUILTIN_AGENT_IDS or (kind is not None and kind in CONTRACTS)


def validate_payload(payload: object) -> dict[str, Any]:
    """Return `payload` if it may be enqueued, else raise `ContractError` (K-1, K-2)."""
    if not isinstance(payload, dict):
        raise ContractError(
            "payload_not_object", f"payload must be a JSON object, got {_json_type(payload)}"
        )
    kind = payload.get("kind")
    contract = contract_for(kind) if isinstance(kind, str) else None
    if contract is None:
        said = "payload has no kind" if kind is None else f"unknown payload kind {kind!r}"
        known = ", ".join(all_kinds()) or "none, no kind is registered"
        raise ContractError("unknown_kind", f"{said}; expected one of: {known}")
    auth = payload.get("authContext")
    if auth is None and not contract.auth_context_required:
        return payload
    _check_auth_context(auth, kind)
    return payload


def _check_auth_context(auth: object, kind: object) -> None:
    if auth is None:
        raise ContractError(
            "auth_context_required",
            f"payload.authContext with userId and organizationId is required for kind {kind}",
        )
    if not isinstance(auth, dict):
        raise ContractError(
            "auth_context_required",
            f"payload.authContext must be a JSON object, got {_json_type(auth)}",
        )
    for field in AUTH_CONTEXT_REQUIRED_FIELDS:
        value = auth.get(field)
        if not isinstance(value, str) or not value:
            raise ContractError(
                "auth_context_required",
                f"payload.authContext.{field} must be a non-empty string for kind {kind}",
            )
    for field in AUTH_CONTEXT_OPTIONAL_FIELDS:
        value = auth.get(field)
        if value is not None and not isinstance(value, str):
            raise ContractError(
                "auth_context_required",
                f"payload.authContext.{field} must be a string when present, "
                f"got {_json_type(value)}",
            )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
