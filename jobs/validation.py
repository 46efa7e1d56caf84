"""Validation of what callers ask the queue (J-6, K-1, K-2, Q-3): an enqueue request
built and checked, payload and text bounds. Nothing here writes: the API and the CLI
validate with it without importing the writer (`jobs.queue`), which checks again with
the same functions before it writes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings

from jobs import handlers
from jobs.core import contracts, retry_policy
from jobs.core.groups import DECLARED_IN
from jobs.core.scheduling import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MAX_SCHEDULE_AHEAD_MS,
    MIN_PRIORITY,
    is_priority,
)
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
from receipts.clock import now_ms as wall_clock_ms
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
    run_at: int | None = None  # G-3: epoch ms (UTC); one not ahead at enqueue means now
    priority: int = DEFAULT_PRIORITY  # G-4: MIN_PRIORITY..MAX_PRIORITY


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
    run_at: Any = None,
    priority: Any = None,
    policy_max_attempts: int | None = None,
    code_policy: bool = False,
) -> EnqueueRequest:
    """Validate an enqueue (J-6, K-1, K-2, Q-3); raise InvalidRequest naming the problem.

    `queue`: the worker group to run on instead of the default route (the kind's
    contract); a built-in or declared group. `policy_max_attempts`: a task's retry policy
    (code, not a client): with the kind's registered policy, it sets the attempts when
    the caller gave none, beyond the clamp. `code_policy`: the payload's `retryPolicy`
    was put there by code (the task backend); a client's payload may not carry one."""
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
    asked_attempts = max_attempts
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
    run_at = check_run_at(run_at)
    priority = check_priority(priority)
    handlers.load()  # a deployment's own kinds are registered by its handler modules
    try:
        contracts.validate_payload(payload)
    except contracts.ContractError as error:
        raise InvalidRequest(error.code, str(error)) from None
    check_payload_size(payload)
    if retry_policy.PAYLOAD_KEY in payload and not code_policy:
        raise InvalidRequest(
            "invalid_payload",
            f"payload.{retry_policy.PAYLOAD_KEY} is set by a task's retry option, not by "
            "a client; a kind's retry policy is declared in code",
        )
    check_route(agent_id, payload["kind"], queue)
    if asked_attempts is None:  # a policy declared in code may allow more than the clamp
        declared = policy_max_attempts or _kind_policy_attempts(payload["kind"])
        max_attempts = declared or max_attempts
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
        run_at=run_at,
        priority=priority,
    )


def _kind_policy_attempts(kind: str) -> int | None:
    policy = retry_policy.policy_for(kind, None)
    return policy.max_attempts if policy is not None else None


def check_priority(priority: Any) -> int:
    """G-4: an integer from MIN_PRIORITY to MAX_PRIORITY; None is the default."""
    if priority is None:
        return DEFAULT_PRIORITY
    if not is_priority(priority):
        raise InvalidRequest(
            "invalid_priority",
            f"priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}; got {priority!r}",
        )
    return int(priority)


def check_run_at(run_at: Any) -> int | None:
    """G-3: epoch milliseconds (UTC), at most MAX_SCHEDULE_AHEAD_MS ahead; one in the
    past is accepted and means now."""
    if run_at is None:
        return None
    if isinstance(run_at, bool) or not isinstance(run_at, int) or run_at < 0:
        raise InvalidRequest(
            "invalid_run_at", f"runAt must be epoch milliseconds (an integer >= 0); got {run_at!r}"
        )
    if run_at > wall_clock_ms() + MAX_SCHEDULE_AHEAD_MS:
        raise InvalidRequest(
            "invalid_run_at", f"runAt {run_at} is more than {_AHEAD_DAYS} days ahead"
        )
    return run_at


_AHEAD_DAYS = MAX_SCHEDULE_AHEAD_MS // 86_400_000
_MAX_DELAY_S = MAX_SCHEDULE_AHEAD_MS // 1000


def run_at_from_wire(run_at: Any, delay_seconds: Any, *, now_ms: int) -> int | None:
    """`runAt` or `delaySeconds` as an API client or the CLI gives them, as epoch ms.

    `runAt`: an ISO 8601 date-time with a UTC offset or `Z` (`2026-12-06T10:00:00Z`), or
    epoch milliseconds. `delaySeconds`: a non-negative number of seconds from `now_ms`.
    At most one of them; both bounded by MAX_SCHEDULE_AHEAD_MS."""
    if run_at is not None and delay_seconds is not None:
        raise InvalidRequest(
            "invalid_run_at", "give runAt or delaySeconds, not both: they say the same thing"
        )
    if delay_seconds is not None:
        if (
            isinstance(delay_seconds, bool)
            or not isinstance(delay_seconds, int | float)
            or not 0 <= delay_seconds <= _MAX_DELAY_S
        ):
            raise InvalidRequest(
                "invalid_delay_seconds",
                f"delaySeconds must be a number of seconds from 0 to {_MAX_DELAY_S}; "
                f"got {delay_seconds!r}",
            )
        return now_ms + math.ceil(delay_seconds * 1000)
    if isinstance(run_at, str):
        return check_run_at(max(0, _parse_instant(run_at)))  # the past means now
    return check_run_at(run_at)


def _parse_instant(text: str) -> int:
    """An ISO 8601 date-time with an offset as epoch ms; InvalidRequest otherwise."""
    try:
        moment = datetime.fromisoformat(text) if len(text) <= 40 else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidRequest(
            "invalid_run_at",
            "runAt must be an ISO 8601 date-time with a UTC offset or Z "
            f"(2026-12-06T10:00:00Z) or epoch milliseconds; got {text[:60]!r}",
        )
    return (moment - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
            f"does not declare (declare it in {DECLARED_IN}); expected one of: "
            f"{', '.join(known)}",
        )
    return group


def warnings_for(agent_id: str) -> list[str]:
    if handlers.has_handler(agent_id):
        return []
    return [
        f"no handler is registered for agent '{agent_id}': a worker will fail this job "
        f"with No handler for agent '{agent_id}'"
    ]
