"""A task's job payload: what it runs (the task's module path), with what (JSON args and
kwargs) and as enqueued (backend alias, queue, priority, run_after when not defaults).

    {"kind": "django.task", "task": "shop.tasks.send_receipt_email",
     "args": [7], "kwargs": {}, "backend": "default", "priority": 10}

Arguments and return values are JSON (the framework requires it): a value that does
not survive a JSON round trip unchanged in type is refused with a TypeError naming it,
before anything is written. Reading a payload back imports the named module and accepts
only a framework `Task` found there: a payload never names an arbitrary callable to run.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import sys
from datetime import datetime
from typing import Any

from django.apps import apps
from django.utils.module_loading import import_string

from jobs.core.limits import MISSING
from jobs.tasks.errors import TaskNotImportable
from jobs.tasks.framework import DEFAULT_TASK_PRIORITY, DEFAULT_TASK_QUEUE_NAME, Task

AGENT_ID = "django-task"
KIND = "django.task"
_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def plain_json(value: Any, *, what: str) -> Any:
    """`value` as JSON gives it back (tuples become lists), or TypeError saying why not."""
    try:
        return _plain(value)  # the common case, without a text in between
    except _NotPlain:
        pass  # anything else goes through JSON itself, which says what is wrong
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{what} must be JSON-serializable: {error}") from None
    _string_keys(value, what)
    return json.loads(text)


class _NotPlain(Exception):
    pass


def _plain(value: Any) -> Any:
    """A copy of `value` made of JSON's own types (exactly: no subclass, no NaN or
    infinity, string keys), as a JSON round trip returns it; `_NotPlain` otherwise."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if value != value or value in (math.inf, -math.inf):
            raise _NotPlain
        return value
    if kind is list or kind is tuple:
        return [_plain(item) for item in value]
    if kind is dict:
        copied = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            copied[key] = _plain(item)
        return copied
    raise _NotPlain


def _string_keys(value: Any, what: str) -> None:
    """JSON turns a non-string dict key into a string: the task would get another type."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{what} must be JSON-serializable without changing type: "
                    f"the dict key {key!r} would come back as the string {json.dumps(key)}"
                )
            _string_keys(item, what)
    elif isinstance(value, list | tuple):
        for item in value:
            _string_keys(item, what)


def build(task: Task, args: Any, kwargs: Any, *, backend: str) -> dict[str, Any]:
    """The payload of an enqueue of `task` (TypeError for arguments that are not JSON)."""
    path = task.module_path
    if not _imports_as(path, task) and resolve(path).func is not task.func:
        # what the worker will import must be this task
        raise TaskNotImportable(path, "does not import as this task by its module path")
    payload: dict[str, Any] = {
        "kind": KIND,
        "task": path,
        "args": plain_json(list(args), what=f"the arguments of task {path}"),
        "kwargs": plain_json(dict(kwargs), what=f"the keyword arguments of task {path}"),
        "backend": backend,
    }
    if task.queue_name != DEFAULT_TASK_QUEUE_NAME:
        payload["queueName"] = task.queue_name
    if task.priority != DEFAULT_TASK_PRIORITY:
        payload["priority"] = task.priority
    if task.run_after is not None:
        payload["runAfter"] = task.run_after.isoformat()
    return payload


def _imports_as(path: str, task: Task) -> bool:
    """Whether the loaded module of `path` holds `task` under its name: the check of
    `resolve` for the usual case, without importing (a miss is decided by `resolve`)."""
    module, _, name = path.rpartition(".")
    found = getattr(sys.modules.get(module), name, None)
    return isinstance(found, Task) and found.func is task.func


def resolve(path: Any) -> Task:
    """The framework task at `path`; TaskNotImportable when there is none."""
    if not isinstance(path, str) or not _PATH.fullmatch(path):
        raise TaskNotImportable(path, "is not a dotted module path")
    if not _importable(path.rpartition(".")[0]):
        raise TaskNotImportable(
            path, "is outside the installed apps and the modules this process loaded"
        )
    try:
        found = import_string(path)
    except ImportError as error:
        raise TaskNotImportable(path, f"does not import: {error}") from None
    if not isinstance(found, Task):
        raise TaskNotImportable(path, f"is a {type(found).__name__}, not a task")
    return found


def _importable(module: str) -> bool:
    """Whether a payload may make a worker import `module`: one already loaded (the
    handler modules, anything the project imported) or one inside an installed app. A
    payload comes from any client with a token, and importing a module runs its code; only
    a `Task` is ever called, but what an import does must stay the project's own code."""
    if module in sys.modules:
        return True
    return any(
        module == config.name or module.startswith(config.name + ".")
        for config in apps.get_app_configs()
    )


def task_of(payload: Any) -> Task:
    """The task a job payload runs, as it was enqueued (backend, queue, priority,
    run_after); TaskNotImportable when the payload names none."""
    if not isinstance(payload, dict) or payload.get("kind") != KIND:
        raise TaskNotImportable(None, "is missing: the payload is not a task's")
    task = resolve(payload.get("task"))
    changes: dict[str, Any] = {}
    if isinstance(payload.get("backend"), str) and payload["backend"] != task.backend:
        changes["backend"] = payload["backend"]
    if isinstance(payload.get("queueName"), str):
        changes["queue_name"] = payload["queueName"]
    if isinstance(payload.get("priority"), int):
        changes["priority"] = payload["priority"]
    if isinstance(payload.get("runAfter"), str):
        changes["run_after"] = datetime.fromisoformat(payload["runAfter"])
    return task.using(**changes) if changes else task


def arguments(payload: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    args, kwargs = payload.get("args"), payload.get("kwargs")
    return (args if isinstance(args, list) else []), (kwargs if isinstance(kwargs, dict) else {})


def task_path(payload: dict[str, Any]) -> str | None:
    """The task a payload names (a limit covers tasks by path), None when it names none."""
    path = payload.get("task")
    return path if isinstance(path, str) else None


def shown_path(kind: Any, payload: Any) -> str | None:
    """The task a job runs, as the admin and the CLI name it in place of its kind: the
    payload's `task` of a `django.task` job; None for any other job (a Factory payload's
    `task` is something else) or a task job whose payload names none."""
    if kind != KIND or not isinstance(payload, dict):
        return None
    path = payload.get("task")
    return path if isinstance(path, str) and path else None


def argument(payload: dict[str, Any], name: str) -> Any:
    """A task argument by name, whether passed by keyword or by position (bound to the
    task's signature); `MISSING` when the call did not pass it (a limit's key)."""
    args, kwargs = arguments(payload)
    if name in kwargs:
        return kwargs[name]
    path = task_path(payload)
    if not args or path is None:
        return MISSING
    try:
        bound = inspect.signature(resolve(path).func).bind_partial(*args)
    except (TaskNotImportable, TypeError, ValueError):
        return MISSING
    return bound.arguments.get(name, MISSING)
