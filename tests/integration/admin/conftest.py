"""Fixtures for the jobs admin tests: users with and without permissions, job builders."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.urls import reverse

from jobs import queue

AUTH = {"userId": "u-1", "organizationId": "org-1"}
NOW = 1_900_000_000_000  # fixed ms clock for receipts written by the tests
CHANGELIST = "/admin/jobs/job/"


def payload(kind: str = "factory.run", org: str = "org-1", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "authContext": {"userId": "u-1", "organizationId": org}, **extra}


def enqueue(
    agent: str = "factory",
    kind: str = "factory.run",
    *,
    now_ms: int = NOW,
    org: str = "org-1",
    **options: Any,
) -> str:
    return queue.enqueue(agent, payload(kind, org=org), now_ms=now_ms, **options).job.job_id


def job_url(job_id: str) -> str:
    return reverse("admin:jobs_job_change", args=(quote(job_id),))


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


def words(response: Any) -> str:
    """The page's visible text: tags dropped, whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", text(response)).split())


def grant(user: Any, app_label: str, codename: str) -> None:
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label=app_label, codename=codename)
    )


@pytest.fixture(autouse=True)
def fresh_dashboard() -> Any:
    """The dashboard JSON is shared per process for two seconds; tests need their own."""
    from jobs import dashboard

    dashboard.reset_shared()
    yield
    dashboard.reset_shared()


@pytest.fixture
def viewer(django_user_model: Any) -> Any:
    """A staff user who may view jobs and nothing more."""
    user = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    grant(user, "jobs", "view_job")
    return user


@pytest.fixture
def viewer_client(client: Any, viewer: Any) -> Any:
    client.force_login(viewer)
    return client


@pytest.fixture
def bare_staff_client(client: Any, django_user_model: Any) -> Any:
    """A staff user without a single permission."""
    user = django_user_model.objects.create_user("nobody", password="x", is_staff=True)
    client.force_login(user)
    return client


@pytest.fixture
def without_factory(monkeypatch: Any) -> None:
    """The admin as a project without Factory sees it: `objectives` reads as not installed
    (the test settings install it, and removing an installed app rebuilds the registry)."""
    from django.apps import apps

    installed = apps.is_installed
    monkeypatch.setattr(apps, "is_installed", lambda name: name != "objectives" and installed(name))
