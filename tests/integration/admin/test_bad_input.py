"""Q-3, U-7: bad input in the admin is a 404 or a form error, never a 500."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import quote

from access.models import ApiToken
from tests.integration.admin.conftest import words

pytestmark = pytest.mark.django_db
TOKEN_ADD = "/admin/access/apitoken/add/"


def objective_page(objective_id: str) -> str:
    return f"/admin/objectives/objectivesummary/{quote(objective_id)}/change/"


@pytest.mark.parametrize("objective_id", ["obj-missing", "x" * 300, "a/b c"])
def test_an_unknown_objective_is_a_404(admin_client, objective_id):
    """U-5, Q-3: the objective page of an id nobody knows."""
    assert admin_client.get(objective_page(objective_id)).status_code == 404
    response = admin_client.post(objective_page(objective_id), {"action": "note", "text": "hi"})
    assert response.status_code == 404


def test_an_unknown_scope_in_the_token_form_is_a_form_error(admin_client):
    """A-10, Q-3: the scopes are the known ones; anything else is refused by the form."""
    response = admin_client.post(TOKEN_ADD, {"name": "svc", "scopes": ["jobs:read", "bogus"]})
    assert response.status_code == 200
    assert "Select a valid choice. bogus is not one of the available choices." in words(response)
    assert not ApiToken.objects.exists()


def test_the_token_form_issues_a_token_with_the_ticked_scopes(admin_client):
    """A-10: ticked scopes in the contract's order; none ticked is every scope."""
    response = admin_client.post(TOKEN_ADD, {"name": "svc", "scopes": ["jobs:read", "jobs:write"]})
    assert response.status_code == 302
    assert ApiToken.objects.get(name="svc").scopes == ["jobs:write", "jobs:read"]
    admin_client.post(TOKEN_ADD, {"name": "all"})
    assert ApiToken.objects.get(name="all").scopes == [
        "jobs:write",
        "jobs:read",
        "jobs:control",
        "objectives:read",
        "factory:commands",
    ]
    token = ApiToken.objects.get(name="svc")
    change = f"/admin/access/apitoken/{token.pk}/change/"
    page = admin_client.get(change)
    assert page.status_code == 200
    assert re.search(r'value="jobs:read"[^>]* checked', page.content.decode())
    refused = admin_client.post(change, {"name": "svc", "scopes": ["nope"]})
    assert refused.status_code == 200
    assert ApiToken.objects.get(pk=token.pk).scopes == ["jobs:write", "jobs:read"]
