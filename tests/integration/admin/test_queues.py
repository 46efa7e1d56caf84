"""Issue 34 item 5: the admin's Queues page lists every worker group with its pause and
pauses or resumes one, recorded with the admin as `by`; a viewer cannot act."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote

from receipts import store
from tests.integration.admin.conftest import grant, text, words

pytestmark = pytest.mark.django_db

LIST = "/admin/jobs/queue/"


def test_pause_and_resume_from_the_queues_page_with_the_admin_as_by(admin_client):
    page = text(admin_client.get(LIST))
    assert 'data-group="chat"' in page and 'value="pause"' in page
    response = admin_client.post(LIST, {"group": "codex", "verb": "pause"}, follow=True)
    assert "Queue codex paused by admin." in words(response)
    assert "paused by admin" in words(response)
    assert [(r.type, r.body["by"]) for r in store.read("queues/codex")] == [
        ("queue.paused", "admin")
    ]
    response = admin_client.post(LIST, {"group": "codex", "verb": "resume"}, follow=True)
    assert "Queue codex resumed by admin." in words(response)
    assert [r.type for r in store.read("queues/codex")] == ["queue.paused", "queue.resumed"]


def test_a_group_name_the_admin_quotes_leads_to_its_own_stream(admin_client):
    response = admin_client.get(f"{LIST}{quote('bulk_mail')}/change/")  # `_` is `_5F`
    assert response["Location"].endswith(
        f"/admin/receipts/stream/{quote('queues/bulk_mail')}/change/"
    )


def test_only_a_group_with_a_history_links_to_it(admin_client):
    admin_client.post(LIST, {"group": "codex", "verb": "pause"})
    page = text(admin_client.get(LIST))
    assert f'href="/admin/receipts/stream/{quote("queues/codex")}/change/"' in page
    assert quote("queues/chat") not in page  # never paused: no stream to open


def test_an_unknown_group_is_refused_and_writes_nothing(admin_client):
    response = admin_client.post(LIST, {"group": "nope", "verb": "pause"}, follow=True)
    assert "Refused: queue nope not found" in words(response)
    assert store.read("queues/nope") == []


def test_a_viewer_sees_the_queues_and_cannot_act(client, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    grant(user, "jobs", "view_queue")
    client.force_login(user)
    page = client.get(LIST)
    assert page.status_code == 200 and 'data-group="chat"' in text(page)
    assert 'value="pause"' not in text(page)
    assert client.post(LIST, {"group": "chat", "verb": "pause"}).status_code == 403
    assert store.read("queues/chat") == []
