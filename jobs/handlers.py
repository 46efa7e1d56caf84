"""Handler registry (D-7, P-6): agent id -> `handler(job, ctx) -> JobResult`.

The four built-in agent ids (K-4) are always registered: the objectives app (Factory)
registers their handlers in its AppConfig.ready(), and `load` never overwrites a
registered handler; without that app they fall back to a handler that fails jobs
non-retryably saying so. Integrators add agent ids with `@register_handler("agent-id")`
in a module listed in RECEIPT_HANDLER_MODULES (imported when the app starts, in every
process), and their own payload kinds beside them with `register_kind` (the API accepts
a kind only once it is registered).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from jobs.core.contracts import BUILTIN_AGENT_IDS, register_kind
from jobs.core.state import JobState
from jobs.handler_contract import HandlerContext, JobResult

__all__ = [
    "Handler",
    "handler_for",
    "has_handler",
    "load",
    "register_handler",
    "register_kind",
    "registered_agent_ids",
]
Handler = Callable[[JobState, HandlerContext], JobResult]
F = TypeVar("F", bound=Callable[..., Any])
_HANDLERS: dict[str, Handler] = {}
_loaded = False


def register_handler(agent_id: str) -> Callable[[F], F]:
    def decorate(handler: F) -> F:
        _HANDLERS[agent_id] = handler
        return handler

    return decorate


def _factory_pending(job: JobState, ctx: HandlerContext) -> JobResult:
    return JobResult.failure(
        f"the handler for agent '{job.agent_id}' ships with Factory (objectives), which is "
        "not installed in this build",
        no_retry=True,
    )


def load() -> None:
    """Register built-ins, then import RECEIPT_HANDLER_MODULES (idempotent)."""
    global _loaded
    if _loaded:
        return
    from django.conf import settings

    for agent_id in BUILTIN_AGENT_IDS:  # setdefault: Factory's own handlers stay
        _HANDLERS.setdefault(agent_id, _factory_pending)
    for module in settings.RECEIPT.handler_modules:
        importlib.import_module(module)
    _loaded = True


def handler_for(agent_id: str) -> Handler | None:
    load()
    return _HANDLERS.get(agent_id)


def has_handler(agent_id: str) -> bool:
    load()
    return agent_id in _HANDLERS


def registered_agent_ids() -> list[str]:
    load()
    return sorted(_HANDLERS)
