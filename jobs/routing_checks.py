"""System checks of job routing: every kind runs on a worker group the deployment has.

A kind may be registered (`register_kind`) before the settings are read, so its group is
checked here and at each enqueue, not at registration. Reads only the configuration and
the registered kinds; no database.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from jobs import handlers
from jobs.core.contracts import all_kinds, contract_for
from jobs.core.groups import DECLARED_IN
from jobs.timing_config import current_timing


@checks.register(checks.Tags.compatibility)
def kinds_on_declared_groups(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """jobs.E001: a kind registered to a worker group this deployment does not declare
    (every enqueue of it is refused with `unknown_queue`)."""
    handlers.load()  # the deployment's kinds are registered by its handler modules
    known = current_timing().group_names()
    errors: list[checks.CheckMessage] = []
    for kind in all_kinds():
        contract = contract_for(kind)
        if contract is None or contract.worker_group in known:
            continue
        errors.append(
            checks.Error(
                f"kind {kind!r} is registered to worker group {contract.worker_group!r}, "
                f"which is not declared; the worker groups are {', '.join(known)}",
                hint=f"declare it in {DECLARED_IN}, or register the kind to one of these groups",
                id="jobs.E001",
            )
        )
    return errors
