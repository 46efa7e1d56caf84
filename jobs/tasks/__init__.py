"""Django's task framework (`@task`, `.enqueue()`, `.get_result()`) on Receipt: every
enqueue is a Receipt job. `TASKS = {"default": {"BACKEND": "jobs.tasks.ReceiptBackend"}}`;
docs/tasks.md says what it does and how to test tasks (`jobs.testing`).

- `framework`: the one import of the framework (django.tasks, else the backport);
- `backend`: the backend (enqueue, get_result); `options`: Receipt's enqueue options;
- `payload`: what a task's job carries; `results`: task results read from the receipts;
- `handler`: the agent handler that runs a task on the worker; `errors`.
"""

from jobs.tasks.backend import ReceiptBackend
from jobs.tasks.options import ReceiptOptions, ReceiptTask, receipt_options

__all__ = ["ReceiptBackend", "ReceiptOptions", "ReceiptTask", "receipt_options"]
