"""Receipt's apps in a project of the user's own (issue 33 item 1): the built wheel, a
fresh `django-admin startproject` with one app, the README's settings lines, `migrate`,
a task enqueued from a view inside `transaction.atomic()`, real `runworker` processes
started from the host project, the host's admin pages for the job, and its result.

Runs on the host's own database: a fresh SQLite file as `startproject` writes it (no
OPTIONS: Receipt's connection set-up must make 50 concurrent enqueues succeed), or in the
PostgreSQL leg a fresh database on the test server. Without `objectives` no Factory kind,
model or watchdog appears.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import BACKEND
from tests.runtime import wheel

pytestmark = pytest.mark.runtime

# The README's lines ("Add Receipt to your project"), as a host adds them.
SETTINGS = """
INSTALLED_APPS += [
    "receipt_site",  # before django_q: it derives django_q's settings from RECEIPT
    "django_q",
    "receipts",
    "access",
    "jobs",
    "django_tasks",
    "shop",
]
TASKS = {"default": {"BACKEND": "jobs.tasks.ReceiptBackend"}}
RECEIPT = {
    "broker_poll_ms": 20,
    "startup_settle_ms": 100,
    "queued_redrive_startup_delay_ms": 100,
}
"""
URLS = """
from django.contrib import admin
from django.urls import include, path

from shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("receipt/", include("receipt_site.host_urls")),
    path("orders/<int:order_id>/receipt", views.send_receipt),
]
"""
# The task (Django's task framework, its `django-tasks` backport on Django 5.2), and how
# the host enqueues it and reads its result.
TASKS = """
from django_tasks import task
from django_tasks.exceptions import TaskResultDoesNotExist


@task
def send_receipt_email(order_id):
    return {"sent": True, "orderId": order_id}


def enqueue_receipt(order_id):
    return send_receipt_email.enqueue(order_id).id


def receipt_result(job_id):
    try:
        result = send_receipt_email.get_result(job_id)
    except TaskResultDoesNotExist:
        return None
    if not result.is_finished:
        return {"status": result.status.name, "result": None}
    value = result.return_value if result.status.name == "SUCCESSFUL" else None
    return {"status": result.status.name, "result": value}
"""
APPS = """
from django.apps import AppConfig


class ShopConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "shop"
"""
VIEWS = """
from django.contrib.auth.models import User
from django.db import transaction
from django.http import JsonResponse

from shop.tasks import enqueue_receipt


class Declined(Exception):
    pass


def send_receipt(request, order_id):
    try:
        with transaction.atomic():
            User.objects.filter(pk=order_id).exists()  # the order's own reads come first
            job_id = enqueue_receipt(order_id)
            if request.GET.get("decline"):
                raise Declined(job_id)
    except Declined:
        return JsonResponse({"job": job_id, "declined": True}, status=409)
    return JsonResponse({"job": job_id})
"""
# Run in the host project (its settings, the installed wheel): prints what the test checks.
DRIVE = """
import json, os, threading, time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "host.settings")
import django
django.setup()
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.db import connections
from django.test import Client
from django.test.utils import setup_test_environment
from django_q.models import Schedule
from jobs.management.commands.runworker import maintenance_loops
from jobs.models import Job
from shop.tasks import receipt_result

setup_test_environment()  # the test client's host name
out = {}
client = Client()
job_id = client.post("/orders/7/receipt").json()["job"]
declined = client.post("/orders/8/receipt?decline=1")
out["declined"] = [declined.status_code, receipt_result(declined.json()["job"])]
deadline = time.monotonic() + 45
while (done := receipt_result(job_id))["status"] not in ("SUCCESSFUL", "FAILED"):
    assert time.monotonic() < deadline, f"job {job_id} is still {done}"
    time.sleep(0.05)
out["job"] = done

answers, barrier = [], threading.Barrier(50)
def order(number):
    try:
        barrier.wait(timeout=10)
        answers.append(Client().post(f"/orders/{100 + number}/receipt").status_code)
    finally:
        connections.close_all()
threads = [threading.Thread(target=order, args=(n,)) for n in range(50)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(timeout=120)
out["burst"] = sorted(answers)

admin = User.objects.create_superuser("admin", "admin@example.com", "pw")
client.force_login(admin)
pages = ["/admin/", "/admin/jobs/job/", f"/admin/jobs/job/{job_id}/change/",
         "/admin/jobs/job/dashboard/", "/admin/receipts/stream/"]
out["pages"] = {page: client.get(page).status_code for page in pages}
out["index"] = client.get("/admin/").content.decode()
out["changelist"] = client.get("/admin/jobs/job/").content.decode()
out["job_page"] = client.get(f"/admin/jobs/job/{job_id}/change/").content.decode()
api = client.get(f"/receipt/jobs/{job_id}")
out["api_job"] = [api.status_code, api.json()]
out["kinds"] = [row["kind"] for row in client.get("/receipt/kinds").json()["kinds"]]
factory = client.post("/receipt/agents/factory/jobs", {"payload": {"kind": "factory.dispatch"}},
                      content_type="application/json")
out["factory_enqueue"] = [factory.status_code, factory.json().get("error")]
enqueued = client.post("/receipt/agents/django-task/jobs", {"payload": {"kind": "django.task",
                       "task": "shop.tasks.send_receipt_email", "args": [9], "kwargs": {}}},
                       content_type="application/json")
out["api_enqueue"] = [enqueued.status_code, enqueued.json().get("async", {}).get("events")]
out["static"] = {name: bool(finders.find(name)) for name in
                 ("receipt/admin.css", "receipt/jobs.css", "receipt/job_live.js")}
out["control_loops"] = [loop.name for loop in maintenance_loops(settings.RECEIPT, "worker-control")]
out["schedules"] = Schedule.objects.count()
out["factory_jobs"] = Job.objects.filter(kind__startswith="factory.").count()
print("RESULT " + json.dumps(out))
"""


@pytest.fixture
def host_database() -> Iterator[str]:
    """The host project's DATABASES entry: a fresh SQLite file as startproject writes it,
    or a fresh PostgreSQL database on the test server (dropped afterwards)."""
    if BACKEND != "postgres":
        yield ""
        return
    import psycopg

    url = urlsplit(os.environ["DATABASE_URL"])
    maintenance = url._replace(path="/postgres").geturl()
    name = f"receipt_host_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(maintenance, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    entry = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "HOST": url.hostname or "127.0.0.1",
        "PORT": str(url.port or 5432),
        "USER": url.username or "",
        "PASSWORD": url.password or "",
    }
    yield f"DATABASES = {{'default': {entry!r}}}\n"
    with psycopg.connect(maintenance, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_host_project_runs_a_task_with_receipts_apps(installed, host_database, tmp_path):
    env = wheel.environment(installed)
    home = tmp_path / "host"
    home.mkdir()

    def run(*args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [*wheel.python(), *args],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout + done.stderr

    run("-m", "django", "startproject", "host", ".")
    run("manage.py", "startapp", "shop")
    settings = home / "host" / "settings.py"
    settings.write_text(settings.read_text() + SETTINGS + host_database)
    (home / "host" / "urls.py").write_text(textwrap.dedent(URLS))
    for name, text in (("tasks", TASKS), ("apps", APPS), ("views", VIEWS)):
        (home / "shop" / f"{name}.py").write_text(textwrap.dedent(text))
    (home / "drive.py").write_text(textwrap.dedent(DRIVE))

    assert "System check identified no issues" in run("manage.py", "check")
    run("manage.py", "migrate")
    with _runworkers(home, env, ("driver", "chat")) as logs:
        out = _result(run("drive.py"))
    for role, log in logs.items():
        assert "Traceback" not in log, (role, log[-3000:])

    assert out["job"] == {"status": "SUCCESSFUL", "result": {"sent": True, "orderId": 7}}
    assert out["declined"] == [409, None]  # rolled back with the view's transaction
    assert out["burst"] == [200] * 50, out["burst"]
    assert all(status == 200 for status in out["pages"].values()), out["pages"]
    api_status, api_job = out["api_job"]
    assert api_status == 200 and api_job["result"] == {"sent": True, "orderId": 7}
    job_id = api_job["id"]
    assert f"/receipt/jobs/{job_id}/events" in out["job_page"]  # reversed under the prefix
    assert out["api_enqueue"][0] == 202
    assert out["api_enqueue"][1]["job"].startswith("/receipt/jobs/")
    assert out["api_enqueue"][1]["receipt"] == "/receipt/receipt/stream"
    assert all(out["static"].values()), out["static"]
    # Factory is optional: no kind, model, column or watchdog of its own without it.
    assert out["kinds"] == ["django.task"]
    assert out["factory_enqueue"] == [400, "unknown_kind"]
    assert "/admin/objectives/" not in out["index"] and "/admin/jobs/job/" in out["index"]
    assert "column-kind_col" in out["changelist"]
    assert "column-lane" not in out["changelist"] and "column-org_col" not in out["changelist"]
    assert "watchdog_schedule" not in out["control_loops"]
    assert out["schedules"] == 0 and out["factory_jobs"] == 0


@contextlib.contextmanager
def _runworkers(
    home: Path, env: dict[str, str], roles: tuple[str, ...]
) -> Iterator[dict[str, str]]:
    """`manage.py runworker --role <role>` from the host project, stopped with SIGTERM."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs: dict[str, str] = {}
    for role in roles:
        log = home / f"runworker-{role}.log"
        with log.open("w") as handle:
            procs[role] = subprocess.Popen(
                [*wheel.python(), "manage.py", "runworker", "--role", role],
                cwd=home,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    try:
        yield logs
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for role, proc in procs.items():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            logs[role] = (home / f"runworker-{role}.log").read_text(errors="replace")


def _result(output: str) -> dict:
    line = next((x for x in output.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, output[-4000:]
    return json.loads(line.removeprefix("RESULT "))
