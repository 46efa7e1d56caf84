"""C-9: a progress report that fails never abandons the command it reports on.

`objectives.processes.run` follows a command to its end whatever its `on_start` and
`on_output` callbacks raise: the report is dropped and logged, and the next one replaces
it. Every command it starts is counted in `jobs.runtime.spawned` while it runs."""

from __future__ import annotations

import logging

from django.db import OperationalError

from jobs.runtime import spawned
from objectives import processes

# Output first, so on_output falls due (once a second) while the command still runs.
COMMAND = "echo begun; sleep 1.5; echo once >> f"


def run(tmp_path, **callbacks):
    return processes.run(
        COMMAND,
        cwd=tmp_path,
        env=processes.scrubbed_env({}),
        stdout_path=tmp_path / "o",
        stderr_path=tmp_path / "e",
        timeout_s=30,
        **callbacks,
    )


def test_a_failing_output_report_is_dropped_and_the_command_runs_to_its_end(tmp_path, caplog):
    calls = []

    def broken(out: str, err: str) -> None:
        calls.append(out)
        raise OperationalError("database is locked")

    with caplog.at_level(logging.WARNING, logger="receipt.processes"):
        result = run(tmp_path, on_output=broken)
    assert calls, "the report fell due while the command ran"
    assert result.exit_code == 0 and not result.aborted and not result.timed_out
    assert (tmp_path / "f").read_text() == "once\n"
    assert "dropped" in caplog.text


def test_a_failing_start_report_is_dropped_and_the_command_runs_to_its_end(tmp_path):
    def broken(pid: int) -> None:
        raise RuntimeError("no database")

    result = run(tmp_path, on_start=broken)
    assert result.exit_code == 0 and (tmp_path / "f").read_text() == "once\n"


def test_a_started_command_is_counted_and_live_until_it_ends(tmp_path):
    before = spawned.started()
    seen = []
    run(tmp_path, on_start=lambda pid: seen.append((spawned.started(), spawned.live())))
    assert seen == [(before + 1, 1)]
    assert spawned.started() == before + 1 and spawned.live() == 0
