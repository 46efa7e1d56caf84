"""A-10, Q-1: bearer tokens resolve to principals with scopes and organization binding."""

from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import RequestFactory
from django.utils import timezone

from access import principals
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
    token, secret = ApiToken.issue(name="old")
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    with pytest.raises(BadCredentials):
        principal_for_request(request_with(f"Bearer {secret}"))


def test_staff_session_is_an_operator_and_plain_users_are_nobody():
    users = get_user_model()
    staff = users.objects.create_user("op", password="x", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="change_job"))
    plain = users.objects.create_user("joe", password="x")
    operator = principal_for_request(request_with(user=staff))
    assert operator.name == "op" and operator.organization_id is None
    assert operator.has_scope("jobs:control") and not operator.has_scope("jobs:read")
    assert principal_for_request(request_with(user=plain)) is None
    assert principal_for_request(request_with()) is None


# ---- T-2: the per-process token cache keeps revocation prompt -------------------------------


@pytest.fixture
def token_cache(monkeypatch):
    """An empty token cache and a monotonic clock the test moves (seconds)."""
    principals.forget_tokens()
    clock = [1000.0]
    monkeypatch.setattr(principals, "clock", lambda: clock[0])
    yield clock
    principals.forget_tokens()


def test_a_cached_token_is_refused_as_soon_as_it_is_revoked_and_saved(
    token_cache, django_assert_num_queries
):
    token, secret = ApiToken.issue(name="svc")
    principal_for_request(request_with(f"Bearer {secret}"))  # read, last_used_at written
    with django_assert_num_queries(0):  # served from the cache
        assert principal_for_request(request_with(f"Bearer {secret}")).name == "token:svc"
    token.revoked_at = timezone.now()
    token.save()  # the admin's way: the signal empties the cache
    with pytest.raises(BadCredentials):
        principal_for_request(request_with(f"Bearer {secret}"))


def test_a_cached_token_is_refused_within_the_bound_whatever_revoked_it(token_cache):
    token, secret = ApiToken.issue(name="svc")
    principal_for_request(request_with(f"Bearer {secret}"))
    # another process revokes it (no signal reaches this one)
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    token_cache[0] += principals.TOKEN_CACHE_S / 2
    assert principal_for_request(request_with(f"Bearer {secret}")).name == "token:svc"
    token_cache[0] += principals.TOKEN_CACHE_S / 2 + 0.01
    with pytest.raises(BadCredentials):
        principal_for_request(request_with(f"Bearer {secret}"))
    with pytest.raises(BadCredentials):  # and stays refused: refusals are never cached
        principal_for_request(request_with(f"Bearer {secret}"))


def test_deleting_or_rescoping_a_token_reaches_the_cache_at_once(token_cache):
    token, secret = ApiToken.issue(name="svc", scopes=["jobs:read", "jobs:write"])
    assert principal_for_request(request_with(f"Bearer {secret}")).has_scope("jobs:write")
    token.scopes = ["jobs:read"]
    token.save()
    assert not principal_for_request(request_with(f"Bearer {secret}")).has_scope("jobs:write")
    token.delete()
    with pytest.raises(BadCredentials):
        principal_for_request(request_with(f"Bearer {secret}"))


def test_the_cache_still_records_last_use_once_a_minute(token_cache):
    token, secret = ApiToken.issue(name="svc")
    principal_for_request(request_with(f"Bearer {secret}"))
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    later = timezone.now() + timedelta(minutes=2)
    with mock.patch("access.principals.timezone.now", return_value=later):
        principal_for_request(request_with(f"Bearer {secret}"))  # a cache hit all the same
    assert ApiToken.objects.get(pk=token.pk).last_used_at == later
