"""GET /queues and POST /queues/<group>/pause|resume: pausing a worker group
(`jobs.queues`). Pausing affects every organization's jobs of the group, so only a
credential bound to no organization may do it, with `jobs:control` like abort and retry."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import principal_of
from jobs import queues
from jobs.api import schema
from jobs.api.views import ApiView, actor, read_json_object
from jobs.errors import InvalidRequest, JobsError

GROUP = schema.path_parameter("group", "the worker group", r"^[a-z][a-z0-9_-]{0,31}$")


class OrganizationBound(JobsError):
    code, status = "organization_forbidden", 403

    def __init__(self) -> None:
        super().__init__(
            "a credential bound to an organization cannot pause or resume a queue: "
            "it holds every organization's jobs"
        )


class QueueSerializer(serializers.Serializer):
    group = serializers.CharField(help_text="a built-in or declared worker group")
    paused = serializers.BooleanField()
    pausedBy = serializers.CharField(allow_null=True)
    pausedAt = serializers.IntegerField(allow_null=True, help_text="ms since epoch")
    stream = serializers.CharField(help_text="its receipts: every pause and resume")


class QueueListSerializer(serializers.Serializer):
    queues = QueueSerializer(many=True)


class QueueChangeSerializer(serializers.Serializer):
    by = serializers.CharField(required=False, help_text="a display name shown after yours")


class QueueListView(ApiView):
    required_scope = "jobs:read"

    @extend_schema(
        operation_id="list_queues",
        tags=["queues"],
        summary="List queues",
        description="Every worker group of the deployment, as declared, and whether it is "
        "paused, by whom and since when.",
        responses={
            200: OpenApiResponse(QueueListSerializer, description="every worker group"),
            **schema.errors(),
        },
    )
    def get(self, request: Request) -> Response:
        return Response({"queues": queues.listing()})


class _QueueChangeView(ApiView):
    required_scope = "jobs:control"
    change = staticmethod(queues.pause)

    def post(self, request: Request, group: str) -> Response:
        principal = principal_of(request)
        if principal.organization_id is not None:
            raise OrganizationBound()
        body = read_json_object(request)
        unknown = sorted(set(body) - {"by"})
        if unknown:
            raise InvalidRequest("unknown_field", f"unknown field {unknown[0]}: expected by")
        state = self.change(group, by=actor(principal, body.get("by")))
        return Response({"ok": True, "queue": queues.queue_json(group, state)})


_CHANGED = {
    200: OpenApiResponse(QueueSerializer, description="the queue after the change (`{ok, queue}`)"),
    **schema.errors(400, 404, bad_request="`unknown_field` or `invalid_by`"),
}


@extend_schema_view(
    post=extend_schema(
        operation_id="pause_queue",
        tags=["queues"],
        summary="Pause a queue",
        description="Its jobs stay queued and none starts until it is resumed; running "
        "jobs finish. Recorded with `by`; pausing a paused queue changes nothing.",
        parameters=[GROUP],
        request=QueueChangeSerializer,
        responses=_CHANGED,
    )
)
class QueuePauseView(_QueueChangeView):
    change = staticmethod(queues.pause)


@extend_schema_view(
    post=extend_schema(
        operation_id="resume_queue",
        tags=["queues"],
        summary="Resume a queue",
        description="Its queued jobs start again, oldest first. Recorded with `by`.",
        parameters=[GROUP],
        request=QueueChangeSerializer,
        responses=_CHANGED,
    )
)
class QueueResumeView(_QueueChangeView):
    change = staticmethod(queues.resume)
