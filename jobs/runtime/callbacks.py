"""D-8: job event callbacks. A JSON POST to the configured URL; a failure is logged and
counted and never fails the job."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings

from jobs.core.reducer import JobState
from jobs.runtime import counters
from receipt_site.logs import log_event

logger = logging.getLogger("receipt.callbacks")
TIMEOUT_S = 5.0
EVENTS = ("dispatched", "completed", "failed", "canceled")
FAILURES = "receipt_callback_failures_total"


def failure_count() -> int:
    """Failures seen by this process (all processes: the receipt_callback_failures_total
    series of /metrics)."""
    return int(sum(counters.value(FAILURES, event=e) for e in EVENTS))


def body_for(event: str, job: JobState, *, at_ms: int) -> dict[str, Any]:
    return {"event": event, "jobId": job.job_id, "stream": job.stream, "status": job.status,
            "attempt": job.attempt, "agentId": job.agent_id, "kind": job.kind, "at": at_ms}


def post(event: str, job: JobState, *, at_ms: int) -> bool:
    """POST the callback if a URL is configured; True when it was delivered (2xx)."""
    config = settings.RECEIPT
    url = config.callback_url
    if not url:
        return False
    data = json.dumps(body_for(event, job, at_ms=at_ms)).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    if config.callback_token:
        request.add_header("Authorization", f"Bearer {config.callback_token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            response.read(1024)
        return True
    except (urllib.error.URLError, OSError, ValueError) as error:
        counters.incr(FAILURES, event=event)
        log_event(logger, "callback.failed", f"{event} callback for {job.job_id} failed: {error}",
                  level=logging.WARNING, jobId=job.job_id, callbackEvent=event)
        return False
