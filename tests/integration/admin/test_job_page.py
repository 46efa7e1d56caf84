"""U-2: the job page: diagnosis, the fold, contract vs routed group, the receipt timeline
with verified badges, time travel, commands, delivery promises and callbacks."""

from __future__ import annotations

import dataclasses
import re

import pytest

from jobs import queue
from jobs.core.state import Fence
from jobs.runtime import dispatch
from receipts import store
from receipts.models import Receipt as ReceiptRow
from tests.integration.admin.conftest import NOW, enqueue, job_url, text, words
from tests.support import present

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_job() -> str:
    """Three receipts: enqueued, leased (attempt 1), heartbeat (now running)."""
    job_id = enqueue("factory", "factory.run", session_key="sess-1")
    queue.lease(job_id, worker_id="chat:h:1", now_ms=NOW + 1000)
    queue.heartbeat(job_id, fence=Fence("chat:h:1", 1), now_ms=NOW + 2000)
    return job_id


def row(page: str, stream_seq: int) -> str:
    match = re.search(rf'<tr id="r{stream_seq}" class="([^"]*)">(.*?)</tr>', page, re.S)
    assert match, f"no timeline row for receipt #{stream_seq}"
    return match.group(0)


def test_page_shows_the_fold_and_notes_the_builtin_group_difference(admin_client):
    """K-5: factory.dispatch on agent factory runs on chat though its contract names
    control; that is the built-in routing, shown as information, not as a warning."""
    job_id = enqueue("factory", "factory.dispatch")
    response = admin_client.get(job_url(job_id))
    assert response.status_code == 200
    page = text(response)
    assert '<pre class="rcpt-json" id="rcpt-fold">' in page
    fold = re.search(r'id="rcpt-fold">(.*?)</pre>', page, re.S).group(1)
    assert f'"id": "{job_id}"' in fold and '"kind": "factory.dispatch"' in fold
    assert '"contractGroup": "control"' in fold and '"routedGroup": "chat"' in fold
    assert '<code id="rcpt-contract-group">control</code>' in page
    assert '<code id="rcpt-routed-group">chat</code>' in page
    assert 'id="rcpt-group-mismatch"' not in page and "⚠" not in page
    assert 'id="rcpt-group-note"' in page
    assert "expected: agent factory runs it on chat" in words(response)


def test_page_warns_when_another_agent_carries_a_builtin_kind_elsewhere(admin_client):
    job_id = enqueue("acme-agent", "factory.dispatch")
    response = admin_client.get(job_url(job_id))
    assert 'id="rcpt-group-mismatch"' in text(response)
    assert "the contract names control but agent acme-agent routes it to chat" in words(response)


def test_no_flag_when_routing_follows_the_contract(admin_client):
    job_id = enqueue("factory", "factory.run")
    page = text(admin_client.get(job_url(job_id)))
    assert '<code id="rcpt-contract-group">chat</code>' in page
    assert 'id="rcpt-group-mismatch"' not in page


def test_diagnosis_blockers_come_first(admin_client):
    job_id = enqueue("nobody", "factory.run")
    page = text(admin_client.get(job_url(job_id)))
    diagnosis = page.index('id="rcpt-diagnosis"')
    assert diagnosis < page.index('id="rcpt-summary"') < page.index('id="rcpt-timeline"')
    section = page[diagnosis : page.index('id="rcpt-summary"')]
    assert '<code class="rcpt-blocker-code">no_handler</code>' in section
    assert '<code class="rcpt-blocker-code">no_live_process</code>' in section
    assert "No handler for agent 'nobody'" in section


def test_timeline_shows_each_receipt_with_hashes_and_verified_badges(admin_client, running_job):
    receipts = store.read(f"jobs/{running_job}")
    page = text(admin_client.get(job_url(running_job)))
    assert "Receipts 1\u20133 of 3" in page
    for receipt in receipts:
        line = row(page, present(receipt.stream_seq))
        assert f'title="{receipt.hash}">{receipt.hash[:12]}…' in line
        if receipt.prev:
            assert f'title="{receipt.prev}">{receipt.prev[:12]}…' in line
        assert "rcpt-badge-ok" in line and f'<span class="rcpt-type">{receipt.type}</span>' in line
        assert "<details" in line and '"type": "' in line  # body JSON behind a summary
    assert "2030-03-17 17:46:42.000 UTC" in row(page, 3)  # the heartbeat's ts, in UTC
    assert '"actor"' not in row(page, 2)  # a worker's lease has no actor in its context


def test_tampered_receipt_loses_its_badge_and_so_do_later_ones(admin_client, running_job):
    ReceiptRow.objects.filter(stream=f"jobs/{running_job}", stream_seq=2).update(
        body={"type": "job.leased", "forged": True}
    )
    page = text(admin_client.get(job_url(running_job)))
    assert "rcpt-badge-ok" in row(page, 1)
    assert "rcpt-badge-bad" in row(page, 2) and "rcpt-badge-bad" in row(page, 3)


def test_state_at_receipt_two_is_the_leased_job(admin_client, running_job):
    response = admin_client.get(job_url(running_job), {"at": 2})
    page = text(response)
    assert "State at receipt 2 of 3" in page
    state = re.search(r'id="rcpt-state-json">(.*?)</pre>', page, re.S).group(1)
    assert '"status": "leased"' in state and '"receiptCount": 2' in state
    assert '"routedGroup": "chat"' in state  # the same job JSON as the API
    assert '"status": "running"' in re.search(r'id="rcpt-fold">(.*?)</pre>', page, re.S).group(1)


def test_state_at_receipt_zero_is_no_job(admin_client, running_job):
    page = text(admin_client.get(job_url(running_job), {"at": 0}))
    assert "State at receipt 0 of 3" in page and "no job yet" in page


def test_each_receipt_links_to_the_state_after_it(admin_client, running_job):
    page = text(admin_client.get(job_url(running_job)))
    assert 'href="?after=0&at=2#state"' in row(page, 2)


def test_commands_and_delivery_promises(admin_client, running_job):
    queue.steer(running_job, {"message": "faster"}, by="alice")
    job = present(queue.get(running_job))
    started = dispatch.start_driver(job, now_ms=NOW + 3000)
    page = text(admin_client.get(job_url(running_job)))
    commands = page[page.index('id="rcpt-commands"') : page.index('id="rcpt-promises"')]
    assert "Commands (1 pending)" in commands
    assert '<span class="rcpt-type">steer</span> <strong>pending</strong>' in commands
    assert "alice" in commands and '"message": "faster"' in commands
    promises = page[page.index('id="rcpt-promises"') : page.index('id="rcpt-callbacks"')]
    assert f'<code title="dispatch key {running_job}; ' in promises
    assert present(started.promise_id) in promises
    assert '<span class="rcpt-promise rcpt-promise-pending">pending</span>' in promises
    assert "driver" in promises and "2030-03-17 17:46:43.000 UTC" in promises


def test_callback_url_and_token_are_masked(admin_client, settings):
    settings.RECEIPT = dataclasses.replace(
        settings.RECEIPT,
        resonate_callback_url="https://hooks.example.com:8443/hook/s3cr3t?k=abc",
        callback_token="tok-very-secret",
    )
    job_id = enqueue()
    page = text(admin_client.get(job_url(job_id)))
    assert "<code>https://hooks.example.com:8443/••••</code>" in page
    assert "s3cr3t" not in page and "k=abc" not in page and "tok-very-secret" not in page
    assert "Bearer token</dt><dd>set (masked)" in page


def test_live_refresh_script_follows_the_job_events(admin_client, running_job):
    page = text(admin_client.get(job_url(running_job)))
    assert '<script src="/static/receipt/job_live.js" defer></script>' in page
    assert f'data-events-url="/jobs/{running_job}/events"' in page
    assert 'data-terminal="0"' in page
    for section in (
        "rcpt-diagnosis",
        "rcpt-summary",
        "rcpt-fold-section",
        "rcpt-commands",
        "rcpt-promises",
        "rcpt-timeline",
    ):
        assert f'id="{section}" data-live' in page, section


def test_unknown_job_is_404(admin_client):
    assert admin_client.get(job_url("no-such-job")).status_code == 404


def test_job_id_with_colons_round_trips_through_the_admin_url(admin_client):
    queue.enqueue(
        "factory",
        {"kind": "factory.run", "authContext": {"userId": "u", "organizationId": "o"}},
        job_id="chat:42.x",
        now_ms=NOW,
    )
    response = admin_client.get(job_url("chat:42.x"))
    assert response.status_code == 200 and "Job chat:42.x" in words(response)


def test_a_task_jobs_summary_names_its_task_and_queue(admin_client):
    from tests.integration.tasks import defs

    plain = defs.add.enqueue(1, 2).id
    response = admin_client.get(job_url(plain))
    assert '<dd id="rcpt-task"><code>tests.integration.tasks.defs.add</code></dd>' in text(response)
    assert "Kind django.task Task tests.integration.tasks.defs.add" in words(response)
    queued = queue.enqueue(
        "django-task",
        {"kind": "django.task", "task": "tests.integration.tasks.defs.add", "queueName": "codex"},
        queue="codex",
        now_ms=NOW,
    ).job.job_id
    shown = words(admin_client.get(job_url(queued)))
    assert "Task tests.integration.tasks.defs.add · queue codex" in shown


def test_a_job_of_another_kind_has_no_task_row(admin_client):
    job_id = queue.enqueue(
        "factory",
        {
            "kind": "factory.run",
            "task": "not.a.task",
            "authContext": {"userId": "u", "organizationId": "o"},
        },
        now_ms=NOW,
    ).job.job_id
    assert 'id="rcpt-task"' not in text(admin_client.get(job_url(job_id)))
