"""The only way Receipt hands work to django-q2: one task to one role's cluster.

With the ORM broker the task row is written in the caller's transaction (an outbox:
it exists only if the promise it delivers committed). Redis is not transactional, so
the push waits for the commit.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.db import transaction
from django_q.tasks import async_task

from jobs.runtime.roles import ROLE_CLUSTERS

CLUSTERS = frozenset(ROLE_CLUSTERS.values())


@cache
def _broker(cluster: str) -> Any:  # one Redis client per cluster per process
    from django_q.brokers import get_broker

    return get_broker(cluster)


def send(cluster: str, func: str, *args: Any) -> None:
    if cluster not in CLUSTERS:
        raise ValueError(f"unknown cluster {cluster!r}")
    options: dict[str, Any] = {"cluster": cluster}
    if settings.Q_CLUSTER.get("orm"):
        async_task(func, *args, q_options=options)
        return
    options["broker"] = _broker(cluster)
    transaction.on_commit(lambda: async_task(func, *args, q_options=options))
