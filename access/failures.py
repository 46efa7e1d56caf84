"""Failed authentications (issue 31; Q-1): logged with enough to alert on, and counted.

Every refused bearer token, on every door (the API, the live views, `/metrics`,
`/healthz`), is reported here by `access.principals.principal_for_request`: the client
address, the token's public prefix (the first characters the admin shows; nothing for a
malformed header, which may be a password) and the reason: `malformed`, `unknown` or
`revoked` (tokens have no expiry). `observers` count them (`jobs` registers the
`/metrics` counter, since this layer knows nothing of metrics).

Nothing is throttled: tokens carry 256 random bits, so guessing is hopeless anyway, and a
limit per address would lock out every honest client behind the same proxy or NAT. The
log is bounded instead: at most `FAILURE_LOG_BUDGET` lines per address and reason per
`FAILURE_LOG_WINDOW_S`; the next line after a window says how many were not logged. The
counter counts every one. Django's own bare `Unauthorized` line for such a request is
dropped (`not_reported_here`), or a flood would still write a line per request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.http import HttpRequest

from observability.logs import log_event

logger = logging.getLogger("receipt.access")
REASONS = ("malformed", "unknown", "revoked")
FAILURE_LOG_BUDGET = 10
FAILURE_LOG_WINDOW_S = 10.0
MAX_TRACKED = 4096  # (address, reason) pairs; forgotten all at once past it
MAX_FORWARDED = 200
REPORTED = "receipt_auth_failure_reported"  # set on a request reported here
clock = time.monotonic  # the log budget's clock (tests move it)
observers: list[Callable[[str], None]] = []


class _Budget:
    __slots__ = ("logged", "not_logged", "started")

    def __init__(self, started: float) -> None:
        self.started, self.logged, self.not_logged = started, 0, 0


_budgets: dict[tuple[str, str], _Budget] = {}
_lock = threading.Lock()


def forget() -> None:
    """Start every log budget afresh."""
    with _lock:
        _budgets.clear()


def _take(address: str, reason: str) -> int | None:
    """The count of lines not logged since the last one if this one may be logged, else
    None (the budget of this address and reason is spent for the window)."""
    now = clock()
    with _lock:
        budget = _budgets.get((address, reason))
        if budget is None or now - budget.started >= FAILURE_LOG_WINDOW_S:
            if len(_budgets) >= MAX_TRACKED:
                _budgets.clear()
            skipped = budget.not_logged if budget is not None else 0
            budget = _budgets[(address, reason)] = _Budget(now)
            budget.logged = 1
            return skipped
        if budget.logged < FAILURE_LOG_BUDGET:
            budget.logged += 1
            return 0
        budget.not_logged += 1
        return None


def not_reported_here(record: logging.LogRecord) -> bool:
    """A filter for Django's `django.request` logger: drop its bare `Unauthorized` line
    for a refusal already reported here (with the details, and within the budget)."""
    return not getattr(getattr(record, "request", None), REPORTED, False)


def report(
    request: HttpRequest,
    reason: str,
    detail: str,
    *,
    prefix: str | None = None,
    name: str | None = None,
) -> None:
    """Count one refused credential, and log it unless its address's budget is spent."""
    for observer in observers:
        try:
            observer(reason)
        except Exception:  # counting must never change the answer
            logger.debug("auth failure observer failed", exc_info=True)
    setattr(request, REPORTED, True)
    address = str(request.META.get("REMOTE_ADDR") or "unknown")
    skipped = _take(address, reason)
    if skipped is None:
        return
    context: dict[str, object] = {
        "clientAddress": address,
        "reason": reason,
        "credentialPrefix": prefix,
        "path": request.path,
    }
    if name is not None:
        context["credentialName"] = name
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    if forwarded:  # claimed by the client or a proxy: shown, never trusted
        context["forwardedFor"] = str(forwarded)[:MAX_FORWARDED]
    if skipped:
        context["notLogged"] = skipped
    shown = f" {prefix}…" if prefix else ""
    log_event(
        logger,
        "auth.failed",
        f"refused a bearer token{shown} from {address}: {reason} ({detail})",
        level=logging.WARNING,
        **context,
    )
