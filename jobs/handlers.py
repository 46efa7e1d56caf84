"""Handler registry (P-6): which agent ids have a job handler in this deployment.

The delivery runtime calls the handlers; this module only knows which exist. The four
built-in agent ids (K-4) are always registered; integrators add more with
`@register_handler("agent-id")`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from jobs.core.contracts import BUILTIN_AGENT_IDS

F = TypeVar("F", bound=Callable[..., Any])
_HANDLERS: dict[str, Callable[..., Any]] = {}


def register_handler(agent_id: str) -> Callable[[F], F]:
    def decorate(handler: F) -> F:
        _HANDLERS[agent_id] = handler
        return handler

    return decorate


def handler_for(agent_id: str) -> Callable[..., Any] | None:
    return _HANDLERS.get(agent_id)


def has_handler(agent_id: str) -> bool:
    return agent_id in _HANDLERS or agent_id in BUILTIN_AGENT_IDS


def registered_agent_ids() -> list[str]:
    return sorted(set(_HANDLERS) | set(BUILTIN_AGENT_IDS))
