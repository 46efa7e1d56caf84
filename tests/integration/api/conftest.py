"""Fixtures for the HTTP API tests: tokens, a client that speaks JSON, write counters."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from access.models import ApiToken
from jobs.models import Job
from receipt_site import health
from receipts.models import Receipt, Stream

AUTH = {"userId": "u-1", "organizationId": "org-1"}


def payload(kind: str = "factory.run", org: str = "org-1", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "authContext": {"userId": "u-1", "organizationId": org}, **extra}


@dataclass
class Api:
    """One bearer token and a Django test client; every call returns (status, json)."""

    client: Client
    token: str | None

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        out = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if self.token else {}
        return {**out, **(extra or {})}

    def get(self, path: str, **params: Any) -> tuple[int, Any]:
        response = self.client.get(path, params, **self.headers())
        return response.status_code, _json(response)

    def post(
        self,
        path: str,
        body: Any = None,
        *,
        raw: bytes | str | None = None,
        content_type: str = "application/json",
        **extra: str,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else ("" if body is None else json.dumps(body))
        response = self.client.post(path, data, content_type=content_type, **self.headers(extra))
        return response.status_code, _json(response)

    def enqueue(self, agent: str = "factory", body: Any = None, **options: Any) -> dict[str, Any]:
        status, out = self.post(
            f"/agents/{agent}/jobs", body if body is not None else {"payload": payload(), **options}
        )
        assert status == 202, out
        return out


def _json(response: Any) -> Any:
    if response.get("Content-Type", "").startswith("application/json"):
        return response.json()
    return response.content


@pytest.fixture(scope="session", autouse=True)
def _static_root():
    # WhiteNoise warns when collectstatic never ran; assets come from the finders here.
    from django.conf import settings

    Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)


@pytest.fixture(autouse=True)
def _fresh_health_cache():
    health.reset_queue_cache()
    yield
    health.reset_queue_cache()


@pytest.fixture
def issue(db) -> Callable[..., str]:
    """issue(name, org=None, scopes=None) -> bearer secret."""

    def make(name: str = "svc", org: str | None = None, scopes: list[str] | None = None) -> str:
        _, secret = ApiToken.issue(name=name, organization_id=org, scopes=scopes)
        return secret

    return make


@pytest.fixture
def api(issue) -> Api:
    """A token with every scope and no organization binding."""
    return Api(Client(), issue("ops"))


@pytest.fixture
def api_for(issue) -> Callable[..., Api]:
    def make(name: str = "svc", org: str | None = None, scopes: list[str] | None = None) -> Api:
        return Api(Client(), issue(name, org, scopes))

    return make


@pytest.fixture
def anonymous() -> Api:
    return Api(Client(), None)


def written() -> tuple[int, int, int]:
    """(jobs, streams, receipts): compare before and after to prove nothing was written."""
    return Job.objects.count(), Stream.objects.count(), Receipt.objects.count()
