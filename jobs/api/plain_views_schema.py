"""OpenAPI for the endpoints that are plain Django views, not DRF ones (A-11).

drf-spectacular only sees DRF views; the live events (`/jobs/<id>/events`,
`/receipt/stream`), the long poll (`/jobs/<id>/wait`), health (`/healthz`, `/readyz`) and
`/metrics` are async or plain views (jobs.live, receipt_site.health, jobs.metrics).
`add_plain_views` is a postprocessing hook (SPECTACULAR_SETTINGS) that adds them to the
generated schema. Every status listed here is one the view really answers (the
schemathesis fuzz test checks them under WSGI, where the streams answer 501).
"""

from __future__ import annotations

from typing import Any

from jobs.live.wait import WAIT_DEFAULT_MS, WAIT_MAX_MS

_ERROR = {"$ref": "#/components/schemas/Error"}
_JOB_ID = {
    "in": "path",
    "name": "job_id",
    "required": True,
    "description": "the job id",
    "schema": {"type": "string", "pattern": r"^[A-Za-z0-9._:-]{1,128}$"},
}


def _optional(where: str, name: str, description: str, of: str = "string") -> dict[str, Any]:
    """An optional header or query parameter whose value is of JSON type `of`."""
    parameter = {"in": where, "name": name, "required": False, "description": description}
    return {**parameter, "schema": {"type": of}}


_LAST_EVENT_ID = [
    _optional(
        "header",
        "Last-Event-ID",
        "resume after this global sequence number (EventSource sends it)",
    ),
    _optional(
        "query", "lastEventId", "the same, for EventSource polyfills that cannot set headers"
    ),
]
_BEARER: list[dict[str, list[str]]] = [{"bearerAuth": []}]
_OPTIONAL_BEARER: list[dict[str, list[str]]] = [{}, {"bearerAuth": []}]


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(description, _ERROR)


_AUTH_ERRORS = {
    "401": _error("No or bad credentials (not_authenticated, invalid_token)."),
    "403": _error("The credential lacks the jobs:read scope (missing_scope)."),
}
_STREAM_ERRORS = {
    **_AUTH_ERRORS,
    "501": _error("The server runs under WSGI; streams need the ASGI server (asgi_required)."),
    "503": _error(
        "The database cannot be read right now; retry after Retry-After seconds "
        "(database_unavailable)."
    ),
}
_SSE_OK = {
    "description": "an endless Server-Sent Events stream (docs/live-events.md)",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def _job_events() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "stream_job_events",
            "tags": ["live"],
            "summary": "Follow one job as Server-Sent Events",
            "description": "First a `job` frame with the job, then a `job-refresh` frame per new "
            "receipt followed by the job again; the stream ends once the job is "
            "terminal. Reconnect with Last-Event-ID to resume.",
            "parameters": [_JOB_ID, *_LAST_EVENT_ID],
            "security": _BEARER,
            "responses": {
                "200": _SSE_OK,
                "204": {
                    "description": "resumed after the job's last receipt and the job is "
                    "terminal: nothing more will come"
                },
                "400": _error(
                    "Last-Event-ID is not a sequence number (invalid_last_event_id, "
                    "repeated_parameter)."
                ),
                **_STREAM_ERRORS,
                "404": _error("No such job, or a job of another organization (job_not_found)."),
            },
        }
    }


def _receipt_stream() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "stream_receipts",
            "tags": ["live"],
            "summary": "Every append as Server-Sent Events",
            "description": "A `receipt-refresh` frame per receipt appended to a stream the caller "
            "may read (its id is the global sequence, its data the stream name), "
            "and `ping` keepalives carrying the position. Resumable with "
            "Last-Event-ID.",
            "parameters": [
                _optional(
                    "query",
                    "prefix",
                    "only streams whose name starts with this (at most 255 characters)",
                ),
                *_LAST_EVENT_ID,
            ],
            "security": _BEARER,
            "responses": {
                "200": _SSE_OK,
                "400": _error(
                    "Bad prefix or Last-Event-ID (invalid_prefix, invalid_last_event_id, "
                    "repeated_parameter)."
                ),
                **_STREAM_ERRORS,
            },
        }
    }


def _wait() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "wait_for_job",
            "tags": ["live"],
            "deprecated": True,
            "summary": "Long poll until the job is terminal",
            "description": "Returns the job once it is terminal or when `timeoutMs` runs out, "
            "whichever is first, with `Deprecation: true` and a Link to the events "
            "stream that replaces it.",
            "parameters": [
                _JOB_ID,
                _optional(
                    "query",
                    "timeoutMs",
                    f"how long to wait, clamped to 0..{WAIT_MAX_MS} (default {WAIT_DEFAULT_MS})",
                    "integer",
                ),
            ],
            "security": _BEARER,
            "responses": {
                "200": _json(
                    "the job, terminal or as it was at the deadline",
                    {
                        "type": "object",
                        "required": ["ok", "job"],
                        "properties": {
                            "ok": {"type": "boolean"},
                            "job": {"$ref": "#/components/schemas/Job"},
                        },
                    },
                ),
                "400": _error("timeoutMs is not an integer (invalid_timeout, repeated_parameter)."),
                **_AUTH_ERRORS,
                "404": _error("No such job, or a job of another organization (job_not_found)."),
                "503": _STREAM_ERRORS["503"],
            },
        }
    }


_HEALTH_BODY = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "ready": {"type": "boolean"},
        "degraded": {"type": "boolean"},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "uptimeSec": {"type": "integer"},
        "processRole": {"type": "string"},
        "queue": {
            "type": "object",
            "description": "bounded counts: active jobs by status (up to countCap each), jobs "
            "settled in the last settledWindowMs (up to settledCap each), their total, and "
            "`capped`, the statuses whose count stopped at its cap (at least that many)",
        },
        "runtime": {"type": "object", "description": "counts of processes, loops and held jobs"},
        "workerGroups": {
            "type": "array",
            "description": "every worker group, built-in and declared, with its live "
            "runworker processes",
            "items": {
                "type": "object",
                "properties": {
                    "group": {"type": "string"},
                    "liveProcesses": {"type": "integer"},
                },
            },
        },
        "database": {"type": "object", "description": "{ok, vendor, target?}"},
        "detail": {
            "type": "boolean",
            "description": "true when the caller may see where "
            "things run (a token or a staff session)",
        },
    },
}
_READY_BODY = {
    "type": "object",
    "required": ["ok", "database"],
    "properties": {"ok": {"type": "boolean"}, "database": {"type": "object"}},
}


def _health() -> dict[str, Any]:
    return {
        "/healthz": {
            "get": {
                "operationId": "health",
                "tags": ["health"],
                "summary": "Liveness and queue counts",
                "description": "Always 200 while the process answers. Anyone gets status and "
                "counts; a token or a staff session also gets the database target, "
                "the recovery loops, the worker processes and jobs held by gone "
                "ones.",
                "security": _OPTIONAL_BEARER,
                "responses": {"200": _json("the process's health", _HEALTH_BODY)},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "ready",
                "tags": ["health"],
                "summary": "Readiness: the database",
                "description": "200 when the database answers, 503 when it does not.",
                "security": _OPTIONAL_BEARER,
                "responses": {
                    "200": _json("ready", _READY_BODY),
                    "503": _json("the database does not answer", _READY_BODY),
                },
            }
        },
    }


def _metrics() -> dict[str, Any]:
    return {
        "get": {
            "operationId": "metrics",
            "tags": ["health"],
            "summary": "Prometheus metrics",
            "description": "Active and recently settled jobs, worker processes, recovery loops, "
            "callbacks and per-process counters in the Prometheus text format. An "
            "organization-bound token sees only its organization's job gauges.",
            "security": _BEARER,
            "responses": {
                "200": {
                    "description": "the metrics",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                **_AUTH_ERRORS,
            },
        }
    }


def add_plain_views(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: add the plain views' operations."""
    paths = result.setdefault("paths", {})
    paths["/jobs/{job_id}/events"] = _job_events()
    paths["/jobs/{job_id}/wait"] = _wait()
    paths["/receipt/stream"] = _receipt_stream()
    paths.update(_health())
    paths["/metrics"] = _metrics()
    return result
