"""A-6 `GET /jobs/<id>/wait?timeoutMs=`: the deprecated long poll, woken by the feed."""

from __future__ import annotations

import re
import time

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from jobs.live import access, checks, credentials, snapshots
from jobs.live.access import Refused, refuse
from jobs.presenters import job_json
from receipts.live.follower import Filter, Follower

WAIT_DEFAULT_MS = 15_000
WAIT_MAX_MS = 120_000
_INTEGER = re.compile(r"-?\d{1,15}")


def _timeout_ms(request: HttpRequest) -> int:
    raw = request.GET.get("timeoutMs", "").strip()
    if not raw:
        return WAIT_DEFAULT_MS
    if not _INTEGER.fullmatch(raw):
        raise refuse(
            "invalid_timeout",
            f"timeoutMs must be an integer number of milliseconds, got {raw[:40]!r}",
            400,
        )
    return max(0, min(WAIT_MAX_MS, int(raw)))


@csrf_exempt  # GET only: any other method gets the JSON 405, not an HTML CSRF page
async def wait_job(request: HttpRequest, job_id: str) -> HttpResponse:
    try:
        checks.allow(request, "GET")
        checks.single(request, "timeoutMs")
        timeout_ms = _timeout_ms(request)
        who, job = await access.visible_job(request, job_id)
        live = await checks.running_feed() if timeout_ms and not job.is_terminal else None
    except Refused as refused:
        return refused.response
    if live is not None:
        deadline = time.monotonic() + timeout_ms / 1000
        follower = Follower(live, cursor=live.horizon, filter=Filter(stream=job.stream))
        held = access.hold(request, who)
        held.wake = follower.interrupt
        credentials.watch(held)  # a revocation answers the poll at once, with the error
        # read after the cursor was taken: nothing slips between the two
        try:
            job = await snapshots.job(job_id, since=follower.polled_at) or job
            while not job.is_terminal and not held.lost:
                receipts, invalidations = await follower.poll()
                if receipts or invalidations:
                    job = await snapshots.job(job_id, since=follower.polled_at) or job
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                await follower.wait(remaining)
        finally:
            credentials.release(held)
            follower.close()
        if held.lost:
            return access.lost(held).response
    response = JsonResponse({"ok": True, "job": job_json(job)})
    response["Deprecation"] = "true"
    response["Link"] = f'</jobs/{job_id}/events>; rel="successor-version"'
    response["Cache-Control"] = "no-store"
    return response
