"""OpenAPI helpers for the jobs API (A-11): error responses, parameters, the docs page.

Views describe themselves with `extend_schema`; this module keeps the repeated parts
(the error shape per status, the list filters as query parameters, path parameters)
in one place so the schema and the code cannot drift apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import django_filters
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from jobs.api.parameters import limit_text
from jobs.api.serializers import ErrorSerializer

_ERROR_TEXT = {
    400: "Bad input (malformed_json, body_not_object, invalid_lane, unknown_kind ...); "
    "nothing was written.",
    401: "No or bad credentials (not_authenticated, invalid_token).",
    403: "Missing scope (missing_scope), organization mismatch (organization_forbidden) "
    "or a failed CSRF check (csrf_failed).",
    404: "No such job, or a job of another organization (job_not_found).",
    405: "Method not allowed (method_not_allowed).",
    409: "Conflict: the job is terminal (job_terminal), or an id or session key belongs "
    "to another organization (job_id_taken, session_key_conflict).",
    413: "The body or payload is larger than RECEIPT_MAX_PAYLOAD_BYTES (payload_too_large).",
}


LIST_BAD_REQUEST = (
    "Bad query parameter: a filter outside its allowed values (invalid_filter, "
    "the detail lists them), invalid_limit, invalid_cursor, repeated_parameter, "
    "unknown_parameter."
)
COMMAND_BAD_REQUEST = (
    "Bad body (malformed_json, body_not_object, invalid_payload, invalid_by, "
    "invalid_reason); nothing was written."
)


def errors(*statuses: int, bad_request: str | None = None) -> dict[int, OpenApiResponse]:
    """Error responses for `statuses`, plus the 401/403 every endpoint may answer;
    `bad_request` describes the operation's own 400 causes."""
    codes = sorted({401, 403, *statuses})
    text = {**_ERROR_TEXT, **({400: bad_request} if bad_request else {})}
    return {code: OpenApiResponse(ErrorSerializer, description=text[code]) for code in codes}


def path_parameter(name: str, description: str, pattern: str | None = None) -> OpenApiParameter:
    return OpenApiParameter(
        name, OpenApiTypes.STR, OpenApiParameter.PATH, description=description, pattern=pattern
    )


JOB_ID = path_parameter("job_id", "the job id", r"^[A-Za-z0-9._:-]{1,128}$")
AGENT_ID = path_parameter(
    "agent_id", "the agent that runs the job (factory, codex, ...)", r"^[^\s/]{1,128}$"
)


def query_parameter(
    name: str,
    description: str,
    value_type: OpenApiTypes = OpenApiTypes.STR,
    enum: list[str] | None = None,
) -> OpenApiParameter:
    return OpenApiParameter(
        name, value_type, OpenApiParameter.QUERY, enum=enum, description=description
    )


def limit_parameter(default: int, maximum: int, *, prefix: str = "") -> OpenApiParameter:
    """`limit` as every list reads it (jobs.api.parameters), `prefix` saying of what."""
    return query_parameter("limit", prefix + limit_text(default, maximum), OpenApiTypes.INT)


def filter_parameters(filterset: type[django_filters.FilterSet]) -> list[OpenApiParameter]:
    """Query parameters from a FilterSet's declared filters (choice filters become enums)."""
    out = []
    for name, declared in filterset.base_filters.items():
        choices = declared.extra.get("choices")
        if callable(choices):  # open sets (payload kinds: the deployment may add its own)
            choices = None
        enum = [value for value, _label in choices] if choices else None
        out.append(query_parameter(name, f"only jobs whose {name} equals this", enum=enum))
    return out


if TYPE_CHECKING:  # the mixin goes before an APIView: typed as one for super() and self.request
    from rest_framework.views import APIView as _ViewBase
else:
    _ViewBase = object


class JsonErrorsMixin(_ViewBase):
    """Errors of a view whose success is YAML or HTML still render as the JSON error shape."""

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = "application/json"
        return response


class ApiSchemaView(JsonErrorsMixin, SpectacularAPIView):
    """The OpenAPI 3 schema (A-11): YAML by default, `?format=json` for JSON."""


class ApiDocsView(JsonErrorsMixin, SpectacularSwaggerView):
    """Swagger UI with local assets (A-11); a browser without a session goes to the login."""

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, exceptions.NotAuthenticated) and "HTTP_AUTHORIZATION" not in (
            self.request.META
        ):
            return redirect_to_login(self.request.get_full_path(), settings.LOGIN_URL)
        return super().handle_exception(exc)
