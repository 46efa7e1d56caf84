"""The objectives HTTP API (A-9): thin read views over selectors and presenters.

Every view needs the `objectives:read` scope (access.permissions.HasScope); an
organization-bound caller sees only its organization's objectives, and another's are
404 `objective_not_found`, exactly like a missing one (Q-2). Objectives are created and
changed through `factory.dispatch` jobs, never here.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import principal_of
from jobs.api import schema
from jobs.api.serializers import ErrorSerializer
from jobs.api.views import ApiView
from objectives import presenters, selectors
from objectives.core.state import ObjectiveState
from objectives.core.vocabulary import objective_stream
from receipts import store

DEFAULT_RECEIPTS, MAX_RECEIPTS = 40, 1000
LIST_LIMIT, MAX_LIST_LIMIT = 100, 500
OBJECTIVE_ID = schema.path_parameter("objective_id", "the objective id")


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    text = {
        400: "Bad query parameter (invalid_limit, repeated_parameter, unknown_parameter).",
        401: "No or bad credentials (not_authenticated, invalid_token).",
        403: "Missing the objectives:read scope (missing_scope).",
        404: "No such objective, or one of another organization (objective_not_found).",
    }
    return {
        code: OpenApiResponse(ErrorSerializer, description=text[code])
        for code in sorted({401, 403, *statuses})
    }


class _View(ApiView):
    # No docstring: drf-spectacular would show it as every operation's description.
    required_scope = "objectives:read"

    def objective(self, request: Request, objective_id: str) -> ObjectiveState:
        principal = principal_of(request)
        return selectors.visible(objective_id, organization_id=principal.organization_id)


class ObjectiveListSerializer(serializers.Serializer):
    objectives = serializers.ListField(child=serializers.DictField())
    board = serializers.ListField(
        child=serializers.DictField(),
        help_text="sections: Needs Attention, Active, Queued, Completed, Archived",
    )


class ObjectiveDetailSerializer(serializers.Serializer):
    objective = serializers.DictField()
    tasks = serializers.ListField(child=serializers.DictField())
    jobs = serializers.ListField(child=serializers.DictField())


class ObjectiveReceiptsSerializer(serializers.Serializer):
    receipts = serializers.ListField(child=serializers.DictField())


class LiveStatusSerializer(serializers.Serializer):
    objectiveProgress = serializers.DictField()


class ObjectiveListView(_View):
    query_parameters = ("limit",)

    @extend_schema(
        operation_id="list_objectives",
        tags=["objectives"],
        summary="Objectives and the board",
        description="The caller's objectives, newest change first, and the same "
        "objectives grouped into the board's sections (Needs Attention, "
        "Active, Queued, Completed, Archived).",
        parameters=[
            schema.limit_parameter(LIST_LIMIT, MAX_LIST_LIMIT, prefix="objectives per section, ")
        ],
        responses={
            200: OpenApiResponse(
                ObjectiveListSerializer, description="the objectives and the board"
            ),
            **_errors(400),
        },
    )
    def get(self, request: Request) -> Response:
        org = principal_of(request).organization_id
        sections = selectors.board(
            organization_id=org, limit=self.limit(LIST_LIMIT, MAX_LIST_LIMIT)
        )
        board = presenters.board_json(sections)
        flat: list[dict[str, Any]] = sorted(
            (item for section in board for item in section["objectives"]),
            key=lambda item: (-item["updatedAt"], item["id"]),
        )
        return Response({"objectives": flat, "board": board})


class ObjectiveDetailView(_View):
    @extend_schema(
        operation_id="get_objective",
        tags=["objectives"],
        summary="One objective with its tasks and jobs",
        description="The objective's state (status, phase, mode, title ...), its "
        "tasks and the jobs it started.",
        parameters=[OBJECTIVE_ID],
        responses={
            200: OpenApiResponse(ObjectiveDetailSerializer, description="the objective"),
            **_errors(404),
        },
    )
    def get(self, request: Request, objective_id: str) -> Response:
        state = self.objective(request, objective_id)
        jobs = selectors.objective_jobs(state.objective_id)
        return Response(presenters.detail_json(state, jobs))


class ObjectiveReceiptsView(_View):
    query_parameters = ("limit",)

    @extend_schema(
        operation_id="list_objective_receipts",
        tags=["objectives"],
        summary="The objective's latest receipts, oldest first",
        description="The last `limit` receipts of the objective's stream, in stream order.",
        parameters=[
            OBJECTIVE_ID,
            schema.limit_parameter(DEFAULT_RECEIPTS, MAX_RECEIPTS),
        ],
        responses={
            200: OpenApiResponse(ObjectiveReceiptsSerializer, description="the latest receipts"),
            **_errors(400, 404),
        },
    )
    def get(self, request: Request, objective_id: str) -> Response:
        limit = self.limit(DEFAULT_RECEIPTS, MAX_RECEIPTS)
        state = self.objective(request, objective_id)
        after = max(0, state.receipt_count - limit)
        receipts = store.read(objective_stream(state.objective_id), after=after, limit=limit)
        return Response({"receipts": [r.to_wire() for r in receipts]})


class ObjectiveLiveStatusView(_View):
    @extend_schema(
        operation_id="get_objective_live_status",
        tags=["objectives"],
        summary="What the objective is doing now",
        description="The objective's progress: status, phase, a summary, the "
        "active job and task, and the tails of its output.",
        parameters=[OBJECTIVE_ID],
        responses={
            200: OpenApiResponse(LiveStatusSerializer, description="the objective's progress"),
            **_errors(404),
        },
    )
    def get(self, request: Request, objective_id: str) -> Response:
        state = self.objective(request, objective_id)
        return Response({"objectiveProgress": presenters.live_status(state)})
