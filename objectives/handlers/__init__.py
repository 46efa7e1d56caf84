"""Factory's job handlers (K-4): the four built-in agent ids and the kinds each serves.

- `factory`: `factory.dispatch` -> dispatch, every other kind -> run (O-11, O-12);
- `factory-control`: objective control (O-7), audit (O-10), watchdog (L-4);
- `factory-monitor`: task monitors (O-9);
- `codex`: task runs (O-6), integration validate and publish (O-13).
A kind an agent does not serve fails non-retryably with a message naming both.
"""

from __future__ import annotations

from collections.abc import Callable

from jobs.core.state import JobState
from jobs.handler_contract import HandlerContext, JobResult
from jobs.handlers import register_handler
from objectives.core import vocabulary as v

Handler = Callable[[JobState, HandlerContext], JobResult]


def _router(agent_id: str, routes: dict[str, str], default: str | None = None) -> Handler:
    def route(job: JobState, ctx: HandlerContext) -> JobResult:
        from importlib import import_module

        target = routes.get(job.kind or "", default)
        if target is None:
            return JobResult.failure(
                f"agent '{agent_id}' does not handle kind {job.kind!r}", no_retry=True
            )
        module, _, name = target.rpartition(".")
        handler: Handler = getattr(import_module(module), name)
        return handler(job, ctx)

    route.__name__ = f"factory_{agent_id.replace('-', '_')}"
    return route


ROUTES: dict[str, tuple[dict[str, str], str | None]] = {
    v.FACTORY_AGENT: (
        {v.KIND_DISPATCH: "objectives.handlers.dispatch.handle"},
        "objectives.handlers.run.handle",
    ),
    v.CONTROL_AGENT: (
        {
            v.KIND_CONTROL: "objectives.handlers.control.handle",
            v.KIND_AUDIT: "objectives.handlers.audit.handle",
            v.KIND_WATCHDOG: "objectives.handlers.watchdog.handle",
        },
        None,
    ),
    v.MONITOR_AGENT: ({v.KIND_MONITOR: "objectives.handlers.monitor.handle"}, None),
    v.CODEX_AGENT: (
        {
            v.KIND_TASK_RUN: "objectives.handlers.codex.run_task",
            v.KIND_VALIDATE: "objectives.handlers.codex.validate",
            v.KIND_PUBLISH: "objectives.handlers.codex.publish",
        },
        None,
    ),
}


def register() -> None:
    for agent_id, (routes, default) in ROUTES.items():
        register_handler(agent_id)(_router(agent_id, routes, default))
