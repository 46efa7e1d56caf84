"""The errors a task result names when the task itself raised nothing, and the error of a
payload whose task does not import. A `TaskError.exception_class_path` must import as an
exception class (the framework resolves it lazily), so these live at stable paths."""

from __future__ import annotations

from jobs.tasks.framework import InvalidTask


class TaskAttemptFailed(Exception):
    """An attempt ended without an exception of the task's own: its worker was lost (the
    lease expired or was released), it ran past its execution timeout, or no worker could
    run it. The task error's traceback is Receipt's error text for that attempt."""


class TaskCanceled(Exception):
    """The job was canceled (an abort, a singleton cancel) before the task finished."""


class TaskNotImportable(InvalidTask):
    """A payload names a task path that does not import as a task of the framework.
    Nothing named in a payload runs unless it is one."""

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"task {path!r} {why}")
        self.path = path
