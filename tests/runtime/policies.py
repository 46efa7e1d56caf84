"""Retry policies the runtime tests' handlers register (tests.runtime.handlers) and their
tests read back. Importing this registers nothing: importing `tests.runtime.handlers`
into the test process itself would replace the built-in agent ids' handlers there."""

from __future__ import annotations

from jobs.core.retry_policy import RetryPolicy

BACKOFF_POLICY = RetryPolicy(max_attempts=3, base_ms=1_000, factor=2, cap_ms=4_000)
