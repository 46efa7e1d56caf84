"""C-8: PostgreSQL stopped under a serving API, then started again.

The test runs a PostgreSQL of its own (initdb and pg_ctl into a temporary directory, on a
free port), serves the ASGI app on it with uvicorn, and stops the database with
`pg_ctl -m immediate` (a crash, as far as clients can tell). Meanwhile every API answer
is a 503 `database_unavailable` with Retry-After, the admin shows its plain "database
unavailable" page, `/readyz` is 503 and `/healthz` says why. Once the database is back
the same server answers again within seconds: nothing is restarted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.conftest import log_in_admin, wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.runtime, pytest.mark.postgres_only]
AGENT = "outage-agent"
BODY = {
    "payload": {"kind": "factory.run", "authContext": {"userId": "u-1", "organizationId": "o-1"}}
}
RECOVERY_DEADLINE_S = 20  # generous for a loaded machine; a stuck reconnect takes minutes


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _bin_dir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


class OwnPostgres:
    """A throwaway PostgreSQL server. PostgreSQL refuses to run as root: as root, its
    programs run as the `postgres` user, in a directory that user owns."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/receipt"

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{program} failed: {done.stdout}{done.stderr}"

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()
        with psycopg.connect(self.url.replace("/receipt", "/postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE receipt")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.root / "log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def wait_started(self) -> None:
        wait_for(self._answers, timeout=30, message="the test's PostgreSQL to accept connections")

    def _answers(self) -> bool:
        try:
            psycopg.connect(self.url, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    def stop_immediately(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    bin_dir = _bin_dir()
    if bin_dir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
        pytest.skip("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
    root = Path(tempfile.mkdtemp(prefix="receipt-own-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    server = OwnPostgres(bin_dir, root)
    try:
        server.init()
        server.wait_started()
        yield server
    finally:
        with contextlib.suppress(AssertionError):
            server._run("pg_ctl", "-D", str(server.data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def served(own_postgres, tmp_path) -> Iterator[tuple[OwnPostgres, str, Path]]:
    """uvicorn serving the app on the test's own PostgreSQL; its data dir holds the admin
    password and an API token (setupdev)."""
    data = tmp_path / "data"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RECEIPT_", "DATABASE_", "DJANGO_", "PYTEST", "JOB_"))
    }
    env.update(DATABASE_URL=own_postgres.url, RECEIPT_DATA_DIR=str(data), PYTHONUNBUFFERED="1")
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    subprocess.run(
        [sys.executable, "manage.py", "setupdev", "--url", base],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "uvicorn", "receipt_site.asgi:application"),
                *("--port", str(port), "--no-access-log", "--timeout-graceful-shutdown", "2"),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: _status(base, "/readyz") == 200,
            timeout=30,
            message="the server to answer /readyz",
        )
        yield own_postgres, base, data
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
    assert "Traceback" not in log.read_text(errors="replace"), log.read_text()[-4000:]


def _status(base: str, path: str) -> int | None:
    try:
        return httpx.get(base + path, timeout=10).status_code
    except httpx.TransportError:
        return None


def _opening(http: httpx.Client, path: str) -> httpx.Response:
    """A live stream's answer, read only when it is not a stream (which never ends)."""
    with http.stream("GET", path) as answer:
        if answer.status_code != 200:
            answer.read()
        return answer


def test_the_api_answers_503_while_postgresql_is_down_and_serves_again_without_restart(served):
    postgres, base, data = served
    token = (data / "api-token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    with (
        httpx.Client(base_url=base, timeout=30) as admin,
        httpx.Client(base_url=base, timeout=30, headers=auth) as api,
    ):
        log_in_admin(admin, (data / "admin-password").read_text().strip())
        enqueued = api.post(f"/agents/{AGENT}/jobs", json=BODY)
        assert enqueued.status_code == 202, enqueued.text
        job_id = enqueued.json()["job"]["id"]
        assert admin.get("/admin/").status_code == 200

        postgres.stop_immediately()

        # Every kind of door at once: each waits for the pool's connection in parallel.
        calls = {
            "enqueue": lambda: api.post(f"/agents/{AGENT}/jobs", json=BODY),
            "job": lambda: api.get(f"/jobs/{job_id}"),
            "list": lambda: api.get("/jobs"),
            "stream": lambda: _opening(api, "/receipt/stream"),
            "objectives": lambda: api.get("/factory/api/objectives"),
            "admin": lambda: admin.get("/admin/jobs/job/"),
            "readyz": lambda: api.get("/readyz"),
            "healthz": lambda: api.get("/healthz"),
        }
        with ThreadPoolExecutor(len(calls)) as pool:
            answers = dict(zip(calls, pool.map(lambda call: call(), calls.values()), strict=True))

        for name in ("enqueue", "job", "list", "stream", "objectives"):
            answer = answers[name]
            assert answer.status_code == 503, (name, answer.status_code, answer.text[:300])
            assert answer.json()["error"] == "database_unavailable", name
            assert int(answer.headers["Retry-After"]) > 0, name
        page = answers["admin"]
        assert page.status_code == 503 and int(page.headers["Retry-After"]) > 0
        assert "Database unavailable" in page.text
        assert answers["readyz"].status_code == 503
        health = answers["healthz"]
        assert health.status_code == 200
        out = health.json()
        assert (out["ready"], out["degraded"], out["database"]["ok"]) == (False, True, False)
        assert any("database unavailable" in warning for warning in out["warnings"])

        postgres.start()

        def serving() -> bool:
            again = api.post(f"/agents/{AGENT}/jobs", json=BODY)
            return again.status_code == 202

        wait_for(serving, timeout=RECOVERY_DEADLINE_S, interval=0.2, message="the API to serve")
        assert api.get(f"/jobs/{job_id}").status_code == 200
        assert api.get("/readyz").status_code == 200
        assert admin.get("/admin/jobs/job/").status_code == 200
        assert api.get("/healthz").json()["ready"] is True
