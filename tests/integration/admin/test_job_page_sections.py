"""U-2, W-3, U-5: the job page shows the job's durable-ledger rows and latest progress (a
task's stdout tail), and links to its objective; Factory adds these through
`jobs.page_sections`, so `jobs` never imports `objectives`."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import quote

from jobs import page_sections, queue
from jobs.core.state import Fence
from objectives.handlers.dispatch import objective_id_for
from objectives.ledger import activity_key
from objectives.models import ObjectiveSummary
from tests.integration.admin.conftest import NOW, enqueue, job_url, payload, text, words

pytestmark = pytest.mark.django_db


def section(page: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}"[^>]*>(.*?)</section>', page, re.S)
    assert match, f"no section {section_id}"
    return match.group(1)


@pytest.fixture
def committed(monkeypatch, django_capture_on_commit_callbacks):
    """A block whose after-commit listeners (the ledger follows commits, W-3) run at its
    end; without D-2's dispatch, whose thread would write outside the test's transaction."""
    monkeypatch.setattr(queue, "on_commit_listeners", [])
    return lambda: django_capture_on_commit_callbacks(execute=True)


def objective_url(objective_id: str) -> str:
    return f"/admin/objectives/objectivesummary/{quote(objective_id)}/change/"


def test_task_job_shows_its_activity_rows_and_stdout_tail(admin_client, committed):
    """W-3, U-2: the activity and its attempts beside the receipts; the stdout tail of the
    latest progress report as text."""
    with committed():
        job_id = enqueue("codex", "factory.task.run")
        assert queue.lease(job_id, worker_id="codex:h:1", now_ms=NOW + 1000).applied
        report = {"stdoutTail": "step 1 ok\nstep 2 <running>", "stderrTail": "warn: slow"}
        assert queue.progress(job_id, report, fence=Fence("codex:h:1", 1), now_ms=NOW + 2000)
    page = text(admin_client.get(job_url(job_id)))
    ledger = section(page, "rcpt-ledger")
    assert "Durable ledger" in ledger and activity_key(job_id) in ledger
    assert re.search(r"<td>1</td><td>running</td><td><code>codex:h:1</code></td>", ledger)
    progress = section(page, "rcpt-progress")
    assert '<pre class="rcpt-json" id="rcpt-progress-stdout">step 1 ok\nstep 2 <running></pre>' in (
        progress
    )
    assert "warn: slow" in progress and "by attempt 1" in progress


def test_run_job_shows_its_workflow_row(admin_client, committed):
    """W-1, W-3: a factory.run job's workflow (`factory/run/...`) on its page."""
    with committed():
        job_id = enqueue("factory", "factory.run")
    ledger = section(text(admin_client.get(job_url(job_id))), "rcpt-ledger")
    assert 'id="rcpt-ledger-workflow"' in ledger and "factory/run/" in ledger
    assert "<td>run</td><td>pending</td>" in ledger


def test_a_kind_without_a_durable_ledger_has_no_ledger_section(admin_client):
    page = text(admin_client.get(job_url(enqueue("factory", "factory.dispatch"))))
    assert 'id="rcpt-ledger"' not in page
    assert "No progress reported." in section(page, "rcpt-progress")


def test_job_page_links_to_its_objective(admin_client):
    """U-2, U-5: a job of an objective links to the objective's page."""
    job_id = queue.enqueue(
        "factory-control", payload("factory.objective.control", objectiveId="obj-7")
    ).job.job_id
    page = text(admin_client.get(job_url(job_id)))
    assert f'<dt>Objective</dt><dd><a class="rcpt-page-link" href="{objective_url("obj-7")}">' in (
        page
    )


def test_dispatch_job_links_to_the_objective_it_created(admin_client):
    """O-11, U-5: a factory.dispatch create links to the objective it made; another action
    to the objective it names."""
    created = enqueue("factory", "factory.dispatch")
    assert queue.lease(created, worker_id="chat:h:1", now_ms=NOW + 1).applied
    result = {"action": "create", "objectiveId": "obj-made", "created": True}
    assert queue.complete(created, result, fence=Fence("chat:h:1", 1), now_ms=NOW + 2).applied
    page = words(admin_client.get(job_url(created)))
    assert "Created objective obj-made" in page
    assert objective_url("obj-made") in text(admin_client.get(job_url(created)))

    reacted = queue.enqueue(
        "factory", payload("factory.dispatch", action="react", objectiveId="obj-other")
    ).job.job_id
    assert "Objective obj-other" in words(admin_client.get(job_url(reacted)))


def test_running_dispatch_job_links_the_objective_its_attempt_created(admin_client):
    """O-11, U-5: before the create settles, its (deterministic) objective is linked as soon
    as it exists."""
    job_id = enqueue("factory", "factory.dispatch")
    assert "Created objective" not in words(admin_client.get(job_url(job_id)))
    oid = objective_id_for(job_id)
    ObjectiveSummary.objects.create(
        id=oid,
        title="t",
        status="planning",
        phase="plan",
        mode="delivery",
        section="active",
        created_at=NOW,
        updated_at=NOW,
        head="0" * 64,
        state={},
    )
    assert f"Created objective {oid}" in words(admin_client.get(job_url(job_id)))


def test_a_failing_section_provider_costs_its_part_only(admin_client):
    """U-2: a provider that raises shows an error line; the page still answers 200."""

    def broken(job):
        raise RuntimeError("ledger down")

    page_sections.register(broken)
    try:
        response = admin_client.get(job_url(enqueue()))
    finally:
        page_sections.unregister(broken)
    assert response.status_code == 200
    assert "A part of this page failed:" in words(response) and "ledger down" in words(response)
