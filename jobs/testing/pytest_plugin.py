"""The `receipt_worker` pytest fixture. It needs pytest-django (its `db` fixture), which,
like pytest, Receipt does not install. Load it from your root conftest.py:

pytest_plugins = ["jobs.testing.pytest_plugin"]

def test_sends_the_email(receipt_worker):
    result = send_receipt_email.enqueue(7)
    receipt_worker.run()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from jobs.testing import Drained


class InProcessWorker:
    """`run()` runs the queued jobs to completion in this process (`run_jobs`); `runs`
    keeps what each call did."""

    def __init__(self) -> None:
        self.runs: list[Drained] = []

    def run(self, **options: Any) -> Drained:
        from jobs.testing import run_jobs  # after Django's setup: the plugin loads before it

        drained = run_jobs(**options)
        self.runs.append(drained)
        return drained


@pytest.fixture
def receipt_worker(db: None) -> Iterator[InProcessWorker]:
    """An in-process worker on the test's database (pytest-django's `db`). For the whole
    test nothing is pushed to a Redis broker (`jobs.testing.in_process`): an enqueue the
    test commits before `run()` included."""
    from jobs.testing import in_process

    with in_process():
        yield InProcessWorker()
