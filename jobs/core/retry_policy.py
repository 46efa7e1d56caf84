"""Retry policies: how many attempts a kind or task gets, how long a failed attempt waits
before the next, and which errors are worth another attempt (issue 34 item 2).

Pure: no clock, no randomness of its own. The jitter of an attempt's backoff is derived
from the job id and the attempt number (a hash), so the same failure always yields the
same wait: a replayed or re-checked fold agrees with the receipt that recorded it.

Backoff: the n-th failed attempt waits ``min(cap, base * factor ** (n - 1))`` with
*equal jitter*: half of that for sure, the other half scaled by the derived fraction.
So a retry never comes sooner than half its nominal backoff (a flapping dependency gets
real rest) and retries of many jobs that failed together still spread out.

Errors: ``never_retry`` and ``retry_on`` are exception class paths (``module.Class``),
matched against the exception's class and its bases (tasks raise exceptions);
``never_retry_matching`` and ``retry_matching`` are regular expressions searched in the
error text (handlers fail with text). A "never" rule wins; a policy with
``retry_matching`` retries only what it (or ``retry_on``) matches, and one with
``retry_on`` retries only the exceptions it names (a failure that raised nothing is judged
by its text alone). A task's handler applies its policy to the exception it caught; the
worker applies a kind's policy to the failure's error text.

Policies are registered per kind (`register_retry_policy`, or ``register_kind(...,
retry=...)``); a task carries its own in its job's payload (`to_wire`/`from_wire`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from jobs.core.flat_wire import camel
from jobs.core.state import is_int

# A policy declared in code may allow more attempts than a client's clamp (1..8).
MAX_POLICY_ATTEMPTS: Final = 100
MAX_BACKOFF_MS: Final = 7 * 86_400_000  # a week: a cap beyond it is a schedule, not a retry
DEFAULT_BASE_MS: Final = 1_000
DEFAULT_FACTOR: Final = 2.0
DEFAULT_CAP_MS: Final = 600_000  # ten minutes
_FRACTION_SCALE: Final = 2**64


class RetryPolicyError(ValueError):
    """A policy that cannot be used; the message names the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """`max_attempts` None keeps the enqueue's own (default 2, clamped 1..8)."""

    max_attempts: int | None = None
    base_ms: int = DEFAULT_BASE_MS
    factor: float = DEFAULT_FACTOR
    cap_ms: int = DEFAULT_CAP_MS
    retry_on: tuple[str, ...] = ()
    never_retry: tuple[str, ...] = ()
    retry_matching: str | None = None
    never_retry_matching: str | None = None

    def __post_init__(self) -> None:
        if self.max_attempts is not None and not (
            is_int(self.max_attempts) and 1 <= self.max_attempts <= MAX_POLICY_ATTEMPTS
        ):
            raise RetryPolicyError(
                f"max_attempts must be an integer in 1..{MAX_POLICY_ATTEMPTS}; "
                f"got {self.max_attempts!r}"
            )
        for name in ("base_ms", "cap_ms"):
            value = getattr(self, name)
            if not (is_int(value) and 0 <= value <= MAX_BACKOFF_MS):
                raise RetryPolicyError(
                    f"{name} must be an integer in 0..{MAX_BACKOFF_MS}; got {value!r}"
                )
        if isinstance(self.factor, bool) or not isinstance(self.factor, int | float):
            raise RetryPolicyError(f"factor must be a number >= 1; got {self.factor!r}")
        if not 1 <= self.factor <= 10:
            raise RetryPolicyError(f"factor must be in 1..10; got {self.factor!r}")
        for name in ("retry_on", "never_retry"):
            paths = getattr(self, name)
            if isinstance(paths, str) or not all(
                isinstance(p, str) and _CLASS_PATH.match(p) for p in paths
            ):
                raise RetryPolicyError(f"{name} must be a tuple of 'module.Class' paths")
            object.__setattr__(self, name, tuple(paths))
        for name in ("retry_matching", "never_retry_matching"):
            pattern = getattr(self, name)
            if pattern is None:
                continue
            try:
                re.compile(pattern)
            except (re.error, TypeError) as error:
                raise RetryPolicyError(f"{name} is not a regular expression: {error}") from None

    def to_wire(self) -> dict[str, Any]:
        """The policy as JSON (camelCase), with only the fields that differ from the
        defaults, so it travels in a task's payload."""
        wire: dict[str, Any] = {}
        for field, key in _WIRE_KEYS:
            value = getattr(self, field)
            if value != _DEFAULTS[field]:
                wire[key] = list(value) if isinstance(value, tuple) else value
        return wire


_CLASS_PATH: Final = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")
# Each field with its camelCase key and its default, as the class declares them.
_WIRE_KEYS: Final = tuple((f.name, camel(f.name)) for f in fields(RetryPolicy))
_DEFAULTS: Final[dict[str, Any]] = {f.name: f.default for f in fields(RetryPolicy)}


def from_wire(wire: Mapping[str, Any]) -> RetryPolicy:
    """`RetryPolicy.to_wire` read back; RetryPolicyError on anything malformed."""
    if not isinstance(wire, Mapping):
        raise RetryPolicyError("a retry policy must be an object")
    known = {key: field for field, key in _WIRE_KEYS}
    unknown = sorted(set(wire) - set(known))
    if unknown:
        raise RetryPolicyError(f"unknown retry policy keys: {', '.join(unknown)}")
    given: dict[str, Any] = {}
    for key, value in wire.items():
        field = known[key]
        given[field] = tuple(value) if isinstance(value, list) else value
    return RetryPolicy(**given)


def jitter_fraction(job_id: str, attempt: int) -> float:
    """A fraction in [0, 1) derived from the job and the attempt: the same every time."""
    digest = hashlib.sha256(f"{job_id}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _FRACTION_SCALE


def nominal_backoff_ms(policy: RetryPolicy, attempt: int) -> int:
    """The backoff before jitter after failed attempt `attempt` (1-based)."""
    exponent = max(attempt, 1) - 1
    # capped before it grows: factor ** exponent overflows a float long after the cap
    delay = float(policy.base_ms)
    for _ in range(exponent):
        delay *= policy.factor
        if delay >= policy.cap_ms:
            return policy.cap_ms
    return min(policy.cap_ms, int(delay))


def backoff_ms(policy: RetryPolicy, job_id: str, attempt: int) -> int:
    """The wait after failed attempt `attempt` of `job_id`: equal jitter on the nominal
    backoff (half fixed, half scaled by the derived fraction)."""
    nominal = nominal_backoff_ms(policy, attempt)
    half = nominal // 2
    return nominal - half + int(half * jitter_fraction(job_id, attempt))


def retry_at(policy: RetryPolicy, job_id: str, attempt: int, *, failed_at_ms: int) -> int | None:
    """When the next attempt may start, None when the policy sets no wait (base 0)."""
    wait = backoff_ms(policy, job_id, attempt)
    return failed_at_ms + wait if wait > 0 else None


def retries_error(policy: RetryPolicy, error: str, class_paths: Sequence[str] = ()) -> bool:
    """Whether a failure is worth another attempt: its error text and, when it raised, the
    class paths of its exception (its class and bases). A "never" rule wins."""
    if any(path in policy.never_retry for path in class_paths):
        return False
    if policy.never_retry_matching is not None and re.search(policy.never_retry_matching, error):
        return False
    # class rules speak only of failures that raised; a text failure is judged by its text
    only = (bool(policy.retry_on) and bool(class_paths)) or policy.retry_matching is not None
    if not only:
        return True
    if any(path in policy.retry_on for path in class_paths):
        return True
    return policy.retry_matching is not None and re.search(policy.retry_matching, error) is not None


def exception_paths(error: BaseException) -> tuple[str, ...]:
    """The class paths of an exception's class and its bases, most specific first."""
    return tuple(f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__)


# --- the per-kind registry (filled at start-up by the modules that register kinds) --------

_BY_KIND: dict[str, RetryPolicy] = {}


def register_retry_policy(kind: str, policy: RetryPolicy) -> RetryPolicy:
    """Give `kind` a retry policy. The same one twice is a no-op; another one is an error."""
    if not isinstance(policy, RetryPolicy):
        raise RetryPolicyError(f"retry policy of kind {kind!r} must be a RetryPolicy")
    existing = _BY_KIND.setdefault(kind, policy)
    if existing != policy:
        raise RetryPolicyError(f"kind {kind!r} already has another retry policy")
    return policy


def unregister_retry_policy(kind: str) -> None:
    """Tests only."""
    _BY_KIND.pop(kind, None)


PAYLOAD_KEY: Final = "retryPolicy"  # a task's own policy, in its job's payload


def has_own_policy(payload: object) -> bool:
    """Whether a job carries its own (a task's) policy: its handler, which holds the
    exception, has then judged the error already."""
    return isinstance(payload, Mapping) and isinstance(payload.get(PAYLOAD_KEY), Mapping)


def policy_for(kind: str | None, payload: object) -> RetryPolicy | None:
    """A job's policy: its payload's own (a task's), else its kind's, else None. A payload
    policy that does not read is ignored (the kind's applies), never an attempt's error."""
    own = payload.get(PAYLOAD_KEY) if isinstance(payload, Mapping) else None
    if isinstance(own, Mapping):
        try:
            return from_wire(own)
        except RetryPolicyError:
            pass
    return _BY_KIND.get(kind) if kind is not None else None
