"""A real uvicorn process serving the ASGI app on this run's test database.

Tests write through the queue and the store in this process and read what the server
streams. Data must be committed to be seen: every test here is transactional.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from access.models import ApiToken
from jobs import queue
from tests.conftest import subprocess_env, wait_for
from tests.integration.live.sse_client import Stream

ROOT = Path(__file__).resolve().parents[3]
KEEPALIVE_MS = 300
CALLBACK_TOKEN = "live-test-callback-secret"
AUTH = {"userId": "u-1", "organizationId": "org-1"}


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stream(
        self, client: httpx.Client, path: str, token: str | None = None, **headers: str
    ) -> Stream:
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return Stream(client, self.url + path, {k.replace("_", "-"): v for k, v in headers.items()})


def _die_with_parent() -> None:
    # Linux: SIGTERM the server if pytest itself is killed (e.g. by `timeout`), so no
    # orphan keeps the SQLite test database open for the next run.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(port: int, wsgi: bool) -> list[str]:
    if wsgi:  # the request/response API under granian, as the production layout serves it
        return [
            *(sys.executable, "-m", "granian", "--interface", "wsgi", "--no-ws"),
            *("--host", "127.0.0.1", "--port", str(port), "--blocking-threads", "4"),
            *("--workers-kill-timeout", "2", "--log-level", "warning"),
            "receipt_site.wsgi:application",
        ]
    return [
        *(sys.executable, "-m", "uvicorn", "receipt_site.asgi:application"),
        *("--host", "127.0.0.1", "--port", str(port), "--no-access-log"),
        *("--timeout-graceful-shutdown", "2"),
    ]


@contextlib.contextmanager
def serve(tmp: Path, *, wsgi: bool = False, **env: str) -> Iterator[Server]:
    """uvicorn on the ASGI app, or with `wsgi` granian on the WSGI app."""
    port = _free_port()
    log = tmp / f"server-{port}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            _command(port, wsgi),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            env=subprocess_env(
                RECEIPT_DATA_DIR=str(settings.DATA_DIR),
                RECEIPT_SSE_KEEPALIVE_MS=str(KEEPALIVE_MS),
                **env,
            ),
        )
    server = Server(proc, f"http://127.0.0.1:{port}", log)

    def up() -> bool:
        assert proc.poll() is None, server.tail()
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(server.url + "/readyz", timeout=2).status_code == 200
        return False

    try:
        wait_for(up, timeout=30, message="the server to answer /readyz")
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        # Never leave a server behind: it would hold the SQLite test database of the next run.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Server]:
    """One server for the live suite, with a callback token configured."""
    with (
        django_db_blocker.unblock(),
        serve(tmp_path_factory.mktemp("live"), RECEIPT_CALLBACK_TOKEN=CALLBACK_TOKEN) as running,
    ):
        yield running


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(10.0, connect=5.0)) as client:
        yield client


def token(*, org: str | None = None, scopes: list[str] | None = None, name: str = "live") -> str:
    return ApiToken.issue(name=name, organization_id=org, scopes=scopes)[1]


@pytest.fixture
def reader() -> str:
    """Unscoped: every organization, every scope."""
    return token(name="reader")


def enqueue(org: str = "org-1"):
    body = {"kind": "factory.run", "authContext": {**AUTH, "organizationId": org}}
    return queue.enqueue("live-agent", body).job
