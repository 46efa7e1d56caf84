"""Validation of what callers ask the queue (J-6, K-1, K-2, Q-3): an enqueue request
built and checked, payload and text bounds. Nothing here writes: the API and the CLI
validate with it without importing the writer (`jobs.queue`), which checks again with
the same functions before it writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from jobs import handlers
from jobs.core import contracts
from jobs.core.vocabulary import (
    DEFAULT_LANE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_SINGLETON_MODE,
    LANES,
    MAX_MAX_ATTEMPTS,
    MIN_MAX_ATTEMPTS,
    SINGLETON_MODES,
    validate_job_id,
)
from jobs.errors import InvalidRequest
from jobs.timing_config import current_timing
from receipts import wire_json
from receipts.core.canonical import CanonicalJSONError, check_json
from receipts.core.storable import first_unstorable

MAX_AGENT_ID = 128
MAX_SESSION_KEY = 255
MAX_BY = 200


@dataclass(frozen=True)
class EnqueueRequest:
    agent_id: str
    payload: dict[str, Any]
    job_id: str | None = None
    lane: str = DEFAULT_LANE
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    session_key: str | None = None
    singleton_mode: str = DEFAULT_SINGLETON_MODE
    by: str | None = None
    queue: str | None = None  # a worker group chosen over the default route


def check_text(code: str, name: str, value: Any, limit: int, *, required: bool) -> str | None:
    """`value` if it is a non-empty string within `limit` (or absent and not required)."""
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise InvalidRequest(
            code, f"{name} must be a non-empty string of at most {limit} characters"
        )
    return value


def check_payload_size(payload: Any) -> None:
    """Q-3: bounded size and depth, plain JSON only."""
    config = settings.RECEIPT
    try:
        check_json(payload, path="$.payload", max_depth=config.max_json_depth)
    except CanonicalJSONError as error:
        raise InvalidRequest("invalid_payload", str(error)) from None
    try:
        size = wire_json.size(payload)
    except UnicodeEncodeError:  # the API refuses these at parse; an in-process caller here
        where, reason = first_unstorable(payload, "$.payload") or ("$.payload", "lone surrogate")
        raise InvalidRequest("invalid_payload", f"{reason} at {where}") from None
    if size > config.max_payload_bytes:
        raise InvalidRequest(
            "payload_too_large", f"payload is {size} bytes; the limit is {config.max_payload_bytes}"
        )


_NOT_IN_AGENT_ID = re.compile(r"[\s/]")  # \s as str.isspace(): whitespace of any script


def build_request(
    agent_id: Any,
    payload: Any,
    *,
    job_id: Any = None,
    lane: Any = None,
    max_attempts: Any = None,
    session_key: Any = None,
    singleton_mode: Any = None,
    by: Any = None,
    queue: Any = None,
) -> EnqueueRequest:
    """Validate an enqueue (J-6, K-1, K-2, Q-3); raise InvalidRequest naming the problem.

    `queue`: the worker group to run on instead of the default route (the kind's
    contract); a built-in or declared group."""
    check_text("invalid_agent_id", "agentId", agent_id, MAX_AGENT_ID, required=True)
    if _NOT_IN_AGENT_ID.search(agent_id):
        raise InvalidRequest("invalid_agent_id", "agentId must not contain whitespace or '/'")
    if job_id is not None:
        try:
            validate_job_id(job_id)
        except ValueError as error:
            raise InvalidRequest("invalid_job_id", str(error)) from None
    if lane is None:
        lane = DEFAULT_LANE
    if lane not in LANES:
        raise InvalidRequest(
            "invalid_lane", f"lane must be one of {', '.join(LANES)}; got {lane!r}"
        )
    if max_attempts is None:
        max_attempts = DEFAULT_MAX_ATTEMPTS
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise InvalidRequest(
            "invalid_max_attempts", f"maxAttempts must be an integer; got {max_attempts!r}"
        )
    max_attempts = max(MIN_MAX_ATTEMPTS, min(MAX_MAX_ATTEMPTS, max_attempts))  # J-6 clamp
    if singleton_mode is None:
        singleton_mode = DEFAULT_SINGLETON_MODE
    if singleton_mode not in SINGLETON_MODES:
        raise InvalidRequest(
            "invalid_singleton_mode",
            f"singletonMode must be one of {', '.join(SINGLETON_MODES)}; got {singleton_mode!r}",
        )
    check_text("invalid_session_key", "sessionKey", session_key, MAX_SESSION_KEY, required=False)
    if singleton_mode != "allow" and session_key is None:
        raise InvalidRequest(
            "session_key_required", f"singletonMode {singleton_mode!r} needs a sessionKey"
        )
    check_text("invalid_by", "by", by, MAX_BY, required=False)
    handlers.load()  # a deployment's own kinds are registered by its handler modules
    try:
        contracts.validate_payload(payload)
    except contracts.ContractError as error:
        raise InvalidRequest(error.code, str(error)) from None
    check_payload_size(payload)
    check_route(agent_id, payload["kind"], queue)
    return EnqueueRequest(
        agent_id=agent_id,
        payload=payload,
        job_id=job_id,
        lane=lane,
        max_attempts=max_attempts,
        session_key=session_key,
        singleton_mode=singleton_mode,
        by=by,
        queue=queue,
    )


def check_route(agent_id: str, kind: str, queue: Any) -> str:
    """The worker group a job will run on, if this deployment has it; else InvalidRequest
    `unknown_queue` naming the groups it has (a `queue` never declared, or a kind
    registered to a group never declared), or `queue_not_allowed` for Factory's own work,
    whose group follows its agent id and kind."""
    known = current_timing().group_names()
    if queue is not None:
        if not isinstance(queue, str) or queue not in known:
            raise InvalidRequest(
                "unknown_queue",
                f"queue {queue!r} is not a worker group of this deployment; "
                f"expected one of: {', '.join(known)}",
            )
        default = contracts.routed_group(agent_id, kind)
        if queue != default and contracts.fixed_route(agent_id, kind):
            raise InvalidRequest(
                "queue_not_allowed",
                f"queue cannot move Factory's own work: agent {agent_id!r} with kind "
                f"{kind!r} runs on {default}",
            )
    group = contracts.routed_group(agent_id, kind, queue)
    if group not in known:
        raise InvalidRequest(
            "unknown_queue",
            f"kind {kind!r} is registered to worker group {group!r}, which this deployment "
            f"does not declare (RECEIPT_WORKER_GROUPS); expected one of: {', '.join(known)}",
        )
    return group


def warnings_for(agent_id: str) -> list[str]:
    if handlers.has_handler(agent_id):
        return []
    return [
        f"no handler is registered for agent '{agent_id}': a worker will fail this job "
        f"with No handler for agent '{agent_id}'"
    ]
