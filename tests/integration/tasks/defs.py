"""Tasks of the task backend's tests (issue 33 item 2): module-level, so a worker imports
them by their module path as it would a project's own `tasks.py`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from jobs.tasks.framework import TaskContext, task


class CustomError(Exception):
    pass


@task
def add(a: int, b: int) -> int:
    return a + b


@task(priority=7)
def urgent_add(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task
def boom(message: str) -> None:
    raise ValueError(message)


@task
def raise_custom() -> None:
    raise CustomError("custom failure")


@task(takes_context=True)
def attempt_number(context: TaskContext, fail_until: int = 0) -> dict[str, Any]:
    """Fails its first `fail_until` attempts; says which attempt it ran in."""
    if context.attempt <= fail_until:
        raise RuntimeError(f"attempt {context.attempt} fails on purpose")
    result = context.task_result
    return {"attempt": context.attempt, "id": result.id, "workers": list(result.worker_ids)}


@task
async def async_double(value: int) -> int:
    await asyncio.sleep(0)
    return value * 2


@task
def returns_datetime() -> datetime:
    return datetime.now(tz=UTC)


@task
def double_dictionary(key: Any) -> dict[Any, Any]:
    """Django's own example: a tuple argument comes back as a list, no dict key."""
    return {key: key * 2}


def plain_function() -> str:
    """Not a task: a payload naming it must not run it."""
    return "ran"


@task
def fan_out(count: int) -> list[str]:
    """Enqueues `count` more tasks from inside a task."""
    return [add.enqueue(i, i).id for i in range(count)]


@task
def forever(depth: int = 0) -> int:
    """Enqueues itself again, every time."""
    forever.enqueue(depth + 1)
    return depth
