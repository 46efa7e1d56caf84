"""Wire shapes of the jobs API (SPEC 9) and the list filters (A-3).

The serializers here describe bodies for the OpenAPI schema (A-11); responses are built
by `jobs.presenters.job_json` and the views, not by serializing models, so there is one
job JSON for the API, the admin and the CLI. `JobFilter` declares and validates the
A-3 query filters; the keyset page itself is `jobs.selectors.page`.
"""

from __future__ import annotations

from typing import Any

import django_filters
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs.api import parameters
from jobs.core.callbacks import EVENTS as CALLBACK_EVENTS
from jobs.core.callbacks import STATES as CALLBACK_STATES
from jobs.core.contracts import KINDS, WORKER_GROUPS, all_kinds
from jobs.core.scheduling import MAX_PRIORITY, MAX_SCHEDULE_AHEAD_MS, MIN_PRIORITY
from jobs.core.vocabulary import LANES, SINGLETON_MODES, STATUSES
from jobs.errors import InvalidRequest
from jobs.timing_config import current_timing
from jobs.validation import MAX_AGENT_ID, MAX_SESSION_KEY

# ---- errors ---------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    """Every error: `{"ok": false, "error": "<code>", "detail": "<sentence>"}`."""

    ok = serializers.BooleanField(help_text="always false")
    error = serializers.CharField(help_text="stable machine-readable code, e.g. job_not_found")
    detail = serializers.CharField(help_text="what happened, with the ids in it")


GROUPS_TEXT = ", ".join(WORKER_GROUPS) + " or a group the deployment declares"

# ---- job JSON (A-2) ------------------------------------------------------------------------


class CommandSerializer(serializers.Serializer):
    id = serializers.CharField(
        allow_null=True, help_text="null for an abort that canceled a queued job outright"
    )
    command = serializers.ChoiceField(choices=["steer", "follow_up", "abort"])
    lane = serializers.CharField(allow_null=True)
    payload = serializers.JSONField()
    by = serializers.CharField(allow_null=True)
    createdAt = serializers.IntegerField(help_text="ms since epoch")
    consumedAt = serializers.IntegerField(allow_null=True, help_text="ms since epoch")


class JobSerializer(serializers.Serializer):
    """The job fold as clients see it."""  # A-2; the docstring is the schema's description

    id = serializers.CharField()
    agentId = serializers.CharField()
    lane = serializers.ChoiceField(choices=LANES)
    kind = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=STATUSES)
    attempt = serializers.IntegerField()
    maxAttempts = serializers.IntegerField()
    sessionKey = serializers.CharField(allow_null=True)
    singletonMode = serializers.ChoiceField(choices=SINGLETON_MODES)
    payload = serializers.JSONField()
    workerId = serializers.CharField(allow_null=True)
    leaseUntil = serializers.IntegerField(allow_null=True, help_text="ms since epoch")
    leaseMs = serializers.IntegerField(allow_null=True)
    abortRequested = serializers.BooleanField()
    abortReason = serializers.CharField(allow_null=True)
    commands = CommandSerializer(many=True)
    result = serializers.JSONField()
    lastError = serializers.CharField(allow_null=True)
    createdAt = serializers.IntegerField(help_text="ms since epoch")
    updatedAt = serializers.IntegerField(help_text="ms since epoch of the last receipt")
    stream = serializers.CharField(help_text="jobs/<id>")
    receiptCount = serializers.IntegerField()
    head = serializers.CharField(help_text="hash of the last receipt")
    settledBy = serializers.CharField(allow_null=True)
    cancelReason = serializers.CharField(allow_null=True)
    organizationId = serializers.CharField(allow_null=True)
    objectiveId = serializers.CharField(allow_null=True)
    taskId = serializers.CharField(allow_null=True)
    retries = serializers.IntegerField(help_text="how many times an operator retried the job")
    retriedBy = serializers.CharField(allow_null=True, help_text="who retried it last")
    retriedAt = serializers.IntegerField(allow_null=True, help_text="ms since epoch")
    retriedAfterAttempt = serializers.IntegerField(
        help_text="the attempt the latest retry followed: maxAttempts more may run after it"
    )
    runAt = serializers.IntegerField(
        allow_null=True,
        help_text="ms since epoch: not started before this (a delayed job); null: at once",
    )
    retryAt = serializers.IntegerField(
        allow_null=True,
        help_text="ms since epoch: a failed attempt's retry policy holds the next one "
        "until then; null: no backoff pending",
    )
    priority = serializers.IntegerField(
        help_text="-100..100, higher first within the worker group (default 0)"
    )
    queue = serializers.CharField(
        allow_null=True,
        help_text="the worker group the enqueue chose, when it differs from the default route",
    )
    contractGroup = serializers.CharField(
        allow_null=True,
        help_text="the worker group the kind's contract names (" + GROUPS_TEXT + ")",
    )
    routedGroup = serializers.CharField(
        help_text="where the job actually runs (" + GROUPS_TEXT + ")"
    )
    groupMismatch = serializers.BooleanField()


# ---- enqueue (A-1) ----------------------------------------------------------------------------


class AuthContextSerializer(serializers.Serializer):
    userId = serializers.CharField()
    organizationId = serializers.CharField()
    workspaceId = serializers.CharField(required=False, allow_null=True)
    receiptConnectGatewayUrl = serializers.CharField(required=False, allow_null=True)
    sessionId = serializers.CharField(required=False, allow_null=True)
    source = serializers.CharField(required=False, allow_null=True)


class PayloadSerializer(serializers.Serializer):
    """A job payload: `kind` plus anything the handler reads (extra keys are kept)."""

    kind = serializers.CharField(
        help_text="one of the built-in kinds ("
        + ", ".join(KINDS)
        + ") or a kind the deployment registered "
        "(GET /kinds lists them all)"
    )
    authContext = AuthContextSerializer(
        required=False,
        help_text="required for every kind but factory.objective.watchdog "
        "and the deployment's kinds registered without it",
    )


class SingletonSerializer(serializers.Serializer):
    key = serializers.CharField(
        required=False, max_length=MAX_SESSION_KEY, help_text="same as sessionKey"
    )
    mode = serializers.ChoiceField(
        choices=SINGLETON_MODES, required=False, help_text="same as singletonMode"
    )


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "format": "date-time"},
            {"type": "integer", "minimum": 0, "description": "ms since epoch"},
        ]
    }
)
class RunAtField(serializers.JSONField):
    """`runAt`: a date-time with an offset, or ms since epoch (`jobs.validation`)."""


class EnqueueRequestSerializer(serializers.Serializer):
    """`{payload, ...options}`; without `payload`, the body minus the options is the payload."""

    jobId = serializers.RegexField(
        r"^[A-Za-z0-9._:-]{1,128}$",
        required=False,
        help_text="idempotency: an existing id returns that job",
    )
    lane = serializers.ChoiceField(choices=LANES, required=False, help_text="default collect")
    maxAttempts = serializers.IntegerField(required=False, help_text="default 2, clamped to 1..8")
    sessionKey = serializers.CharField(required=False, max_length=MAX_SESSION_KEY)
    singletonMode = serializers.ChoiceField(
        choices=SINGLETON_MODES,
        required=False,
        help_text="default allow; cancel/steer need a sessionKey",
    )
    singleton = SingletonSerializer(
        required=False, help_text="alternative spelling; top-level options win"
    )
    queue = serializers.CharField(
        required=False,
        help_text="the worker group to run on instead of the kind's: "
        + GROUPS_TEXT
        + " (GET /kinds names each kind's); an undeclared one is refused",
    )
    runAt = RunAtField(
        required=False,
        help_text="do not start before this time: an ISO 8601 date-time with a UTC offset "
        "or Z (2026-12-06T10:00:00Z), or ms since epoch (an integer); at most a year "
        "ahead; a time in the past means now",
    )
    delaySeconds = serializers.FloatField(
        required=False,
        min_value=0,
        max_value=MAX_SCHEDULE_AHEAD_MS // 1000,
        help_text="do not start before this many seconds from now (at most 366 days); "
        "instead of runAt, never with it",
    )
    priority = serializers.IntegerField(
        required=False,
        min_value=MIN_PRIORITY,
        max_value=MAX_PRIORITY,
        help_text="default 0; within the worker group higher is taken first, and a job "
        "waiting longer gains a point a minute, so none waits forever",
    )
    payload = PayloadSerializer(required=False)


class AsyncSerializer(serializers.Serializer):
    class EventsSerializer(serializers.Serializer):
        job = serializers.CharField(help_text="/jobs/<id>/events (SSE)")
        receipt = serializers.CharField(help_text="/receipt/stream (SSE)")

    jobId = serializers.CharField()
    stream = serializers.CharField(help_text="jobs/<id>")
    status = serializers.ChoiceField(choices=STATUSES)
    events = EventsSerializer()


class EnqueueResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    job = JobSerializer()
    created = serializers.BooleanField(
        help_text="false when jobId already existed or a singleton steer reused a job"
    )
    warnings = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="present only when non-empty"
    )

    def get_fields(self) -> dict[str, Any]:
        fields = super().get_fields()
        fields["async"] = AsyncSerializer()  # `async` is a Python keyword
        return fields


# ---- reads (A-3, A-4) ------------------------------------------------------------------------


class KindContractSerializer(serializers.Serializer):
    kind = serializers.CharField()
    workerGroup = serializers.CharField(help_text="the worker group the kind runs on")
    durableWorkflow = serializers.CharField(allow_null=True)
    durableActivity = serializers.BooleanField()
    objectiveScoped = serializers.BooleanField()
    reconcileOnTerminalOrExpiredLease = serializers.BooleanField()
    liveExecution = serializers.BooleanField()
    terminalObjectiveAudit = serializers.BooleanField()
    authContextRequired = serializers.BooleanField()
    builtIn = serializers.BooleanField(help_text="false for a kind the deployment registered")


class KindsSerializer(serializers.Serializer):
    kinds = KindContractSerializer(many=True)


class JobPageSerializer(serializers.Serializer):
    jobs = JobSerializer(many=True)
    nextCursor = serializers.CharField(
        allow_null=True, help_text="pass as ?cursor= for the next page; null at the end"
    )


class ReceiptSerializer(serializers.Serializer):
    id = serializers.CharField()
    ts = serializers.IntegerField(help_text="ms since epoch")
    stream = serializers.CharField()
    prev = serializers.CharField(allow_null=True)
    body = serializers.DictField(help_text="always has a string `type`")
    hash = serializers.CharField(
        help_text="sha256 of canonical {id, ts, stream, prev, body, context?}"
    )
    context = serializers.DictField(required=False)
    hints = serializers.DictField(required=False, help_text="not hashed")
    seq = serializers.IntegerField(required=False, help_text="global sequence")
    streamSeq = serializers.IntegerField(required=False, help_text="1..n within the stream")


class ReceiptPageSerializer(serializers.Serializer):
    receipts = ReceiptSerializer(many=True)
    head = serializers.CharField(allow_null=True, help_text="hash of the stream's last receipt")
    receiptCount = serializers.IntegerField()


class CallbackSerializer(serializers.Serializer):
    """One recorded job event callback and its delivery."""

    id = serializers.IntegerField()
    event = serializers.ChoiceField(choices=list(CALLBACK_EVENTS))
    state = serializers.ChoiceField(
        choices=list(CALLBACK_STATES),
        help_text="pending (waiting for a try or a retry), delivered "
        "(a 2xx answer), gave_up (still failing at its "
        "deadline)",
    )
    url = serializers.CharField(allow_null=True, help_text="scheme, host and port only")
    attempts = serializers.IntegerField(help_text="tries so far")
    lastStatus = serializers.IntegerField(
        allow_null=True, help_text="HTTP status of the last try; null: no answer"
    )
    lastError = serializers.CharField(allow_null=True)
    createdAt = serializers.IntegerField(help_text="ms since epoch: the event")
    nextAt = serializers.IntegerField(
        allow_null=True, help_text="ms since epoch of the next try; null once finished"
    )
    giveUpAt = serializers.IntegerField(help_text="ms since epoch: no try starts after this")
    finishedAt = serializers.IntegerField(allow_null=True, help_text="ms since epoch")
    body = serializers.JSONField(
        help_text="the JSON posted: {event, jobId, stream, status, attempt, agentId, kind, at}"
    )


class JobCallbacksSerializer(serializers.Serializer):
    jobId = serializers.CharField()
    callbacks = CallbackSerializer(many=True, help_text="newest first, at most 100")


class JobAtSerializer(serializers.Serializer):
    jobId = serializers.CharField()
    at = serializers.IntegerField(help_text="receipts folded")
    receiptCount = serializers.IntegerField(help_text="receipts on the stream now")
    job = JobSerializer(allow_null=True, help_text="null before the first receipt (at=0)")


# ---- commands (A-5) --------------------------------------------------------------------------


class CommandRequestSerializer(serializers.Serializer):
    """`{payload, by?}`; without `payload` the whole body is the payload."""

    payload = serializers.JSONField(required=False)
    by = serializers.CharField(
        required=False, max_length=80, help_text="display hint, recorded as '<principal> (<by>)'"
    )


class AbortRequestSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False, max_length=2000, help_text="default 'abort requested'"
    )
    by = serializers.CharField(
        required=False, max_length=80, help_text="display hint, recorded as '<principal> (<by>)'"
    )


class CommandResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    command = CommandSerializer()


class AbortResponseSerializer(CommandResponseSerializer):
    canceled = serializers.BooleanField(help_text="true when a queued job was canceled outright")
    job = JobSerializer()


# ---- list filters (A-3) ------------------------------------------------------------------------


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


class JobFilter(django_filters.FilterSet):
    """The A-3 filters (plus organizationId and routedGroup), validated before any query."""

    status = django_filters.ChoiceFilter(choices=_choices(STATUSES))
    agentId = django_filters.CharFilter(max_length=MAX_AGENT_ID)
    lane = django_filters.ChoiceFilter(choices=_choices(LANES))
    kind = django_filters.ChoiceFilter(choices=lambda: _choices(all_kinds()))
    sessionKey = django_filters.CharFilter(max_length=MAX_SESSION_KEY)
    objectiveId = django_filters.CharFilter(max_length=128)
    organizationId = django_filters.CharFilter(max_length=128)
    routedGroup = django_filters.ChoiceFilter(
        choices=lambda: _choices(current_timing().group_names())
    )

    def selector_filters(self, *, labels: dict[str, str] | None = None) -> dict[str, str]:
        """The cleaned filters for `selectors.page`; InvalidRequest names a bad one and,
        for a closed set, the allowed values. `labels` renames filters in the message (the
        CLI's `--status` for `status`)."""
        if not self.is_valid():
            name, messages = next(iter(self.form.errors.items()))
            given = parameters.shown(self.data.get(name))
            shown = (labels or {}).get(name, name)
            allowed = self.allowed(name)
            text = (
                f"{shown}={given} is not one of: {', '.join(allowed)}"
                if allowed
                else f"{shown}={given}: {' '.join(messages)}"
            )
            raise InvalidRequest("invalid_filter", text)
        return {name: value for name, value in self.form.cleaned_data.items() if value}

    @classmethod
    def allowed(cls, name: str) -> list[str]:
        """The values a closed-set filter accepts (empty for an open one)."""
        declared = cls.base_filters[name]
        if not isinstance(declared, django_filters.ChoiceFilter):
            return []
        choices = declared.extra.get("choices") or []
        return [value for value, _label in (choices() if callable(choices) else choices)]
