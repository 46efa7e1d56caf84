"""P-3: restart backoff 1 s doubling to 30 s; a child that fails at startup the same way
every time is reported as an error naming the cause, and in the status /healthz reads.

The supervisor is driven step by step with a made-up clock (`step(now)`), so the test
waits only for its short-lived children to exit, never for a backoff."""

from __future__ import annotations

import json
import logging
import os
import sys
import textwrap
from pathlib import Path

import pytest

from receipt_site import supervision
from receipt_site.supervision import Child, Supervisor, next_backoff
from tests.conftest import wait_for

BIND_ERROR = (
    "ERROR:    [Errno 98] error while attempting to bind on address "
    "('127.0.0.1', 8000): address already in use"
)


def test_backoff_starts_at_one_second_and_doubles_to_thirty():
    seen, current = [], None
    for _ in range(8):
        current = next_backoff(current)
        seen.append(current)
    assert seen == [1, 2, 4, 8, 16, 30, 30, 30]


def python_child(name: str, code: str) -> Child:
    return Child(name, [sys.executable, "-c", textwrap.dedent(code)])


def bind_failure(flag: Path) -> Child:
    """Fails like uvicorn on a taken port while `flag` exists, else serves (sleeps)."""
    return python_child(
        "api",
        f"""
        import os, sys, time
        if os.path.exists({str(flag)!r}):
            print("INFO:     Started server process", file=sys.stderr)
            print({BIND_ERROR!r}, file=sys.stderr)
            sys.exit(1)
        time.sleep(60)
        """,
    )


class Driver:
    """A supervisor and its made-up clock."""

    def __init__(self, children: list[Child], status: Path) -> None:
        self.supervisor = Supervisor(children, status_path=status, stop_grace_s=5)
        self.now = 1000.0
        self.supervisor.start_all(self.now)

    def exited(self, child: Child) -> None:
        """Wait for the child to exit, a moment after its start, and let the supervisor see."""
        wait_for(
            lambda: child.process is not None and child.process.poll() is not None,
            timeout=30,
            message=f"{child.name} to exit",
        )
        self.now += 0.5
        self.supervisor.step(self.now)
        assert child.process is None and child.backoff_s is not None

    def restarted(self, child: Child) -> None:
        assert child.backoff_s is not None
        self.now += child.backoff_s
        self.supervisor.step(self.now)
        assert child.process is not None, "not restarted after its backoff"

    def exit_and_restart(self, child: Child) -> None:
        self.exited(child)
        self.restarted(child)

    def stop(self) -> None:
        self.supervisor.stop_all()


@pytest.fixture
def status(tmp_path: Path) -> Path:
    return tmp_path / supervision.STATUS_FILE


def failing_events(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "supervisor.child_failing"]


def test_the_same_startup_failure_every_time_is_an_error_naming_the_cause(tmp_path, status, caplog):
    flag = tmp_path / "port-taken"
    flag.touch()
    child = bind_failure(flag)
    driver = Driver([child], status)
    try:
        with caplog.at_level(logging.INFO, logger="receipt.supervisor"):
            driver.exit_and_restart(child)
            driver.exit_and_restart(child)
            assert failing_events(caplog) == [], "reported before it failed the same way thrice"
            driver.exited(child)
        [record] = failing_events(caplog)
        assert record.levelno == logging.ERROR and getattr(record, "child", None) == "api"
        assert "api fails at startup the same way every time" in record.getMessage()
        assert "address already in use" in record.getMessage()
        assert getattr(record, "cause", None) == BIND_ERROR
        [entry] = json.loads(status.read_text())["failing"]
        assert (entry["child"], entry["cause"], entry["failures"]) == ("api", BIND_ERROR, 3)
        assert supervision.failing_children(status) == [entry]

        with caplog.at_level(logging.INFO, logger="receipt.supervisor"):
            driver.restarted(child)
            driver.exited(child)  # a fourth time says nothing new
        assert len(failing_events(caplog)) == 1

        flag.unlink()  # the port is free again: the next start stays up
        driver.restarted(child)
        driver.now += supervision.STARTUP_WINDOW_S + 1
        with caplog.at_level(logging.INFO, logger="receipt.supervisor"):
            driver.supervisor.step(driver.now)
        assert "supervisor.child_recovered" in [getattr(r, "event", None) for r in caplog.records]
        assert supervision.failing_children(status) == []
    finally:
        driver.stop()
    assert not status.exists(), "the status outlived its supervisor"


def test_different_failures_are_restarts_not_a_startup_failure(tmp_path, status, caplog):
    counter = tmp_path / "count"
    child = python_child(
        "codex",
        f"""
        import sys
        from pathlib import Path
        path = Path({str(counter)!r})
        n = int(path.read_text()) + 1 if path.exists() else 1
        path.write_text(str(n))
        print(f"RuntimeError: failure number {{n}}", file=sys.stderr)
        sys.exit(1)
        """,
    )
    driver = Driver([child], status)
    try:
        with caplog.at_level(logging.INFO, logger="receipt.supervisor"):
            for _ in range(4):
                driver.exit_and_restart(child)
        assert failing_events(caplog) == []
        assert supervision.failing_children(status) == []
    finally:
        driver.stop()


def test_a_child_that_ran_a_while_before_exiting_is_not_failing_at_startup(status, caplog):
    child = python_child("chat", "import sys; print('OSError: lost', file=sys.stderr); sys.exit(1)")
    driver = Driver([child], status)
    try:
        with caplog.at_level(logging.INFO, logger="receipt.supervisor"):
            for _ in range(3):
                wait_for(lambda: child.process is not None and child.process.poll() is not None)
                driver.now += supervision.STARTUP_WINDOW_S + 1  # it "ran" past the window
                driver.supervisor.step(driver.now)
                driver.now += child.backoff_s or 0
                driver.supervisor.step(driver.now)
        assert failing_events(caplog) == []
    finally:
        driver.stop()


def test_a_status_left_by_a_supervisor_that_is_gone_is_ignored(status):
    status.write_text(
        json.dumps({"pid": 2**22 + 12345, "failing": [{"child": "api", "cause": "x"}]})
    )
    assert supervision.failing_children(status) == []
    status.write_text(json.dumps({"pid": os.getpid(), "failing": [{"child": "api"}]}))
    assert supervision.failing_children(status) == [{"child": "api"}]
    status.write_text("{not json")
    assert supervision.failing_children(status) == []
    assert supervision.failing_children(status.with_name("missing.json")) == []
