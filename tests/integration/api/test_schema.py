"""A-11: the OpenAPI schema is valid OpenAPI 3, describes each operation on its own, and
documents the plain Django views (live events, wait, health, metrics) too."""

from __future__ import annotations

import json
import re

import pytest
from openapi_spec_validator import validate

pytestmark = pytest.mark.django_db

REQUIREMENT_ID = re.compile(r"\b[A-Z]-\d+\b|SPEC \d+")


@pytest.fixture
def schema(api) -> dict:
    response = api.client.get("/api/schema/", {"format": "json"}, **api.headers())
    assert response.status_code == 200
    return response.json()


def _operations(schema: dict):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield f"{method.upper()} {path}", operation


def test_the_schema_is_valid_openapi(schema):
    validate(schema)


def test_each_operation_has_its_own_description(schema):
    descriptions: dict[str, str] = {}
    for name, operation in _operations(schema):
        text = operation.get("description", "")
        assert text.strip(), f"{name} has no description"
        assert "Base of" not in text and "scope each one needs" not in text, name
        assert text not in descriptions.values(), f"{name} shares its description"
        descriptions[name] = text


def test_the_schema_carries_no_requirement_ids(schema):
    # summaries, descriptions, field help and examples are read by users, not the contract
    assert REQUIREMENT_ID.findall(json.dumps(schema)) == []


def test_every_success_response_is_described(schema):
    for name, operation in _operations(schema):
        for status, response in operation["responses"].items():
            if status.startswith("2"):
                assert response.get("description", "").strip(), (name, status)


def test_list_jobs_documents_only_its_own_errors(schema):
    responses = schema["paths"]["/jobs"]["get"]["responses"]
    assert set(responses) == {"200", "400", "401", "403"}
    bad = responses["400"]["description"]
    assert "invalid_filter" in bad and "invalid_limit" in bad and "repeated_parameter" in bad
    assert "malformed_json" not in bad and "unknown_kind" not in bad
    limit = next(p for p in schema["paths"]["/jobs"]["get"]["parameters"] if p["name"] == "limit")
    assert "from 1 to 500" in limit["description"]


@pytest.mark.parametrize("path", ["/jobs/{job_id}/events", "/receipt/stream"])
def test_the_event_streams_are_documented_as_text_event_stream(schema, path):
    operation = schema["paths"][path]["get"]
    assert "text/event-stream" in operation["responses"]["200"]["content"]
    assert {"401", "501", "503"} <= set(operation["responses"])


def test_wait_health_and_metrics_are_documented(schema):
    paths = schema["paths"]
    wait = paths["/jobs/{job_id}/wait"]["get"]
    assert wait["deprecated"] and wait["responses"]["200"]["content"]["application/json"]
    assert set(paths["/readyz"]["get"]["responses"]) == {"200", "503"}
    assert {} in paths["/healthz"]["get"]["security"]  # open: a token only adds detail
    assert "text/plain" in paths["/metrics"]["get"]["responses"]["200"]["content"]
