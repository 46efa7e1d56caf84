"""Which database errors are the platform's transient ones (D-5): retried, never charged
to a job's attempts."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, OperationalError

from jobs.runtime.storage_retry import is_transient, with_storage_retry


@pytest.mark.parametrize(
    "text",
    [
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  '
        "sorry, too many clients already",
        "connection failed: Connection refused",
        "database is locked",
        "server closed the connection unexpectedly",
    ],
)
def test_platform_outages_are_transient(text):
    assert is_transient(OperationalError(text))


def test_a_refusal_is_not_transient():
    assert not is_transient(IntegrityError("duplicate key value violates unique constraint"))
    assert not is_transient(OperationalError("no such table: jobs_job"))
    assert not is_transient(ValueError("too many clients"))


@pytest.mark.django_db  # a transient error makes the retry look at the connection
def test_retry_recovers_after_transient_errors_and_gives_up_on_others():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("sorry, too many clients already")
        return "done"

    assert with_storage_retry("t", flaky, sleep=lambda s: None) == "done" and len(calls) == 3
    with pytest.raises(IntegrityError):
        with_storage_retry(
            "t", lambda: (_ for _ in ()).throw(IntegrityError("dup")), sleep=lambda s: None
        )
