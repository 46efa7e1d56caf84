"""U-5, U-7: the objectives board, the objective page with its DAG picture, and actions."""

from __future__ import annotations

import re
from xml.etree import ElementTree

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from objectives.core import vocabulary as v
from tests.integration.objectives.conftest import create, diamond, drain, objective

pytestmark = pytest.mark.django_db(transaction=True)
BOARD = "/admin/objectives/objectivesummary/"


def page(objective_id: str) -> str:
    return reverse("admin:objectives_objectivesummary_change", args=(quote(objective_id),))


@pytest.fixture
def operator():
    user = User.objects.create_superuser("op", "op@example.com", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def csrf(client: Client, url: str) -> str:
    html = client.get(url).content.decode()
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def test_board_groups_objectives_by_section(operator, factory):
    done = create(title="Done one", tasks=[{"title": "x", "command": "true"}])
    drain()
    queued = create(title="Waiting one", tasks=diamond())
    html = operator.get(BOARD).content.decode()
    for title in ("Needs Attention", "Active", "Queued", "Completed", "Archived"):
        assert f"<h2>{title}" in html
    completed = html.split('id="section-completed"')[1].split("</section>")[0]
    assert done in completed and queued not in completed
    assert queued in html.split('id="section-queued"')[1].split("</section>")[0]


def test_objective_page_draws_the_dag_linked_to_task_jobs(operator, factory):
    oid = create(title="Draw me", tasks=diamond())
    drain()
    html = operator.get(page(oid)).content.decode()
    svg = html.split('<svg class="rcpt-dag"')[1].split("</svg>")[0]
    ElementTree.fromstring(f'<svg class="rcpt-dag"{svg}</svg>')  # well-formed XML
    assert len(re.findall(r'class="rcpt-dag-node"', svg)) == 4
    assert len(re.findall(r'class="rcpt-dag-edge"', svg)) == 4  # a->b, a->c, b->d, c->d
    assert 'data-from="b" data-to="d"' in svg
    job = v.task_job_id(oid, "d", 1)
    assert f'href="/admin/jobs/job/{quote(job)}/change/"' in svg
    assert 'data-status="integrated"' in svg
    assert "Audit: recorded" in html and "Task graph" in html


def test_actions_go_through_services_with_the_admin_username(operator, factory):
    oid = create(
        title="Act on me", tasks=[{"title": "x", "command": "true"}], policy={"autoPromote": False}
    )
    drain()
    url = page(oid)
    token = csrf(operator, url)
    response = operator.post(
        url, {"action": "note", "text": "looks good", "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 302
    state = objective(oid)
    assert (state.notes[-1].text, state.notes[-1].by) == ("looks good", "op")
    operator.post(url, {"action": "promote", "csrfmiddlewaretoken": token})
    drain()
    assert objective(oid).status == "completed"
    operator.post(url, {"action": "archive", "csrfmiddlewaretoken": token})
    assert objective(oid).archived


def test_cancel_from_the_admin_is_confirmed_first(operator, factory):
    """Without JavaScript a cancel shows a confirmation page; only the confirmed post
    cancels."""
    oid = create(title="Cancel me", tasks=diamond())
    url = page(oid)
    token = csrf(operator, url)
    asked = operator.post(url, {"action": "cancel", "csrfmiddlewaretoken": token})
    assert asked.status_code == 200
    html = asked.content.decode()
    assert 'id="rcpt-cancel-confirm-form"' in html and "Yes, cancel the objective" in html
    assert 'name="confirmed" value="yes"' in html
    assert objective(oid).status != "canceled"
    operator.post(url, {"action": "cancel", "confirmed": "yes", "csrfmiddlewaretoken": token})
    assert objective(oid).status == "canceled"


def test_posts_need_csrf_and_the_control_permission(factory):
    oid = create(title="Guarded", tasks=diamond())
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_objectivesummary"))
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    url = page(oid)
    assert client.get(url).status_code == 200
    assert "rcpt-objective-actions" not in client.get(url).content.decode()
    assert client.post(url, {"action": "archive"}).status_code == 403  # no CSRF token
    response = client.post(url, {"action": "archive", "csrfmiddlewaretoken": csrf(client, url)})
    assert response.status_code == 403
    assert not objective(oid).archived


def _task_counts(html: str, oid: str) -> str:
    row = html.split(f'data-objective="{oid}"')[1].split("</tr>")[0]
    return " ".join(re.findall(r'<span class="rcpt-type">([^<]+)</span>', row))


def _shown(html: str, task_id: str) -> str:
    svg = html.split('<svg class="rcpt-dag"')[1].split("</svg>")[0]
    return re.search(rf'data-task="{task_id}" data-status="([a-z_]+)"', svg).group(1)


def test_queued_work_is_drawn_queued_and_a_canceled_objective_runs_nothing(operator, factory):
    """U-5, O-3, O-11: a dispatched task whose job waits in the queue is `queued` on the
    board, the graph and the task table; it is `running` once a worker started it; after
    a cancel nothing is shown running."""
    from jobs import queue
    from tests.integration.objectives.conftest import dispatch, queued, work

    oid = create(title="Not started", tasks=diamond())
    work(queued()[0])  # the first control pass dispatches task a
    job_id = v.task_job_id(oid, "a", 1)
    assert queue.get(job_id).status == "queued"
    assert _task_counts(operator.get(BOARD).content.decode(), oid) == "pending 3 queued 1"
    html = operator.get(page(oid)).content.decode()
    assert _shown(html, "a") == "queued"
    assert 'rcpt-status-queued">queued</span>' in html.split('id="rcpt-tasks"')[1]
    assert queue.lease(job_id, worker_id="w:1", start=True).job.status == "running"
    assert _task_counts(operator.get(BOARD).content.decode(), oid) == "pending 3 running 1"
    assert _shown(operator.get(page(oid)).content.decode(), "a") == "running"
    assert dispatch("cancel", objectiveId=oid).status == "completed"
    assert objective(oid).status == "canceled"
    counts = _task_counts(operator.get(BOARD).content.decode(), oid)
    assert counts == "pending 3 stopped 1"
    html = operator.get(page(oid)).content.decode()
    assert (
        _shown(html, "a") == "stopped" and "running" not in html.split("<dt>Progress</dt>")[1][:200]
    )
