"""The front door: `/` opens the admin, browsers get an icon instead of a logged 404."""

from __future__ import annotations

import logging

import pytest

pytestmark = pytest.mark.django_db


def test_root_redirects_to_the_admin(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"] == "/admin/"


def test_favicon_is_served_without_credentials_and_without_a_warning(client, caplog):
    with caplog.at_level(logging.WARNING):
        response = client.get("/favicon.ico")
    assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml"
    assert response.content.startswith(b"<svg") and "max-age" in response["Cache-Control"]
    assert not [r for r in caplog.records if "favicon" in r.getMessage()]
