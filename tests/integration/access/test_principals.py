"""A-10, Q-1: bearer tokens resolve to principals with scopes and organization binding."""

import pytest
from django.contrib.auth import get_user_model
from django.test import RequestFactory

from access.models import ApiToken
from access.principals import BadCredentials, principal_for_request

pytestmark = pytest.mark.django_db


def request_with(header=None, user=None):
    request = (
        RequestFactory().get("/jobs", HTTP_AUTHORIZATION=header)
        if header
        else (RequestFactory().get("/jobs"))
    )
    request.user = user
    return request


def test_valid_token_gives_its_scopes_and_organization():
    _, secret = ApiToken.issue(name="svc", organization_id="org-1", scopes=["jobs:read"])
    principal = principal_for_request(request_with(f"Bearer {secret}"))
    assert principal.organization_id == "org-1" and principal.name == "token:svc"
    assert principal.has_scope("jobs:read") and not principal.has_scope("jobs:write")
    assert principal.may_see("org-1") and not principal.may_see("org-2")
    assert ApiToken.objects.get(name="svc").last_used_at is not None


@pytest.mark.parametrize("header", ["Bearer rcpt_nope", "Token abc", "Bearer ", "Basic x"])
def test_bad_credentials_are_refused(header):
    with pytest.raises(BadCredentials):
        principal_for_request(request_with(header))


def test_revoked_token_is_refused():
    from django.utils import timezone

    token, secret = ApiToken.issue(name="old")
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    with pytest.raises(BadCredentials):
        principal_for_request(request_with(f"Bearer {secret}"))


def test_staff_session_is_an_operator_and_plain_users_are_nobody():
    users = get_user_model()
    staff = users.objects.create_user("op", password="x", is_staff=True)
    plain = users.objects.create_user("joe", password="x")
    operator = principal_for_request(request_with(user=staff))
    assert operator.name == "op" and operator.organization_id is None
    assert operator.has_scope("jobs:control")
    assert principal_for_request(request_with(user=plain)) is None
    assert principal_for_request(request_with()) is None
