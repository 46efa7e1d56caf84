"""Receipt as a user installs it (P-1, P-3): `pip install .` (a wheel, not this checkout),
then the API and every role started from another directory, the admin served from the
package, a job of the user's own kind run end to end, and a quiet start-up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from tests.conftest import BACKEND, log_in_admin, wait_for
from tests.runtime import wheel

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.runtime,
    # One data directory of its own: the SQLite leg is enough (nothing here is per backend).
    pytest.mark.skipif(BACKEND != "sqlite", reason="runs once, in the SQLite leg"),
]

USER_MODULE = """
from jobs.handlers import register_handler, register_kind
from jobs.handler_contract import JobResult

register_kind("acme.report", worker_group="chat")


@register_handler("my-agent")
def run(job, ctx):
    return JobResult.success({"answer": 42, "for": job.payload.get("customer")})
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _env(installed: Path, data: Path) -> dict[str, str]:
    return wheel.environment(
        installed, RECEIPT_DATA_DIR=str(data), RECEIPT_HANDLER_MODULES="myapp_jobs"
    )


def _python() -> list[str]:
    return wheel.python()


def test_an_installed_receipt_runs_from_any_directory(installed, tmp_path):
    home = tmp_path / "elsewhere"
    home.mkdir()
    (home / "myapp_jobs.py").write_text(textwrap.dedent(USER_MODULE))
    env = _env(installed, tmp_path / "data")

    def receipt(*args: str) -> str:
        done = subprocess.run(
            [*_python(), "-m", "receipt_site.cli", *args],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    where = subprocess.run(
        [
            *_python(),
            "-c",
            "import access, receipt_site; print(receipt_site.__file__); print(access.__file__)",
        ],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert all(line.startswith(str(installed / "site")) for line in where.stdout.split())
    script = (installed / "site" / "bin" / "receipt").read_text()
    assert "from receipt_site.cli import main" in script

    port = _free_port()
    receipt("setupdev", "--url", f"http://127.0.0.1:{port}")
    token = (tmp_path / "data" / "api-token").read_text().strip()
    password = (tmp_path / "data" / "admin-password").read_text().strip()
    log_path = tmp_path / "stack.log"
    with log_path.open("w") as log:
        stack = subprocess.Popen(
            [*_python(), "-m", "receipt_site.cli", "runstack", "--port", str(port)],
            cwd=home,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=10) as http:
            wait_for(lambda: _answers(http), timeout=60, message="the API never answered")
            root = http.get("/")
            assert root.status_code == 302 and root.headers["location"] == "/admin/"
            icon = http.get("/favicon.ico")
            assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
            assert http.get("/static/receipt/admin.css").status_code == 200

            auth = {"Authorization": f"Bearer {token}"}
            enqueued = http.post(
                "/agents/my-agent/jobs",
                headers=auth,
                json={
                    "payload": {
                        "kind": "acme.report",
                        "customer": "c-7",
                        "authContext": {"userId": "u-1", "organizationId": "org-1"},
                    }
                },
            )
            assert enqueued.status_code == 202, enqueued.text
            job_id = enqueued.json()["job"]["id"]
            done = wait_for(
                lambda: _job_if(http, job_id, auth, "completed"),
                timeout=60,
                message="the job never completed",
            )
            assert done["result"] == {"answer": 42, "for": "c-7"}

            log_in_admin(http, password)
            for page in (
                "/admin/",
                "/admin/jobs/job/",
                f"/admin/jobs/job/{job_id}/change/",
                "/admin/jobs/job/dashboard/",
            ):
                answer = http.get(page)
                assert answer.status_code == 200, (page, answer.status_code)
            assert job_id in http.get(f"/admin/jobs/job/{job_id}/change/").text
    finally:
        os.killpg(stack.pid, signal.SIGTERM)
        stack.wait(timeout=60)
    output = log_path.read_text()
    for noise in (
        "Traceback",
        "lifespan",
        "Not Found: /favicon.ico",
        "SetuptoolsDeprecation",
        "Error",
        "Warning:",
    ):
        assert noise not in output, (noise, output[-4000:])


def _answers(http: httpx.Client) -> bool:
    try:
        return http.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


def _job_if(http: httpx.Client, job_id: str, auth: dict[str, str], status: str) -> dict | None:
    job = http.get(f"/jobs/{job_id}", headers=auth).json()
    return job if job.get("status") == status else None


@pytest.fixture
def taken_port():
    """A port another program is listening on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def _refused(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a command that should refuse at once; if it serves instead, stop it (SIGTERM
    reaches runstack's supervisor, which stops its children) and fail."""
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"{argv[0]} did not refuse: {out[-2000:]}{err[-2000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_scripts_run_refuses_a_taken_port_before_anything_else(taken_port, tmp_path):
    """scripts/run says which port is taken and how to choose another, and stops: it
    prints no "Receipt is ready" for a URL another program answers, installs nothing,
    and writes no data directory."""
    data = tmp_path / "data"
    done = _refused(
        [str(ROOT / "scripts" / "run")],
        {**os.environ, "PORT": str(taken_port), "RECEIPT_DATA_DIR": str(data)},
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert f"port {taken_port} on 127.0.0.1 is already in use" in output, output
    assert f"PORT={taken_port + 1} scripts/run" in output
    assert "Receipt is ready" not in output and "password" not in output
    assert not data.exists()


def test_scripts_run_refuses_a_port_that_is_not_a_number(tmp_path):
    done = _refused(
        [str(ROOT / "scripts" / "run")],
        {**os.environ, "PORT": "80x", "RECEIPT_DATA_DIR": str(tmp_path / "data")},
    )
    assert done.returncode != 0
    assert "PORT must be a number from 1 to 65535, not '80x'" in done.stderr


def test_runstack_refuses_a_taken_port_and_starts_nothing(taken_port, tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RECEIPT_", "DATABASE_"))},
        "RECEIPT_DATA_DIR": str(tmp_path / "data"),
    }
    done = _refused([sys.executable, "manage.py", "runstack", "--port", str(taken_port)], env)
    assert done.returncode != 0
    assert f"port {taken_port} on 127.0.0.1 is already in use" in done.stderr
    assert f"--port {taken_port + 1}" in done.stderr
    assert "supervisor.started" not in done.stderr, "a child was started"
