"""The objective page's actions: only those that can apply, a plan for an objective blocked
without one (validated like the API, errors inline, nothing written on error), job links,
and integration and audit as tables."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.test import Client

from objectives import services
from objectives.core import vocabulary as v
from objectives.errors import InvalidAction
from tests.integration.objectives.conftest import (  # noqa: F401
    create,
    diamond,
    drain,
    factory,
    objective,
)

# `factory` (a data dir per test, a quick monitor) is imported as a fixture for every test
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("factory")]
ONE_TASK = [{"title": "x", "command": "true"}]


def page_url(objective_id: str) -> str:
    return f"/admin/objectives/objectivesummary/{quote(objective_id)}/change/"


@pytest.fixture
def operator() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("op", "op@example.com", "pw"))
    return client


def offered(client: Client, objective_id: str) -> set[str]:
    html = client.get(page_url(objective_id)).content.decode()
    part = html.split('id="rcpt-objective-actions"', 1)[1].split('<section class="rcpt-state"')[0]
    return set(re.findall(r'<input type="hidden" name="action" value="([a-z_]+)"', part))


def test_a_running_objective_offers_react_and_cancel_but_not_promote(operator):
    oid = create(title="Busy", tasks=diamond())
    assert offered(operator, oid) == {"note", "react", "archive", "cancel"}


def test_promote_only_at_the_promotion_gate(operator):
    oid = create(title="Gate", tasks=ONE_TASK, policy={"autoPromote": False})
    drain()
    assert objective(oid).awaiting_promotion
    assert offered(operator, oid) == {"note", "react", "archive", "cancel", "promote"}


def test_a_finished_objective_offers_only_note_and_archive(operator):
    oid = create(title="Done", tasks=ONE_TASK)
    drain()
    assert objective(oid).status == "completed"
    assert offered(operator, oid) == {"note", "archive"}
    services.archive(oid, by="t")
    assert offered(operator, oid) == {"note"}


def test_an_investigation_is_never_promoted(operator):
    oid = create(
        title="Look around", mode="investigation", tasks=ONE_TASK, policy={"autoPromote": False}
    )
    assert "promote" not in offered(operator, oid)
    drain()
    assert "promote" not in offered(operator, oid)


def test_cancel_asks_in_the_browser_and_on_a_page_without_it(operator):
    oid = create(title="Careful", tasks=diamond())
    html = operator.get(page_url(oid)).content.decode()
    form = html.split('id="rcpt-cancel-form"', 1)[1].split("</form>", 1)[0]
    assert form.startswith(' data-confirm="Cancel objective ')
    assert '<input type="hidden" name="confirmed" value="" data-confirmed="yes">' in form
    assert "receipt/objective_page.js" in html
    asked = operator.post(page_url(oid), {"action": "cancel", "confirmed": ""})
    assert asked.status_code == 200 and "Yes, cancel the objective" in asked.content.decode()
    assert objective(oid).status != "canceled"


def blocked_without_plan() -> str:
    oid = create(title="Vague", prompt="make it better")
    drain()
    state = objective(oid)
    assert state.status == "blocked" and state.blocked_kind == "plan"
    return oid


def test_the_plan_form_is_offered_only_when_blocked_for_a_plan(operator):
    oid = blocked_without_plan()
    assert "plan" in offered(operator, oid)
    other = create(title="Planned", tasks=diamond())
    assert "plan" not in offered(operator, other)
    assert 'id="rcpt-plan-form"' not in operator.get(page_url(other)).content.decode()


@pytest.mark.parametrize(
    ("tasks", "said"),
    [
        ("", "Enter the tasks as a JSON list"),
        ("[{title: x}", "The tasks are not valid JSON: Expecting property name"),
        ('{"title": "x"}', "Plan rejected: tasks must be a list, got dict."),
        ('[{"title": "x"}]', "Plan rejected: task 't1' needs a command or a prompt."),
        (
            '[{"id": "a", "title": "A", "command": "true", "dependsOn": ["b"]},'
            ' {"id": "b", "title": "B", "command": "true", "dependsOn": ["a"]}]',
            "Plan rejected: dependency cycle a -> b -> a.",
        ),
    ],
)
def test_a_bad_plan_is_shown_inline_and_nothing_is_written(operator, tasks, said):
    oid = blocked_without_plan()
    before = objective(oid).receipt_count
    response = operator.post(page_url(oid), {"action": "plan", "tasks": tasks})
    assert response.status_code == 200
    html = response.content.decode()
    error = re.search(r'id="rcpt-plan-error">(.*?)</div>', html, re.S).group(1)
    assert said in re.sub(r"<[^>]+>", "", error).replace("&#x27;", "'").replace("&gt;", ">")
    assert "Nothing was written." in error
    assert f">{tasks.replace(chr(34), '&quot;')}</textarea>" in html  # kept for fixing
    state = objective(oid)
    assert (state.receipt_count, state.status) == (before, "blocked")


def test_a_good_plan_unblocks_and_runs(operator):
    oid = blocked_without_plan()
    tasks = [{"id": "only", "title": "Only", "command": "true"}]
    response = operator.post(page_url(oid), {"action": "plan", "tasks": json.dumps(tasks)})
    assert response.status_code == 302
    state = objective(oid)
    assert state.status != "blocked" and state.input_tasks == tasks
    assert state.notes[-1].by == "op"
    drain()
    assert objective(oid).status == "completed"


def test_a_plan_with_commands_needs_the_commands_scope(operator):
    """Q-5: controlling objectives is not running commands on the codex hosts. A staff
    operator without the commands scope may plan prompts, not commands; nothing is
    written for the refused plan."""
    from django.contrib.auth.models import Permission

    oid = blocked_without_plan()
    staff = User.objects.create_user("controller", password="pw", is_staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(codename__in=["control_objective", "view_objectivesummary"])
    )
    client = Client()
    client.force_login(staff)
    before = objective(oid).receipt_count
    tasks = [{"id": "only", "title": "Only", "command": "cat /etc/shadow"}]
    refused = client.post(page_url(oid), {"action": "plan", "tasks": json.dumps(tasks)})
    assert refused.status_code == 200
    assert "need the factory:commands scope" in refused.content.decode()
    assert (objective(oid).receipt_count, objective(oid).status) == (before, "blocked")
    prompts = [{"id": "only", "title": "Only", "prompt": "summarise the notes"}]
    taken = client.post(page_url(oid), {"action": "plan", "tasks": json.dumps(prompts)})
    assert taken.status_code == 302 and objective(oid).input_tasks == prompts


def test_react_with_tasks_is_validated_as_a_plan_for_every_caller():
    oid = blocked_without_plan()
    with pytest.raises(InvalidAction) as refused:
        services.react(oid, by="api", tasks=[{"title": "no command"}])
    assert refused.value.code == "invalid_tasks"
    assert "needs a command or a prompt" in str(refused.value)


def test_job_ids_link_to_job_pages_and_results_read_as_tables(operator):
    oid = create(title="Checked", tasks=ONE_TASK, checks=[{"name": "unit", "command": "echo fine"}])
    drain()
    state = objective(oid)
    html = operator.get(page_url(oid)).content.decode()
    job = v.task_job_id(oid, "t1", 1)
    assert html.count(f'href="/admin/jobs/job/{quote(job)}/change/"') >= 2  # tasks and jobs
    integration = html.split('id="integration"', 1)[1].split("</section>", 1)[0]
    validate = state.integration.validate_job_id
    assert f'href="/admin/jobs/job/{quote(validate)}/change/"' in integration
    row = integration.split('data-check="unit"', 1)[1].split("</tr>", 1)[0]
    assert "<code>echo fine</code>" in row and ">passed</span>" in row
    assert '<details class="rcpt-raw"><summary>raw JSON</summary>' in integration
    audit = html.split('id="audit"', 1)[1].split("</section>", 1)[0]
    assert '<table class="rcpt-table rcpt-facts" id="rcpt-audit">' in audit
    assert '<th scope="row">Receipt chains</th>' in audit and ">verified</span>" in audit
    assert f'href="/admin/jobs/job/{quote(state.audit.job_id)}/change/"' in audit
    assert re.search(r'<td><code>t1</code></td><td><span class="rcpt-status[^"]*">', audit)


def test_the_page_carries_no_requirement_ids(operator):
    oid = blocked_without_plan()
    body = operator.get(page_url(oid)).content.decode().split("<body", 1)[1]
    assert not re.findall(r"\b[A-Z]-\d+\b|SPEC \d", body)
