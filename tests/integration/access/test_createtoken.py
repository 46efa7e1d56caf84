"""A-10, Q-1: tokens are printed once, stored hashed, scoped and optionally org-bound."""

from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.base import CommandError

from access import tokens
from access.models import ApiToken

pytestmark = pytest.mark.django_db


def create(*args):
    out = StringIO()
    call_command("createtoken", *args, stdout=out)
    return out.getvalue().rstrip("\n").split("\n")


def test_token_is_the_last_line_and_only_its_digest_is_stored():
    lines = create("--name", "ci")
    secret = lines[-1]
    assert secret.startswith("rcpt_") and len(secret) > 40
    row = ApiToken.objects.get(name="ci")
    assert row.digest == tokens.digest(secret)
    assert secret not in (row.digest, row.prefix)
    assert tokens.matches(secret, row.digest) and not tokens.matches(secret + "x", row.digest)
    assert row.scopes == list(tokens.SCOPES) and row.organization_id is None


def test_without_factory_the_default_leaves_out_factorys_scopes(monkeypatch):
    monkeypatch.setattr(apps, "is_installed", lambda name: name != "objectives")
    lines = create("--name", "plain")
    assert "scopes jobs:write,jobs:read,jobs:control;" in lines[0]
    assert ApiToken.objects.get(name="plain").scopes == ["jobs:write", "jobs:read", "jobs:control"]


def test_scopes_and_organization_are_recorded():
    create("--name", "reader", "--org", "org-1", "--scopes", "jobs:read", "objectives:read")
    row = ApiToken.objects.get(name="reader")
    assert row.organization_id == "org-1"
    assert row.scopes == ["jobs:read", "objectives:read"]
    assert row.has_scope("jobs:read") and not row.has_scope("jobs:write")


def test_unknown_scope_is_refused_and_nothing_is_created():
    with pytest.raises(CommandError, match="unknown scope"):
        create("--name", "bad", "--scopes", "jobs:everything")
    assert not ApiToken.objects.filter(name="bad").exists()
