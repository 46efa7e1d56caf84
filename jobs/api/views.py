"""The jobs HTTP API (SPEC 9: A-1 to A-5): thin views over the queue service and selectors.

Each view authenticates (access.authentication), checks its scope and the caller's
organization (access.permissions), parses the raw body itself so malformed JSON and
non-object bodies get their own codes, calls one service or selector, and renders with
`jobs.presenters.job_json`. Views never write receipts themselves, and every refusal
happens before the service writes anything. Errors are rendered by
`receipt_site.api_errors`.
"""

from __future__ import annotations

import json
from collections import deque
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.http.request import RawPostDataException
from django.urls import get_script_prefix, get_urlconf, reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import DEFAULTS, IMPORT_STRINGS, APISettings
from rest_framework.views import APIView

from access.permissions import principal_of, require_organization
from access.principals import Principal
from jobs import callbacks, queue, retention, selectors, validation
from jobs.api import parameters, schema
from jobs.api.serializers import (
    AbortRequestSerializer,
    AbortResponseSerializer,
    CommandRequestSerializer,
    CommandResponseSerializer,
    EnqueueRequestSerializer,
    EnqueueResponseSerializer,
    JobAtSerializer,
    JobCallbacksSerializer,
    JobFilter,
    JobPageSerializer,
    JobSerializer,
    KindsSerializer,
    ReceiptPageSerializer,
)
from jobs.core.contracts import contracts_table
from jobs.core.shell_commands import COMMANDS_SCOPE, command_paths
from jobs.core.vocabulary import (
    MAX_MAX_ATTEMPTS,
    MIN_MAX_ATTEMPTS,
    is_job_id,
    job_stream,
    validate_job_id,
)
from jobs.diagnosis import diagnosis
from jobs.errors import InvalidRequest, JobNotFound, MissingCommandsScope
from jobs.models import Job
from jobs.presenters import job_json
from receipts import store
from receipts.clock import now_ms as wall_clock_ms

# option keys of an enqueue body; without `payload` the rest of the body is the payload.
OPTION_KEYS = (
    "jobId",
    "lane",
    "maxAttempts",
    "sessionKey",
    "singletonMode",
    "singleton",
    "queue",
    "runAt",
    "delaySeconds",
    "priority",
)
MAX_BY_HINT = 80
DEFAULT_RECEIPT_LIMIT = 100
MAX_RECEIPT_LIMIT = 1000
MAX_POSITION = 2**53  # receipt positions; keeps SQLite and PostgreSQL integers in range


# ---- request parsing ------------------------------------------------------------------------


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def read_json_object(request: Request, *, levels_above_payload: int = 2) -> dict[str, Any]:
    """The body as a JSON object; an empty body is `{}`. `levels_above_payload` is how
    deep the payloads sit in the body (2: body > payload > ...).

    Raises InvalidRequest `malformed_json`, `body_not_object` or `invalid_payload` (text
    no database can store: NUL characters, lone surrogates, or nesting past the limit).
    """
    try:
        raw: bytes = request.body
    except RawPostDataException:  # a form body already consumed (multipart)
        raise exceptions.UnsupportedMediaType("multipart/form-data") from None
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise InvalidRequest("malformed_json", "body is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise InvalidRequest(
            "malformed_json",
            f"body is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}",
        ) from None
    except RecursionError:
        raise InvalidRequest("invalid_payload", "body nests too deeply") from None
    except ValueError as error:  # NaN/Infinity, integers longer than Python parses
        raise InvalidRequest("malformed_json", f"body is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise InvalidRequest(
            "body_not_object", f"body must be a JSON object, got {type(value).__name__}"
        )
    _check_storable(value, levels_above_payload)
    return value


def _check_storable(value: Any, levels_above_payload: int) -> None:
    """Q-3: refuse text either database would choke on, naming the path (iterative walk)."""
    # The walk allows the body's levels above the payload; any body it refuses nests a
    # payload past the payload's own limit, which the message names: the one limit a
    # client can act on (check_payload_size enforces it exactly).
    max_depth = settings.RECEIPT.max_json_depth
    limit = max_depth + levels_above_payload
    pending: deque[tuple[Any, str, int]] = deque([(value, "$", 0)])
    while pending:
        item, path, depth = pending.pop()
        if depth > limit:
            raise InvalidRequest(
                "invalid_payload", f"nesting deeper than {max_depth} levels at {path}"
            )
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, dict):
            for key, child in item.items():
                _check_text(key, f"{path} (key)")
                pending.append((child, f"{path}.{key}", depth + 1))
        elif isinstance(item, list):
            pending.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(item))


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise InvalidRequest("invalid_payload", f"NUL character in a string at {path}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest("invalid_payload", f"lone surrogate in a string at {path}") from None


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"invalid_{name}", f"{name} must be an integer; got {raw!r}") from None
    if not 0 <= value <= MAX_POSITION:
        raise InvalidRequest(f"invalid_{name}", f"{name} must be between 0 and {MAX_POSITION}")
    return value


def actor(principal: Principal, hint: Any) -> str:
    """The receipt's `by`: always the principal; a client's `by` is only a display hint."""
    if hint is None or hint == principal.name:
        return principal.name
    if (
        not isinstance(hint, str)
        or not hint.strip()
        or len(hint) > MAX_BY_HINT
        or any(ord(c) < 32 or ord(c) == 127 for c in hint)
    ):
        raise InvalidRequest(
            "invalid_by", f"by must be a display name of 1..{MAX_BY_HINT} printable characters"
        )
    room = validation.MAX_BY - len(principal.name) - 3  # the receipt's `by` is bounded (J-11)
    if room < 1:
        return principal.name
    return f"{principal.name} ({hint.strip()[:room]})"


# ---- A-1 enqueue ----------------------------------------------------------------------------


def enqueue_request(
    agent_id: str, body: dict[str, Any], *, by: str
) -> tuple[validation.EnqueueRequest, list[str]]:
    """Body (either style) -> a validated EnqueueRequest and warnings about ignored keys."""
    # build_request refuses whitespace and '/'; control characters never make a valid id
    # (and PostgreSQL cannot store NUL), so refuse them here with the same code.
    if any(ord(c) < 32 or ord(c) == 127 for c in agent_id):
        raise InvalidRequest("invalid_agent_id", "agentId must not contain control characters")
    singleton = {} if body.get("singleton") is None else body["singleton"]
    if not isinstance(singleton, dict):
        raise InvalidRequest("invalid_singleton", "singleton must be an object {key?, mode?}")
    warnings = []
    if "payload" in body:
        payload = body["payload"]
        ignored = sorted(set(body) - {*OPTION_KEYS, "payload"})
        if ignored:
            warnings.append(f"ignored top-level keys beside payload: {', '.join(ignored)}")
    else:
        payload = {key: value for key, value in body.items() if key not in OPTION_KEYS}

    def option(name: str, singleton_name: str | None = None) -> Any:
        value = body.get(name)
        if value is None and singleton_name is not None:
            value = singleton.get(singleton_name)  # explicit top-level options win
        return value

    request = validation.build_request(
        agent_id,
        payload,
        job_id=option("jobId"),
        lane=option("lane"),
        max_attempts=option("maxAttempts"),
        session_key=option("sessionKey", "key"),
        singleton_mode=option("singletonMode", "mode"),
        by=by,
        queue=option("queue"),
        run_at=validation.run_at_from_wire(
            option("runAt"), option("delaySeconds"), now_ms=wall_clock_ms()
        ),
        priority=option("priority"),
    )
    asked = option("maxAttempts")
    if asked is not None and asked != request.max_attempts:  # J-6 clamps; say so
        warnings.append(
            f"maxAttempts {asked} is outside {MIN_MAX_ATTEMPTS}..{MAX_MAX_ATTEMPTS}; "
            f"clamped to {request.max_attempts}"
        )
    return request, warnings


def _organization_of(payload: dict[str, Any]) -> str | None:
    auth = payload.get("authContext")
    return auth.get("organizationId") if isinstance(auth, dict) else None


def require_commands_scope(principal: Principal, payload: Any) -> None:
    """A payload that carries shell commands needs their scope of its own (Q-5)."""
    paths = command_paths(payload)
    if paths and not principal.has_scope(COMMANDS_SCOPE):
        raise MissingCommandsScope(COMMANDS_SCOPE, paths)


def enqueue_as(principal: Principal, request: validation.EnqueueRequest) -> queue.EnqueueResult:
    """Enqueue for `principal`; an organization-bound one never touches another's jobs (Q-2)."""
    require_organization(principal, _organization_of(request.payload))
    require_commands_scope(principal, request.payload)
    return queue.enqueue_many([request], organization=principal.organization_id)[0]


def enqueue_json(result: queue.EnqueueResult, warnings: list[str]) -> dict[str, Any]:
    job = result.job
    body: dict[str, Any] = {"ok": True, "job": job_json(job), "created": result.created}
    all_warnings = [*result.warnings, *warnings]
    if all_warnings:
        body["warnings"] = all_warnings
    body["async"] = {
        "jobId": job.job_id,
        "stream": job_stream(job.job_id),
        "status": job.status,
        "events": event_paths(job.job_id),
    }
    return body


def event_paths(job_id: str) -> dict[str, str]:
    """A job's live-event paths, reversed (a host project may include Receipt's URLs under
    any prefix) once per prefix and URLconf: a job id needs no quoting in a path."""
    job_path, receipt_path = _event_paths(get_script_prefix(), get_urlconf())
    return {"job": job_path.replace(_JOB_ID_SLOT, job_id), "receipt": receipt_path}


_JOB_ID_SLOT = "job-id-slot"


@lru_cache(maxsize=32)
def _event_paths(script_prefix: str, urlconf: str | None) -> tuple[str, str]:
    job_path = reverse("job-events", args=(_JOB_ID_SLOT,), urlconf=urlconf)
    return job_path, reverse("receipt-stream", urlconf=urlconf)


# Receipt's API authenticates, renders and fails the same way in any project: its DRF
# settings are its own, never the host project's REST_FRAMEWORK. The error shape lives
# with the site's other error pages (a string: DRF imports it on first use).
API_SETTINGS = APISettings(
    {
        "DEFAULT_AUTHENTICATION_CLASSES": ["access.authentication.PrincipalAuthentication"],
        "DEFAULT_PERMISSION_CLASSES": ["access.permissions.HasScope"],
        "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
        "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
        "EXCEPTION_HANDLER": "receipt_site.api_errors.exception_handler",
    },
    DEFAULTS,
    IMPORT_STRINGS,
)


class ApiView(APIView):
    # No docstring: drf-spectacular would show it as every operation's description.
    # `required_scope` is the scope the view needs (access.permissions.HasScope);
    # `query_parameters` are the parameters it reads, each allowed once; any other is
    # refused (400 unknown_parameter).
    settings = API_SETTINGS
    authentication_classes = API_SETTINGS.DEFAULT_AUTHENTICATION_CLASSES
    permission_classes = API_SETTINGS.DEFAULT_PERMISSION_CLASSES
    renderer_classes = API_SETTINGS.DEFAULT_RENDERER_CLASSES
    parser_classes = API_SETTINGS.DEFAULT_PARSER_CLASSES
    required_scope: str | None = None
    query_parameters: tuple[str, ...] = ()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # credentials and scope come first
        parameters.check_known(request.query_params, self.query_parameters)
        parameters.check_single(request.query_params, self.query_parameters)

    def limit(self, default: int, maximum: int) -> int:
        """The `limit` query parameter by the one rule of every list (jobs.api.parameters)."""
        raw = self.request.query_params.get("limit")
        return parameters.parse_limit(raw, default=default, maximum=maximum)


_ENQUEUE_EXAMPLE_WRAPPED = OpenApiExample(
    "payload wrapped with options",
    request_only=True,
    value={
        "lane": "chat",
        "maxAttempts": 3,
        "singleton": {"key": "chat:42", "mode": "steer"},
        "payload": {
            "kind": "factory.run",
            "authContext": {"userId": "u-1", "organizationId": "org-1"},
            "prompt": "summarise the ticket",
        },
    },
)
_ENQUEUE_EXAMPLE_FLAT = OpenApiExample(
    "flat body is the payload",
    request_only=True,
    value={
        "kind": "factory.run",
        "authContext": {"userId": "u-1", "organizationId": "org-1"},
        "prompt": "summarise the ticket",
        "sessionKey": "chat:42",
    },
)


class EnqueueView(ApiView):
    required_scope = "jobs:write"

    @extend_schema(
        operation_id="enqueue_job",
        tags=["jobs"],
        summary="Enqueue a job",
        description="Queue a job for `agent_id`. The body is `{payload, ...options}`, or "
        "the payload itself with the options beside it. An existing `jobId` "
        "returns that job (`created: false`); `warnings` say what was ignored or "
        "adjusted, such as a clamped maxAttempts. Nothing is written on a refusal. A "
        "payload that carries shell commands (`command`, `tasks[].command`, `checks`, "
        "`publish`, `policy.network`) also needs the `factory:commands` scope: without it "
        "the answer is 403 `missing_scope`.",
        parameters=[schema.AGENT_ID],
        request=EnqueueRequestSerializer,
        examples=[_ENQUEUE_EXAMPLE_WRAPPED, _ENQUEUE_EXAMPLE_FLAT],
        responses={
            202: OpenApiResponse(
                EnqueueResponseSerializer, description="accepted: the job as it is now"
            ),
            **schema.errors(400, 409, 413),
        },
    )
    def post(self, request: Request, agent_id: str) -> Response:
        principal = principal_of(request)
        body = read_json_object(request)
        enqueue, warnings = enqueue_request(agent_id, body, by=principal.name)
        result = enqueue_as(principal, enqueue)
        return Response(enqueue_json(result, warnings), status=202)


# ---- reads ---------------------------------------------------------------------------


class JobListView(ApiView):
    required_scope = "jobs:read"
    query_parameters = (*JobFilter.base_filters, "limit", "cursor")

    @extend_schema(
        operation_id="list_jobs",
        tags=["jobs"],
        summary="List jobs, newest first",
        description="A keyset page of jobs, newest first, narrowed by the filters (all "
        "optional, combined with AND). Pass `nextCursor` back as `cursor` for the "
        "next page; it is null on the last one.",
        parameters=[
            *schema.filter_parameters(JobFilter),
            schema.limit_parameter(selectors.DEFAULT_LIMIT, selectors.MAX_LIMIT),
            schema.query_parameter("cursor", "nextCursor of the previous page"),
        ],
        responses={
            200: OpenApiResponse(JobPageSerializer, description="one page of jobs"),
            **schema.errors(400, bad_request=schema.LIST_BAD_REQUEST),
        },
    )
    def get(self, request: Request) -> Response:
        principal = principal_of(request)
        filters = JobFilter(request.query_params, queryset=Job.objects.none()).selector_filters()
        limit = self.limit(selectors.DEFAULT_LIMIT, selectors.MAX_LIMIT)
        cursor = request.query_params.get("cursor") or None
        if cursor is not None:
            _check_cursor(cursor)
        page = selectors.page(
            filters, limit=limit, cursor=cursor, organization_id=principal.organization_id
        )
        return Response(
            {"jobs": [job_json(job) for job in page.jobs], "nextCursor": page.next_cursor}
        )


def _check_cursor(cursor: str) -> None:
    created_at, job_id = selectors.decode_cursor(cursor)
    try:
        validate_job_id(job_id)
    except ValueError:
        raise InvalidRequest("invalid_cursor", "cursor is not one this API returned") from None
    if not 0 <= created_at < 2**63:
        raise InvalidRequest("invalid_cursor", "cursor is not one this API returned")


class KindsView(ApiView):
    required_scope = "jobs:read"

    @extend_schema(
        operation_id="list_kinds",
        tags=["jobs"],
        summary="The payload kinds and their contracts",
        description="Every payload kind the API accepts, with the worker group it "
        "runs on and the flags that govern its delivery and recovery.",
        responses={
            200: OpenApiResponse(KindsSerializer, description="every kind with its contract"),
            **schema.errors(),
        },
    )
    def get(self, request: Request) -> Response:
        return Response({"kinds": contracts_table()})


class JobDetailView(ApiView):
    required_scope = "jobs:read"

    @extend_schema(
        operation_id="get_job",
        tags=["jobs"],
        summary="One job",
        description="The job as its receipts fold it: status, attempt, lease, "
        "commands, result or last error, and the stream's head.",
        parameters=[schema.JOB_ID],
        responses={
            200: OpenApiResponse(JobSerializer, description="the job"),
            410: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description=(
                    "`job_pruned`: the job's stream was removed by retention; "
                    "the error body carries its `tombstone`"
                ),
            ),
            **schema.errors(404),
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        principal = principal_of(request)
        try:
            job = selectors.visible_job_or_404(principal, job_id)
        except JobNotFound:
            if not is_job_id(job_id):
                raise  # no tombstone can have that id: no query
            tombstone = retention.pruned(job_id, may_see=principal.may_see)
            if tombstone is None:
                raise
            return Response(retention.pruned_wire(job_id, tombstone), status=410)
        return Response(job_json(job))


class JobDiagnosisView(ApiView):
    required_scope = "jobs:read"

    @extend_schema(
        operation_id="diagnose_job",
        tags=["jobs"],
        summary="Why the job is not running or not done",
        description="`blockers` is a list of {code, detail}; codes: terminal, "
        "no_handler, abort_requested, no_live_process, no_live_driver, "
        "lease_expired, holder_gone, running, scheduled, attempts_exhausted, "
        "waiting_for_capacity, delivery_pending, delivery_exhausted, "
        "redrive_pending, awaiting_redrive, singleton_peers, retried. `facts` "
        "are the inputs the answer was computed from.",
        parameters=[schema.JOB_ID],
        responses={
            200: OpenApiResponse(
                OpenApiTypes.OBJECT, description="{jobId, status, blockers, facts}"
            ),
            **schema.errors(404),
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        selectors.visible_job_or_404(principal_of(request), job_id)
        return Response(diagnosis(job_id))


class JobCallbacksView(ApiView):
    required_scope = "jobs:read"

    @extend_schema(
        operation_id="list_job_callbacks",
        tags=["jobs"],
        summary="The job's event callbacks and their delivery",
        description="Every callback recorded for the job (dispatched, completed, "
        "failed, canceled), newest first: the body posted, the tries, the "
        "last answer and the next try. Empty when no callback URL is "
        "configured.",
        parameters=[schema.JOB_ID],
        responses={
            200: OpenApiResponse(JobCallbacksSerializer, description="the job's callbacks"),
            **schema.errors(404),
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        selectors.visible_job_or_404(principal_of(request), job_id)
        return Response({"jobId": job_id, "callbacks": callbacks.for_job(job_id)})


class JobReceiptsView(ApiView):
    required_scope = "jobs:read"
    query_parameters = ("after", "limit")

    @extend_schema(
        operation_id="list_job_receipts",
        tags=["jobs"],
        summary="A job's receipts",
        description="The job's receipts in stream order, with the stream's head hash and "
        "count, so a client can verify the chain itself (docs/api.md shows how).",
        parameters=[
            schema.JOB_ID,
            schema.query_parameter(
                "after", "only receipts with streamSeq > after (default 0)", OpenApiTypes.INT
            ),
            schema.limit_parameter(DEFAULT_RECEIPT_LIMIT, MAX_RECEIPT_LIMIT),
        ],
        responses={
            200: OpenApiResponse(ReceiptPageSerializer, description="one page of receipts"),
            **schema.errors(
                400,
                404,
                bad_request="Bad query parameter (invalid_after, "
                "invalid_limit, repeated_parameter, unknown_parameter).",
            ),
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        selectors.visible_job_or_404(principal_of(request), job_id)
        after = _int_param(request, "after", 0)
        limit = self.limit(DEFAULT_RECEIPT_LIMIT, MAX_RECEIPT_LIMIT)
        stream = job_stream(job_id)
        info = store.stream_info(stream)
        receipts = store.read(stream, after=after, limit=limit)
        return Response(
            {
                "receipts": [receipt.to_wire() for receipt in receipts],
                "head": info.head if info else None,
                "receiptCount": info.count if info else 0,
            }
        )


class JobStateView(ApiView):
    required_scope = "jobs:read"
    query_parameters = ("at",)

    @extend_schema(
        operation_id="get_job_state_at",
        tags=["jobs"],
        summary="The job's fold after the first n receipts (time travel)",
        description="Replays the first `at` receipts of the job's stream and returns the job "
        "as it was then; `job` is null before the first receipt.",
        parameters=[
            schema.JOB_ID,
            schema.query_parameter(
                "at",
                "receipts to fold, clamped to 0..receiptCount (default: all)",
                OpenApiTypes.INT,
            ),
        ],
        responses={
            200: OpenApiResponse(JobAtSerializer, description="the job after `at` receipts"),
            **schema.errors(
                400,
                404,
                bad_request="Bad query parameter (invalid_at, repeated_parameter, "
                "unknown_parameter).",
            ),
        },
    )
    def get(self, request: Request, job_id: str) -> Response:
        selectors.visible_job_or_404(principal_of(request), job_id)
        stream = job_stream(job_id)
        info = store.stream_info(stream)
        count = info.count if info else 0
        at = min(count, _int_param(request, "at", count))
        state = store.state_at(stream, at)
        return Response(
            {
                "jobId": job_id,
                "at": at,
                "receiptCount": count,
                "job": job_json(state) if state is not None else None,
            }
        )


# ---- A-5 commands ------------------------------------------------------------------------------


class _CommandView(ApiView):
    # No docstring (it would leak into the schema): the steer / follow-up body handling.
    required_scope = "jobs:control"
    command = "steer"

    def post(self, request: Request, job_id: str) -> Response:
        principal = principal_of(request)
        selectors.visible_job_or_404(principal, job_id)
        body = read_json_object(request)
        if "payload" in body:
            payload, hint = body["payload"], body.get("by")
        else:
            payload, hint = body, None  # the whole body is the payload
        result = queue.command(job_id, self.command, payload, by=actor(principal, hint))
        return Response({"ok": True, "command": result.command}, status=202)


_COMMAND_SCHEMA: dict[str, Any] = {
    "tags": ["commands"],
    "parameters": [schema.JOB_ID],
    "request": CommandRequestSerializer,
    "responses": {
        202: OpenApiResponse(
            CommandResponseSerializer, description="the command, recorded on the job's stream"
        ),
        **schema.errors(400, 404, 409, 413, bad_request=schema.COMMAND_BAD_REQUEST),
    },
}


@extend_schema_view(
    post=extend_schema(
        operation_id="steer_job",
        summary="Steer an active job",
        description="Records a steer command for the running handler to read now; "
        "`{payload, by?}`, or the whole body is the payload. 409 when "
        "the job is terminal.",
        **_COMMAND_SCHEMA,
    )
)
class SteerView(_CommandView):
    command = "steer"


@extend_schema_view(
    post=extend_schema(
        operation_id="follow_up_job",
        summary="Queue a follow-up on an active job",
        description="Records a follow-up the handler picks up after its current "
        "turn; `{payload, by?}`, or the whole body is the payload. 409 "
        "when the job is terminal.",
        **_COMMAND_SCHEMA,
    )
)
class FollowUpView(_CommandView):
    command = "follow_up"


class AbortView(ApiView):
    required_scope = "jobs:control"

    @extend_schema(
        operation_id="abort_job",
        tags=["commands"],
        summary="Abort a job",
        description="A queued job is canceled at once; a leased or running one gets an abort "
        "command its handler must honour. 409 when the job is already terminal.",
        parameters=[schema.JOB_ID],
        request=AbortRequestSerializer,
        responses={
            202: OpenApiResponse(
                AbortResponseSerializer,
                description="queued: canceled outright (canceled=true); "
                "leased/running: abort command sent",
            ),
            **schema.errors(400, 404, 409, bad_request=schema.COMMAND_BAD_REQUEST),
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        principal = principal_of(request)
        selectors.visible_job_or_404(principal, job_id)
        body = read_json_object(request)
        reason = body.get("reason")
        result = queue.abort(job_id, reason=reason, by=actor(principal, body.get("by")))
        return Response(
            {
                "ok": True,
                "command": result.command,
                "canceled": result.canceled,
                "job": job_json(result.job),
            },
            status=202,
        )
