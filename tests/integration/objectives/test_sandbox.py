"""Q-5: task commands run only in a sandbox (bubblewrap), with a private workspace outside
the data directory, a read-only system, no network unless the policy grants it, limits,
and never as root; without bubblewrap a command task fails at once, naming both fixes.

The process tests start real sandboxes through `objectives.processes.run` (the reaper
included); the objective tests go through the default executor and the codex handlers.
Tests that need bubblewrap skip without it, except on CI (CI=true), where they fail.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

from jobs import queue
from jobs.runtime import sandbox
from objectives import processes, services
from objectives.core import vocabulary as v
from tests.conftest import subprocess_env, wait_for
from tests.integration.objectives.conftest import configure, create, drain, objective

BASH = "/usr/bin/bash"


def bwrap_or_skip() -> None:
    if not os.access(settings.RECEIPT.bwrap_path, os.X_OK) or not os.access(BASH, os.X_OK):
        message = f"needs bubblewrap at {settings.RECEIPT.bwrap_path} (apt-get install bubblewrap)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def jailed(monkeypatch):
    """The default sandbox with small limits, so a hog or a bomb stops soon."""
    bwrap_or_skip()
    configure(
        monkeypatch,
        command_sandbox="bwrap",
        command_processes=32,
        command_memory_mb=128,
        command_file_mb=4,
    )


def run(workspace: Path, command: str, *, network: bool = False) -> processes.ProcessResult:
    logs = workspace.parent / f"{workspace.name}-logs"
    return processes.run(
        command,
        cwd=workspace,
        env=processes.scrubbed_env({}),
        stdout_path=logs / "stdout.log",
        stderr_path=logs / "stderr.log",
        timeout_s=60,
        jail=sandbox.Jail(workspace=workspace, network=network),
    )


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


def test_a_command_cannot_write_outside_its_workspace(jailed, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)  # only the sandbox stands between the command and this directory
    result = run(
        workspace,
        f"echo in > inside.txt; echo out > {outside}/escape.txt; echo up > ../escape.txt;"
        f" echo usr > /usr/escape.txt; echo data > {settings.DATA_DIR}/escape.txt; true",
    )
    assert result.exit_code == 0, result.stderr_tail
    assert (workspace / "inside.txt").read_text() == "in\n"
    assert not (outside / "escape.txt").exists()
    assert not (tmp_path / "escape.txt").exists()
    assert not Path("/usr/escape.txt").exists()
    assert not (Path(settings.DATA_DIR) / "escape.txt").exists()


def test_a_command_cannot_read_the_data_directory_or_root_only_files(jailed, tmp_path):
    # The attack of the report, on the old layout (a workspace inside the data directory):
    # even there the sandbox shows nothing but the workspace.
    data = tmp_path / "data"
    workspace = data / "workspaces" / "obj"
    workspace.mkdir(parents=True)
    (data / "api-token").write_text("rcpt_the-unbound-token")
    (data / "admin-password").write_text("the-admin-password")
    secret = workspace / "root-only"
    secret.write_text("root's secret")
    secret.chmod(0o600)
    real = Path(settings.DATA_DIR)
    result = run(
        workspace,
        "cat ../../api-token ../../admin-password; "
        f"cat {data}/api-token {real}/secret.key; ls {real};"
        " cat root-only; cat /etc/shadow; id -u",
    )
    assert "rcpt_the-unbound-token" not in result.stdout_tail
    assert "the-admin-password" not in result.stdout_tail
    assert settings.SECRET_KEY[:20] not in result.stdout_tail
    uid = int(result.stdout_tail.split()[-1])
    assert uid != 0  # never root, inside or out
    if os.geteuid() == 0:  # dropped to a real other user, not root mapped to another name
        assert "root's secret" not in result.stdout_tail
        assert (workspace.stat().st_uid, uid) == (uid, uid)


def test_a_command_cannot_connect_to_the_database_or_loopback_services(jailed, workspace):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    threading.Thread(target=lambda: listener.accept()[0].close(), daemon=True).start()
    probe = (
        f"{BASH} -c 'exec 3<>/dev/tcp/127.0.0.1/{{port}}' 2>/dev/null "
        "&& echo reached-{port} || echo refused-{port}"
    )
    try:
        closed = run(workspace, probe.format(port=port) + "; " + probe.format(port=5432))
        assert f"refused-{port}" in closed.stdout_tail and "refused-5432" in closed.stdout_tail
        opened = run(workspace, probe.format(port=port), network=True)  # the policy's grant
        assert f"reached-{port}" in opened.stdout_tail, opened.stderr_tail
    finally:
        listener.close()


def test_a_fork_bomb_and_a_memory_hog_fail_and_leave_nothing_behind(jailed, workspace):
    marker = "bomb_7f3a"
    bomb = run(workspace, f"{marker}() {{ {marker} | {marker}; }}; {marker}")
    assert bomb.exit_code not in (0, None) and not bomb.timed_out
    assert "fork" in bomb.stderr_tail.lower()  # refused by the process limit
    loose = run(workspace, f"{marker}() {{ {marker} | {marker} & }}; {marker}; sleep 1; exit 3")
    assert loose.exit_code == 3
    hog = run(workspace, "tail /dev/zero")
    assert hog.exit_code not in (0, None) and "memory exhausted" in hog.stderr_tail
    big = run(workspace, "head -c 8388608 /dev/zero > big.bin")
    assert big.exit_code != 0 and (workspace / "big.bin").stat().st_size <= 4 << 20
    assert not _processes_mentioning(marker)  # the reaper and the pid namespace took all


def test_the_host_runs_commands_only_when_chosen(workspace, monkeypatch, tmp_path):
    configure(monkeypatch, command_sandbox="host")
    host = run(workspace, "pwd")
    assert host.stdout_tail.strip() == str(workspace)
    configure(monkeypatch, command_sandbox="bwrap", bwrap_path=str(tmp_path / "no-bwrap"))
    with pytest.raises(sandbox.Unavailable) as refused:
        run(workspace, "touch ran")
    assert not (workspace / "ran").exists()
    _names_both_fixes(str(refused.value))


def _names_both_fixes(text: str) -> None:
    assert sandbox.NO_SANDBOX in text
    assert "apt-get install bubblewrap" in text and "RECEIPT_COMMAND_SANDBOX=host" in text


def _processes_mentioning(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(name))
    return found


# ---- no orphans: the reaper and the pid namespace take the whole sandbox ----------------------

SANDBOXED_WORKER = """
import os, sys, threading, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "receipt_site.settings")
import django
django.setup()
from jobs.runtime import sandbox
from objectives import processes
ws = Path(sys.argv[2])
threading.Thread(target=processes.run, args=(sys.argv[3],), daemon=True, kwargs=dict(
    cwd=ws, env=processes.scrubbed_env({}), stdout_path=ws.parent / "o", stderr_path=ws.parent / "e",
    jail=sandbox.Jail(workspace=ws),
)).start()
time.sleep(600)
"""


def _tree(marker: str) -> str:
    inner = f'sh -c "sleep 300; : {marker}"'
    return f"echo up > up; {inner} & setsid {inner} & {inner}"


def test_an_abort_stops_the_whole_sandbox(jailed, workspace):
    marker = "abort_5c1e"
    aborted = threading.Event()

    def abort_once_up() -> None:
        wait_for(lambda: (workspace / "up").exists(), message="the sandbox to start")
        aborted.set()

    threading.Thread(target=abort_once_up, daemon=True).start()
    result = processes.run(
        _tree(marker),
        cwd=workspace,
        env=processes.scrubbed_env({}),
        stdout_path=workspace.parent / "o",
        stderr_path=workspace.parent / "e",
        aborted=aborted,
        timeout_s=60,
        jail=sandbox.Jail(workspace=workspace),
    )
    assert result.aborted
    assert not _processes_mentioning(marker)


def test_a_killed_worker_leaves_no_sandboxed_process(jailed, workspace):
    marker = "killed_9d2b"
    root = Path(__file__).resolve().parents[3]
    worker = subprocess.Popen(
        [sys.executable, "-c", SANDBOXED_WORKER, str(root), str(workspace), _tree(marker)],
        env=subprocess_env(RECEIPT_COMMAND_SANDBOX="bwrap"),
        start_new_session=True,
    )
    try:
        wait_for(lambda: (workspace / "up").exists(), timeout=30, message="the sandbox to start")
        assert set(_processes_mentioning(marker)) - {worker.pid}  # the sandbox runs
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    wait_for(
        lambda: not _processes_mentioning(marker),
        timeout=10,
        message="the sandboxed processes to die with their worker",
    )


# ---- through Factory: the default executor, checks, results --------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_task_runs_sandboxed_in_a_workspace_outside_the_data_directory(factory, jailed):
    oid = create(
        title="Sandboxed",
        tasks=[{"id": "t", "title": "T", "command": "pwd; id -u; echo made > made.txt"}],
        checks=["test -f made.txt"],
    )
    drain()
    state = objective(oid)
    assert state.status == "completed", state.blocked_reason
    workspace = services.workspace(oid)
    data = Path(settings.DATA_DIR)
    assert data not in workspace.parents and (workspace / "made.txt").exists()
    run_ = state.task("t").runs[-1]
    assert run_.stdout_tail.split()[0] == sandbox.WORKSPACE
    job = queue.get(run_.job_id)
    artifacts = job.result["artifacts"]
    assert artifacts["stdout"] == f".logs/{oid}/t/{run_.job_id}/stdout.log"
    assert not any(str(value).startswith("/") for value in artifacts.values() if value)
    assert str(settings.WORKSPACE_DIR) not in str(job.result)


@pytest.mark.django_db(transaction=True)
def test_the_agent_and_planner_commands_run_sandboxed_too(factory, jailed, monkeypatch):
    plan = '{"tasks": [{"id": "t", "title": "T", "prompt": "fix it"}]}'
    configure(
        monkeypatch,
        factory_planner_command=f"pwd >&2; test ! -e {settings.DATA_DIR} && echo '{plan}'",
        factory_agent_command=(
            "cat > seen.txt; echo >> seen.txt; pwd >> seen.txt; ls task.json >> seen.txt;"
            ' echo \'{"outcome": "approved", "summary": "agent ran"}\' > output/result.json'
        ),
    )
    oid = create(prompt="plan it")
    drain()
    state = objective(oid)
    assert state.status == "completed", state.blocked_reason
    run_ = state.task("t").runs[-1]
    assert run_.summary == "agent ran"
    packet = services.workspace(oid) / "packets" / "t" / run_.job_id
    seen = (packet / "seen.txt").read_text().splitlines()
    assert seen == ["fix it", f"{sandbox.WORKSPACE}/packets/t/{run_.job_id}", "task.json"]


@pytest.mark.django_db(transaction=True)
def test_links_a_task_leaves_in_the_workspace_are_never_followed_by_the_worker(
    factory, jailed, monkeypatch
):
    """A task plants links where the worker writes and reads the next task's files (its
    result.json, the agent's packet); the worker refuses them and touches nothing outside."""
    outside = factory / "outside"
    outside.mkdir()
    (outside / "result.json").write_text('{"outcome": "approved", "summary": "not yours"}')
    plant = (
        f"mkdir -p artifacts/b && ln -s {outside} artifacts/b/task-$RECEIPT_OBJECTIVE_ID-b-p1"
        f" && ln -s {outside} packets"
    )
    configure(monkeypatch, factory_agent_command="echo ran > ran.txt")
    oid = create(
        title="Links",
        tasks=[
            {"id": "a", "title": "A", "command": plant},
            {"id": "b", "title": "B", "command": "exit 3", "dependsOn": ["a"]},
            {"id": "c", "title": "C", "prompt": "think", "dependsOn": ["a"]},
        ],
        policy={"maxCandidatePassesPerTask": 1},
    )
    drain()
    for task in ("b", "c"):
        job = queue.get(v.task_job_id(oid, task, 1))
        assert job.status == "failed" and "is not a directory" in (job.last_error or ""), job
    assert sorted(p.name for p in outside.iterdir()) == ["result.json"]
    assert "not yours" in (outside / "result.json").read_text()


@pytest.mark.django_db(transaction=True)
def test_without_bubblewrap_a_command_task_fails_at_once_naming_both_fixes(factory, monkeypatch):
    configure(monkeypatch, command_sandbox="bwrap", bwrap_path="/nonexistent/bwrap")
    oid = create(
        title="No sandbox",
        tasks=[{"id": "t", "title": "T", "command": "touch ran"}],
        policy={"maxCandidatePassesPerTask": 1},
    )
    drain()
    job = queue.get(v.task_job_id(oid, "t", 1))
    assert (job.status, job.attempt) == ("failed", 1)  # at once: not retried
    _names_both_fixes(job.last_error or "")
    assert not (services.workspace(oid) / "ran").exists()
    state = objective(oid)
    assert state.status == "blocked"
    assert sandbox.warning() == sandbox.NO_SANDBOX


# ---- where the operator sees it: /healthz, the dashboard, scripts/run's output ---------------


@pytest.mark.django_db
def test_health_dashboard_and_setup_say_commands_disabled_without_a_sandbox(
    client, admin_client, monkeypatch, tmp_path
):
    configure(monkeypatch, command_sandbox="bwrap", bwrap_path=str(tmp_path / "no-bwrap"))
    health = client.get("/healthz").json()
    assert health["degraded"] is True and sandbox.NO_SANDBOX in health["warnings"]
    assert health["commands"] == {"sandbox": "bwrap", "enabled": False}
    from jobs import dashboard

    dashboard.reset_shared()
    page = admin_client.get("/admin/jobs/job/dashboard/").content.decode()
    assert sandbox.NO_SANDBOX in page
    out = io.StringIO()
    monkeypatch.setattr(settings, "DATA_DIR", tmp_path)
    configure(monkeypatch, data_dir=str(tmp_path))
    call_command("setupdev", stdout=out)
    assert f"commands:  {sandbox.NO_SANDBOX}" in out.getvalue()
    _names_both_fixes(out.getvalue())
    configure(monkeypatch, command_sandbox="host")  # chosen: everything else keeps working
    health = client.get("/healthz").json()
    assert health["commands"] == {"sandbox": "host", "enabled": True}
    assert sandbox.HOST_WARNING in health["warnings"]


# ---- configuration ---------------------------------------------------------------------------


def test_the_sandbox_settings_are_checked_at_startup(tmp_path):
    from receipt_site import config

    with pytest.raises(config.ConfigError, match="RECEIPT_COMMAND_SANDBOX"):
        config.load({"RECEIPT_COMMAND_SANDBOX": "chroot"})
    with pytest.raises(config.ConfigError, match="RECEIPT_COMMAND_PROCESSES"):
        config.load({"RECEIPT_COMMAND_PROCESSES": "0"})
    loaded = config.load({})
    assert (loaded.command_sandbox, loaded.bwrap_path, loaded.command_user) == (
        "bwrap",
        "/usr/bin/bwrap",
        "nobody",
    )
    data = tmp_path / "data"
    for inside in (data / "workspaces", data):  # in the data directory, or the data dir itself
        started = subprocess.run(
            [sys.executable, "-c", "import django; django.setup()"],
            env=subprocess_env(
                DJANGO_SETTINGS_MODULE="receipt_site.settings",
                RECEIPT_DATA_DIR=str(data),
                RECEIPT_WORKSPACE_DIR=str(inside),
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert started.returncode != 0
        assert "RECEIPT_WORKSPACE_DIR must be a directory outside RECEIPT_DATA_DIR" in (
            started.stderr
        )
