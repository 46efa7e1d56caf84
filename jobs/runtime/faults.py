"""Failpoints for fault tests (C-3): named places where a test may make this process die
or a write fail, chosen with RECEIPT_FAULTS=name[,name]. Inert unless that variable is set.
"""

from __future__ import annotations

import json
import os
import signal
import time

_ONCE_FIRED: set[str] = set()


def _armed(name: str) -> bool:
    return name in os.environ.get("RECEIPT_FAULTS", "").split(",")


def _record(name: str) -> None:
    path = os.environ.get("RECEIPT_TEST_MARKER")
    if path:
        with open(path, "a") as handle:
            handle.write(
                json.dumps({"event": "fault", "fault": name, "pid": os.getpid(), "t": time.time()})
                + "\n"
            )


def crash(name: str) -> None:
    """Die here, as SIGKILL would, if `name` is armed."""
    if _armed(name):
        _record(name)
        os.kill(os.getpid(), signal.SIGKILL)


def fail_once(name: str, error: BaseException) -> None:
    """Raise `error` the first time this process reaches `name`, if armed."""
    if _armed(name) and name not in _ONCE_FIRED:
        _ONCE_FIRED.add(name)
        _record(name)
        raise error


def pause(name: str, seconds: float) -> None:
    """Stall here for `seconds` if `name` is armed, so a test can kill the process mid-step."""
    if _armed(name):
        _record(name)
        time.sleep(seconds)
