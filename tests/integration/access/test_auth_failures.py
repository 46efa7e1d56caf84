"""Failed authentications are logged with enough to alert on, and counted (issue 31).

500 bad tokens in a second used to leave only Django's `Unauthorized` lines: no client
address, no token, no reason. Each refusal now logs the client address, the token's
public prefix (the first characters the admin shows, never the rest) and the reason
(malformed, unknown, revoked), and `/metrics` counts them by reason. Nothing is
throttled: every answer stays a 401.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from access import failures
from access.models import ApiToken
from jobs.runtime import counters

pytestmark = pytest.mark.django_db

COUNTER = "receipt_auth_failures_total"


@pytest.fixture
def refusals(caplog):
    caplog.set_level(logging.INFO, logger="receipt.access")
    failures.forget()  # the log's per-address budget starts afresh
    return caplog


def failure_records(caplog) -> list[dict[str, Any]]:
    """The `auth.failed` log records, as their fields (message included)."""
    return [
        {**vars(r), "message": r.getMessage()}
        for r in caplog.records
        if getattr(r, "event", "") == "auth.failed"
    ]


def get(path: str, header: str, address: str = "203.0.113.7"):
    return Client().get(path, HTTP_AUTHORIZATION=header, REMOTE_ADDR=address)


@pytest.mark.parametrize(
    ("header", "reason", "prefix"),
    [
        ("Bearer rcpt_" + "x" * 43, "unknown", "rcpt_xxxxxxx"),
        ("Basic dXNlcjpwYXNzd29yZA==", "malformed", None),
        ("Bearer not-a-receipt-token-at-all", "malformed", None),
        ("Bearer rcpt_" + "y" * 300, "malformed", None),
    ],
)
def test_each_refusal_is_logged_with_address_prefix_and_reason(refusals, header, reason, prefix):
    before = counters.value(COUNTER, reason=reason)
    response = get("/jobs", header)
    assert (response.status_code, response.json()["error"]) == (401, "invalid_token")
    [record] = failure_records(refusals)
    assert record["clientAddress"] == "203.0.113.7"
    assert record["reason"] == reason
    assert record["credentialPrefix"] == prefix
    assert record["path"] == "/jobs"
    secret = header.partition(" ")[2]
    assert secret not in str(record)
    assert counters.value(COUNTER, reason=reason) == before + 1


def test_a_revoked_token_is_named_as_revoked(refusals):
    token, secret = ApiToken.issue(name="billing-svc")
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    assert get("/jobs", f"Bearer {secret}").status_code == 401
    [record] = failure_records(refusals)
    assert record["reason"] == "revoked" and record["credentialPrefix"] == token.prefix
    assert record["credentialName"] == "billing-svc"
    assert secret not in str(record)


def test_every_door_reports_its_failures(refusals):
    for path in ("/jobs", "/metrics", "/jobs/j-1/wait?timeoutMs=0", "/factory/api/objectives"):
        assert get(path, "Bearer rcpt_nope").status_code == 401, path
    assert [r["path"] for r in failure_records(refusals)] == [
        "/jobs",
        "/metrics",
        "/jobs/j-1/wait",
        "/factory/api/objectives",
    ]


def test_a_flood_is_answered_counted_in_full_and_logged_in_bounded_lines(refusals):
    before = counters.value(COUNTER, reason="unknown")
    client = Client()
    statuses = {
        client.get(
            "/jobs", HTTP_AUTHORIZATION=f"Bearer rcpt_guess{n:04d}", REMOTE_ADDR="198.51.100.9"
        ).status_code
        for n in range(500)
    }
    assert statuses == {401}  # nothing throttled, nothing else
    assert counters.value(COUNTER, reason="unknown") == before + 500
    lines = failure_records(refusals)
    assert 1 <= len(lines) <= failures.FAILURE_LOG_BUDGET
    # and Django's bare "Unauthorized" line is not written 500 times beside them
    assert not [r for r in refusals.records if r.name == "django.request"]
    assert all(r["clientAddress"] == "198.51.100.9" for r in lines)
    # the budget is per address: another address is still logged
    get("/jobs", "Bearer rcpt_other", address="192.0.2.1")
    assert failure_records(refusals)[-1]["clientAddress"] == "192.0.2.1"


def test_the_next_line_after_a_quiet_spell_says_how_many_were_not_logged(refusals, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(failures, "clock", lambda: clock[0])
    for _ in range(failures.FAILURE_LOG_BUDGET + 7):
        get("/jobs", "Bearer rcpt_nope")
    clock[0] += failures.FAILURE_LOG_WINDOW_S + 1
    get("/jobs", "Bearer rcpt_nope")
    last = failure_records(refusals)[-1]
    assert last["notLogged"] == 7


def test_metrics_counts_failures_by_reason():
    _, secret = ApiToken.issue(name="scraper", scopes=["jobs:read"])
    for header in ("Bearer rcpt_nope", "Bearer rcpt_nope", "Token abc"):
        get("/jobs", header)
    text = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {secret}").content.decode()
    assert "# TYPE receipt_auth_failures_total counter" in text
    unknown = [
        line for line in text.splitlines() if line.startswith(COUNTER + '{reason="unknown"}')
    ]
    malformed = [
        line for line in text.splitlines() if line.startswith(COUNTER + '{reason="malformed"}')
    ]
    assert unknown and float(unknown[0].split()[-1]) >= 2
    assert malformed and float(malformed[0].split()[-1]) >= 1
