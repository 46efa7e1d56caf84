"""Failpoints for fault tests (C-3): named places where a test may make this process die
or a write fail, chosen with RECEIPT_FAULTS=name[,name]. Inert unless that variable is set. `name@n` arms
a `fail_once` point for its n-th arrival in the process instead of its first.
"""

from __future__ import annotations

import json
import os
import signal
import time

_ONCE_FIRED: set[str] = set()
_ARRIVALS: dict[str, int] = {}


def _armed_at(name: str) -> int | None:
    """The arrival at which `name` fires (1 unless armed as `name@n`), None if unarmed."""
    for entry in os.environ.get("RECEIPT_FAULTS", "").split(","):
        armed, _, nth = entry.partition("@")
        if armed == name:
            return int(nth) if nth.isdigit() else 1
    return None


def _armed(name: str) -> bool:
    return _armed_at(name) is not None


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
    """Raise `error` the first time (or the n-th, armed as `name@n`) this process reaches
    `name`, if armed."""
    at = _armed_at(name)
    if at is None or name in _ONCE_FIRED:
        return
    _ARRIVALS[name] = _ARRIVALS.get(name, 0) + 1
    if _ARRIVALS[name] == at:
        _ONCE_FIRED.add(name)
        _record(name)
        raise error


def pause(name: str, seconds: float) -> None:
    """Stall here for `seconds` if `name` is armed, so a test can kill the process mid-step."""
    if _armed(name):
        _record(name)
        time.sleep(seconds)
