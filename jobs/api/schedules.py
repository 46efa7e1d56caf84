"""GET /schedules: the schedules with their next run, last run and last outcome, a keyset
page by name. An organization-bound token sees the schedules whose payload names its
organization. Pausing, resuming and running one now are operator actions: the admin and
`manage.py jobs schedules`."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import principal_of
from jobs import schedules
from jobs.api import schema
from jobs.api.views import ApiView
from jobs.core.schedules import STREAM_PREFIX, name_from_stream
from jobs.errors import InvalidRequest

DEFAULT_LIMIT, MAX_LIMIT = 100, 500


class ScheduleSerializer(serializers.Serializer):
    name = serializers.CharField()
    trigger = serializers.CharField(help_text="`cron <expression> (<timezone>)` or `every <n> s`")
    agentId = serializers.CharField()
    kind = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=["active", "paused", "removed"])
    missed = serializers.ChoiceField(
        choices=["run_once", "skip"], help_text="what happens to ticks missed while nothing ran"
    )
    source = serializers.ChoiceField(choices=["settings", "code"], allow_null=True)
    nextRunAt = serializers.IntegerField(
        allow_null=True, help_text="ms since epoch; null unless active"
    )
    lastRunAt = serializers.IntegerField(allow_null=True, help_text="ms since epoch")
    lastJobId = serializers.CharField(allow_null=True, help_text="the last run's job")
    lastOutcome = serializers.CharField(
        allow_null=True, help_text="that job's status; null when there is none (any more)"
    )
    lastError = serializers.CharField(
        allow_null=True, help_text="why the last tick's enqueue was refused, if it was"
    )
    pausedBy = serializers.CharField(allow_null=True)
    pausedAt = serializers.IntegerField(allow_null=True, help_text="ms since epoch")
    stream = serializers.CharField(help_text="its receipts: every declaration, tick and action")


class SchedulePageSerializer(serializers.Serializer):
    schedules = ScheduleSerializer(many=True)
    nextCursor = serializers.CharField(
        allow_null=True, help_text="pass as ?cursor= for the next page; null at the end"
    )


class ScheduleListView(ApiView):
    required_scope = "jobs:read"
    query_parameters = ("limit", "cursor")

    @extend_schema(
        operation_id="list_schedules",
        tags=["schedules"],
        summary="List schedules",
        description="The cron and interval schedules declared in settings or code, by "
        "name, each with its next run, its last run and the status of that run's job. "
        "Pass `nextCursor` back as `cursor` for the next page.",
        parameters=[
            schema.limit_parameter(DEFAULT_LIMIT, MAX_LIMIT),
            schema.query_parameter("cursor", "nextCursor of the previous page"),
        ],
        responses={
            200: OpenApiResponse(SchedulePageSerializer, description="one page of schedules"),
            **schema.errors(
                400, bad_request="`invalid_limit`, `invalid_cursor` or `repeated_parameter`"
            ),
        },
    )
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        limit = self.limit(DEFAULT_LIMIT, MAX_LIMIT)
        cursor = request.query_params.get("cursor") or None
        if cursor is not None and name_from_stream(STREAM_PREFIX + cursor) is None:
            raise InvalidRequest("invalid_cursor", "cursor is not one this API returned")
        found = schedules.listing(
            organization_id=principal.organization_id, after=cursor, limit=limit + 1
        )
        page = found[:limit]
        more = len(found) > limit
        return Response({"schedules": page, "nextCursor": page[-1]["name"] if more else None})
