"""`POST /jobs/<id>/retry` and `POST /jobs/retry`: retrying failed jobs (`jobs.retry`).

One job: 202 with the job queued again. A job the caller may not see is 404, a job that
is not failed is 409 (a canceled one needs `includeCanceled`). Many: the jobs a filter
matches (`status` is required, so an empty body retries nothing) or a list of ids, at
most `limit` a request, in batches; the answer counts what was retried and skipped and
gives `nextCursor` to go on. An unknown body key is 400: a misspelt filter must never
widen a bulk retry. Needs `jobs:control`, like abort; an organization-bound token
retries its own organization's jobs only.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.permissions import principal_of
from access.principals import Principal
from jobs import retry, selectors
from jobs.api import parameters, schema
from jobs.api.serializers import JobFilter, JobSerializer
from jobs.api.views import ApiView, JobDetailView, actor, read_json_object
from jobs.core.vocabulary import is_job_id
from jobs.errors import InvalidRequest, JobsError
from jobs.models import Job
from receipts.clock import now_ms as wall_clock_ms

ONE_KEYS = ("reason", "by", "includeCanceled")
FILTER_KEYS = ("status", "kind", "agentId", "organizationId", "since", "until")
MANY_KEYS = (*FILTER_KEYS, "jobIds", "limit", "cursor", "reason", "by", "includeCanceled")
DEFAULT_LIMIT = 1000
MAX_LIMIT = 5_000  # a request stays well under a proxy timeout (about 5 ms a job)
MAX_IDS = 1000


class ForeignOrganization(JobsError):
    code, status = "organization_forbidden", 403

    def __init__(self, principal: Principal, organization_id: str) -> None:
        super().__init__(
            f"this credential acts for organization {principal.organization_id} only; "
            f"organizationId is {organization_id!r}"
        )


class RetryRequestSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, max_length=2000)
    by = serializers.CharField(
        required=False, max_length=80, help_text="display hint, recorded as '<principal> (<by>)'"
    )
    includeCanceled = serializers.BooleanField(
        required=False, default=False, help_text="also retry the job if it was canceled"
    )


class RetryResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    job = JobSerializer()
    retry = serializers.IntegerField(help_text="how many times the job has been retried")
    delivery = serializers.CharField(help_text="the driver delivery opened for it")


class BulkRetryRequestSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=["failed", "canceled"], required=False, help_text="required without jobIds"
    )
    kind = serializers.CharField(required=False)
    agentId = serializers.CharField(required=False)
    organizationId = serializers.CharField(required=False)
    since = serializers.CharField(
        required=False, help_text="settled at or after: ms, ISO 8601, or back from now (2h)"
    )
    until = serializers.CharField(required=False, help_text="settled before; as since")
    jobIds = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        max_length=MAX_IDS,
        help_text="instead of a filter",
    )
    limit = serializers.IntegerField(
        required=False,
        help_text=f"jobs taken this request, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})",
    )
    cursor = serializers.CharField(required=False, help_text="nextCursor of the previous answer")
    reason = serializers.CharField(required=False, max_length=2000)
    by = serializers.CharField(required=False, max_length=80)
    includeCanceled = serializers.BooleanField(required=False, help_text="with jobIds only")


class SkippedJobSerializer(serializers.Serializer):
    jobId = serializers.CharField()
    refusal = serializers.CharField(
        help_text="active, completed, canceled, objective or missing (no such job for you)"
    )


class BulkRetryResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    retried = serializers.IntegerField()
    skipped = serializers.IntegerField()
    skippedBy = serializers.DictField(child=serializers.IntegerField())
    skippedJobs = SkippedJobSerializer(many=True, help_text="the first 20 skipped")
    batches = serializers.IntegerField(help_text="transactions the retry took")
    errors = serializers.ListField(child=serializers.CharField(), help_text="failed batches")
    nextCursor = serializers.CharField(allow_null=True, help_text="null when every match was taken")


def _only(body: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise InvalidRequest(
            "unknown_field",
            f"{parameters.shown(unknown[0])} is not a field of this body; it takes "
            f"{', '.join(allowed)}",
        )


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise InvalidRequest(f"invalid_{name}", f"{name} must be true or false")
    return value


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"invalid_{name}", f"{name} must be a string")
    return value


class RetryJobView(ApiView):
    required_scope = "jobs:control"

    @extend_schema(
        operation_id="retry_job",
        tags=["commands"],
        summary="Retry a failed job",
        description="Returns a failed job to the queue with a fresh budget of maxAttempts "
        "attempts and delivers it again; attempt numbers keep counting up, and the job's "
        "next settlement posts its callback again. A canceled job needs `includeCanceled`. "
        "409 `job_not_retryable` when the job is queued, running, completed, canceled "
        "without `includeCanceled`, or part of a Factory objective.",
        parameters=[schema.JOB_ID],
        request=RetryRequestSerializer,
        responses={
            202: OpenApiResponse(RetryResponseSerializer, description="the job, queued again"),
            **schema.errors(400, 404, 409, bad_request=schema.COMMAND_BAD_REQUEST),
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        principal = principal_of(request)
        selectors.visible_job_or_404(principal, job_id)
        body = read_json_object(request)
        _only(body, ONE_KEYS)
        done = retry.retry_job(
            job_id,
            by=actor(principal, body.get("by")),
            include_canceled=_flag(body, "includeCanceled"),
            reason=_text(body, "reason"),
        )
        return Response(done.to_wire(), status=202)


class RetryJobsView(ApiView):
    required_scope = "jobs:control"

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        if request.method == "GET":  # reading the job named "retry" (below) reads
            self.required_scope = JobDetailView.required_scope
        super().initial(request, *args, **kwargs)

    @extend_schema(exclude=True)  # `jobs/retry` is also the path of a job named "retry"
    def get(self, request: Request) -> Response:
        return JobDetailView().get(request, "retry")

    @extend_schema(
        operation_id="retry_jobs",
        tags=["commands"],
        summary="Retry many failed jobs",
        description="Retries the jobs a filter matches (`status` failed or canceled, and "
        "optionally kind, agentId, organizationId, and since/until on when they settled), "
        "or the jobs of `jobIds`, in batches of their own transactions: at most `limit` "
        "jobs a request, oldest settlement first. Only jobs settled before the first "
        "request of a walk are taken; pass `nextCursor` back as `cursor` with the same "
        "filter to go on. Every job is retried or skipped with its reason; an id you "
        "cannot see is skipped as `missing`.",
        request=BulkRetryRequestSerializer,
        examples=[
            OpenApiExample(
                "failed runs of one kind in the last two hours",
                request_only=True,
                value={"status": "failed", "kind": "factory.run", "since": "2h"},
            ),
            OpenApiExample("a list of jobs", request_only=True, value={"jobIds": ["j-1", "j-2"]}),
        ],
        responses={
            200: OpenApiResponse(BulkRetryResponseSerializer, description="what was done"),
            **schema.errors(
                400,
                bad_request="Bad body (malformed_json, body_not_object, unknown_field, "
                "invalid_status, invalid_filter, invalid_since, invalid_until, invalid_limit, "
                "invalid_cursor, invalid_job_ids, invalid_reason, invalid_by); nothing "
                "was written.",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        principal = principal_of(request)
        body = read_json_object(request)
        _only(body, MANY_KEYS)
        by = actor(principal, body.get("by"))
        reason = _text(body, "reason")
        if "jobIds" in body:
            report = self._ids(principal, body, by=by, reason=reason)
        else:
            report = self._filter(principal, body, by=by, reason=reason)
        return Response({"ok": True, **report.to_wire()})

    def _ids(
        self, principal: Principal, body: dict[str, Any], *, by: str, reason: str | None
    ) -> retry.BulkReport:
        given = sorted(set(body) & {*FILTER_KEYS, "limit", "cursor"})
        if given:
            raise InvalidRequest(
                "invalid_job_ids", f"give jobIds or a filter, not both ({given[0]} with jobIds)"
            )
        ids = body["jobIds"]
        if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_IDS:
            raise InvalidRequest(
                "invalid_job_ids", f"jobIds must be a list of 1 to {MAX_IDS} job ids"
            )
        for index, job_id in enumerate(ids):
            if not is_job_id(job_id):
                raise InvalidRequest(
                    "invalid_job_ids",
                    f"jobIds[{index}] is not a job id: {parameters.shown(job_id)}",
                )
        return retry.retry_ids(
            ids,
            by=by,
            include_canceled=_flag(body, "includeCanceled"),
            reason=reason,
            visible=principal.may_see,
        )

    def _filter(
        self, principal: Principal, body: dict[str, Any], *, by: str, reason: str | None
    ) -> retry.BulkReport:
        if "includeCanceled" in body:
            raise InvalidRequest(
                "invalid_includeCanceled",
                "includeCanceled goes with jobIds; a filter asks for canceled jobs with "
                "status canceled",
            )
        status = body.get("status")
        if status not in ("failed", "canceled"):
            raise InvalidRequest(
                "invalid_status",
                "status is required with a filter: failed or canceled; got "
                f"{parameters.shown(status)}",
            )
        given = {name: _text(body, name) for name in ("kind", "agentId", "organizationId")}
        given = {name: value for name, value in given.items() if value is not None}
        filters = JobFilter(given, queryset=Job.objects.none()).selector_filters()
        organization = filters.get("organizationId")
        if organization is not None and not principal.may_see(organization):
            raise ForeignOrganization(principal, organization)
        now = wall_clock_ms()
        cursor = body.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidRequest("invalid_cursor", "cursor is not one this API returned")
        rows = retry.matching(
            filters,
            since_ms=retry.parse_moment(body.get("since"), name="since", now_ms=now),
            until_ms=retry.parse_moment(body.get("until"), name="until", now_ms=now),
            organization_id=principal.organization_id,
        )
        return retry.retry_matching(
            rows,
            by=by,
            statuses=(status,),
            reason=reason,
            limit=parameters.parse_limit(
                body.get("limit"), default=DEFAULT_LIMIT, maximum=MAX_LIMIT
            ),
            cursor=cursor or None,
        )
