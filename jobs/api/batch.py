"""`POST /agents/<agentId>/jobs/batch`: up to 1,000 enqueues in one request and one
transaction, each item validated on its own.

An item is an enqueue body of either style (the payload wrapped with options, or a flat
payload). Items that fail validation are answered with their error and written nowhere;
the valid ones are enqueued together (`queue.enqueue_many`), in order, idempotent per
`jobId`. A refusal that only the transaction can see (another organization's `jobId` or
session) refuses the whole batch, naming the item, so an answer never describes writes
that were rolled back.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import principal_of
from access.principals import Principal
from jobs import queue, validation
from jobs.api import schema
from jobs.api.views import (
    ApiView,
    _organization_of,
    enqueue_request,
    read_json_object,
    require_commands_scope,
)
from jobs.errors import InvalidRequest, JobIdTaken, JobsError, SessionKeyConflict

MAX_ITEMS = 1000


class BatchRequestSerializer(serializers.Serializer):
    jobs = serializers.ListField(
        child=serializers.DictField(),
        min_length=1,
        max_length=MAX_ITEMS,
        help_text="enqueue bodies, as for one job (payload with options, or a flat payload)",
    )


class BatchItemSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="position in the request's jobs")
    ok = serializers.BooleanField()
    jobId = serializers.CharField(required=False)
    status = serializers.CharField(required=False)
    created = serializers.BooleanField(
        required=False, help_text="false when the jobId already named a job"
    )
    warnings = serializers.ListField(child=serializers.CharField(), required=False)
    error = serializers.CharField(required=False, help_text="the error code, as for one job")
    detail = serializers.CharField(required=False)


class BatchResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField(help_text="true when every item was enqueued")
    enqueued = serializers.IntegerField()
    refused = serializers.IntegerField()
    results = BatchItemSerializer(many=True)


def _items(body: dict[str, Any]) -> list[Any]:
    items = body.get("jobs")
    if not isinstance(items, list) or not items:
        raise InvalidRequest("invalid_batch", 'the body must be {"jobs": [enqueue bodies]}')
    if len(items) > MAX_ITEMS:
        raise InvalidRequest(
            "batch_too_large", f"a batch holds at most {MAX_ITEMS} jobs; got {len(items)}"
        )
    return items


def _validated(
    principal: Principal, agent_id: str, item: Any
) -> tuple[validation.EnqueueRequest, list[str]]:
    if not isinstance(item, dict):
        raise InvalidRequest("body_not_object", "each item must be a JSON object")
    request, warnings = enqueue_request(agent_id, item, by=principal.name)
    organization = _organization_of(request.payload)
    if not principal.may_see(organization):
        raise InvalidRequest(
            "organization_forbidden",
            f"this credential acts for organization {principal.organization_id} "
            f"only; payload.authContext.organizationId is {organization!r}",
        )
    require_commands_scope(principal, request.payload)
    return request, warnings


def enqueue_batch(principal: Principal, agent_id: str, items: list[Any]) -> dict[str, Any]:
    results: list[dict[str, Any] | None] = [None] * len(items)
    valid: list[tuple[int, validation.EnqueueRequest, list[str]]] = []
    for index, item in enumerate(items):
        try:
            request, warnings = _validated(principal, agent_id, item)
        except JobsError as error:
            results[index] = {
                "index": index,
                "ok": False,
                "error": error.code,
                "detail": str(error),
            }
            continue
        valid.append((index, request, warnings))
    if valid:
        try:  # one transaction: a refusal only it can see rolls everything back
            written = queue.enqueue_many(
                [request for _, request, _ in valid], organization=principal.organization_id
            )
        except (JobIdTaken, SessionKeyConflict) as error:
            raise _named(error, valid[error.index or 0][0]) from None
        for (index, _, warnings), result in zip(valid, written, strict=True):
            results[index] = {
                "index": index,
                "ok": True,
                "jobId": result.job.job_id,
                "status": result.job.status,
                "created": result.created,
                **({"warnings": w} if (w := [*result.warnings, *warnings]) else {}),
            }
    done = [r for r in results if r is not None]
    enqueued = sum(1 for r in done if r["ok"])
    return {
        "ok": enqueued == len(done),
        "enqueued": enqueued,
        "refused": len(done) - enqueued,
        "results": done,
    }


def _named(error: JobsError, index: int) -> JobsError:
    error.args = (f"jobs[{index}]: {error}",)
    return error


class BatchEnqueueView(ApiView):
    required_scope = "jobs:write"

    @extend_schema(
        operation_id="enqueue_jobs_batch",
        tags=["jobs"],
        summary="Enqueue many jobs at once",
        description=f"Up to {MAX_ITEMS} enqueue bodies in one request and one transaction. Each "
        "item is validated on its own: an invalid item is answered with its error "
        "and the others are enqueued (202). When no item can be enqueued the answer "
        "is 400 `batch_refused` with the per-item results. Another organization's "
        "jobId or session refuses the whole batch (409), naming the item.",
        parameters=[schema.AGENT_ID],
        request=BatchRequestSerializer,
        examples=[
            OpenApiExample(
                "two jobs",
                request_only=True,
                value={
                    "jobs": [
                        {
                            "payload": {
                                "kind": "factory.run",
                                "prompt": "one",
                                "authContext": {"userId": "u-1", "organizationId": "org-1"},
                            }
                        },
                        {
                            "jobId": "report-7",
                            "payload": {
                                "kind": "factory.run",
                                "prompt": "two",
                                "authContext": {"userId": "u-1", "organizationId": "org-1"},
                            },
                        },
                    ]
                },
            )
        ],
        responses={
            202: OpenApiResponse(
                BatchResponseSerializer,
                description="at least one job enqueued: every item's result, in order",
            ),
            **schema.errors(
                400,
                409,
                413,
                bad_request=(
                    "Bad body (malformed_json, body_not_object, invalid_payload, "
                    "invalid_batch, batch_too_large), or no item could be enqueued "
                    "(batch_refused, "
                    "with the per-item results); nothing was written."
                ),
            ),
        },
    )
    def post(self, request: Request, agent_id: str) -> Response:
        principal = principal_of(request)
        body = read_json_object(request, levels_above_payload=4)  # body > jobs > [i] > payload
        answer = enqueue_batch(principal, agent_id, _items(body))
        if answer["enqueued"]:
            return Response(answer, status=202)
        first = answer["results"][0]
        detail = f"no job was enqueued; jobs[0]: {first['detail']}"
        return Response(
            {"ok": False, "error": "batch_refused", "detail": detail, "results": answer["results"]},
            status=400,
        )
