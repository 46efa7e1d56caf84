"""Live views: E-1 job events, E-2 the receipt stream, A-6 wait, A-7 the callback.

Thin: guard (`access`), parse, then let a `Follower` on the shared feed say what is new.
Every database call runs on the live pool (`db`), never on the request's own thread.
"""

from __future__ import annotations

import hmac
import json
import re
import time
from collections.abc import AsyncIterator

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from jobs.live import access, db, feed, reads, sse
from jobs.live.access import Refused, refuse
from jobs.live.config import CONFIG
from jobs.live.follower import Filter, Follower
from jobs.live.listener import INVALIDATE_CHANNEL
from jobs.presenters import job_json
from receipts.errors import InvalidEvent
from receipts.store import check_stream_name

WAIT_DEFAULT_MS = 15_000
WAIT_MAX_MS = 120_000
_INTEGER = re.compile(r"-?\d{1,15}")
_SEQ = re.compile(r"\d{1,19}")
MAX_EVENT_TYPE = 100
WRITE_SCOPE = "jobs:write"


def _keepalive_s() -> float:
    return CONFIG.keepalive_ms / 1000


def _allow(request: HttpRequest, method: str) -> None:
    if request.method != method:
        raise refuse("method_not_allowed", f"{request.method} is not allowed here; use {method}",
                     405, {"Allow": method})


def _asgi_only(request: HttpRequest) -> None:
    # Under WSGI Django would buffer an endless stream into memory before sending it.
    if not isinstance(request, ASGIRequest):
        raise refuse("asgi_required", "live event streams need the ASGI server "
                     "(python -m uvicorn receipt_site.asgi:application)", 501)


def _last_event_id(request: HttpRequest) -> int | None:
    """E-2: the `Last-Event-ID` header, or `?lastEventId=` for EventSource polyfills."""
    raw = request.headers.get("Last-Event-ID") or request.GET.get("lastEventId") or ""
    raw = raw.strip()
    if not raw:
        return None
    if not _SEQ.fullmatch(raw):
        raise refuse("invalid_last_event_id",
                     f"Last-Event-ID must be a global sequence number, got {raw[:40]!r}", 400)
    return int(raw)


async def _feed() -> feed.Feed:
    """The running feed, caught up with everything committed before this request."""
    try:
        live = await feed.running()
        await live.catch_up()
        return live
    except feed.FeedUnavailable as error:
        raise refuse("live_unavailable", str(error), 503, {"Retry-After": "2"}) from None


# ---- E-1 GET /jobs/<id>/events --------------------------------------------------------------


async def job_events(request: HttpRequest, job_id: str) -> HttpResponse:
    try:
        _allow(request, "GET")
        _asgi_only(request)
        resume = _last_event_id(request)
        _, job = await access.visible_job(request, job_id)
        live = await _feed()
    except Refused as refused:
        return refused.response
    follower = Follower(live, cursor=live.horizon if resume is None else resume,
                        filter=Filter(stream=job.stream))
    missed = await follower.poll() if resume is not None else ([], [])
    if resume is not None and job.is_terminal and not missed[0]:
        # Nothing after the client's last id and nothing can follow: 204 is the one answer
        # that makes EventSource stop reconnecting (the stream ended at the terminal state).
        return HttpResponse(status=204)
    return sse.response(_job_frames(follower, job_id, missed))


async def _job_frames(follower: Follower, job_id: str,
                      missed: tuple[list[reads.Entry], list[feed.Invalidation]]
                      ) -> AsyncIterator[bytes]:
    # The cursor was taken before this read, so no receipt can slip between the two.
    job = await db.run(reads.job, job_id)
    if job is None:
        return
    yield (sse.frame("job-refresh", "init", id=follower.cursor)
           + sse.json_frame("job", job_json(job)))
    receipts, invalidations = missed
    if job.is_terminal and not receipts:
        return  # decision: the stream ends once the job is terminal (docs/live-events.md)
    last_write = time.monotonic()
    while True:
        if receipts or invalidations:
            chunk = [sse.frame("job-refresh", e.type, id=e.seq) for e in receipts]
            chunk += [sse.frame("job-refresh", i.type) for i in invalidations]
            job = await db.run(reads.job, job_id)
            if job is None:
                return
            yield b"".join([*chunk, sse.json_frame("job", job_json(job))])
            last_write = time.monotonic()
            if job.is_terminal:
                return
        else:
            idle = time.monotonic() - last_write
            if idle >= _keepalive_s():
                yield sse.ping(follower.cursor)
                last_write = time.monotonic()
            else:
                await follower.wait(_keepalive_s() - idle)
        receipts, invalidations = await follower.poll()


# ---- E-2 GET /receipt/stream[?prefix=] --------------------------------------------------------


async def receipt_stream(request: HttpRequest) -> HttpResponse:
    try:
        _allow(request, "GET")
        _asgi_only(request)
        resume = _last_event_id(request)
        prefix = request.GET.get("prefix", "")
        if len(prefix) > 255:
            raise refuse("invalid_prefix", "prefix must be at most 255 characters", 400)
        who = await access.principal(request, access.READ_SCOPE)
        live = await _feed()
    except Refused as refused:
        return refused.response
    follower = Follower(live, cursor=live.horizon if resume is None else resume,
                        filter=Filter(prefix=prefix, org=who.organization_id))
    return sse.response(_receipt_frames(follower))


async def _receipt_frames(follower: Follower) -> AsyncIterator[bytes]:
    yield sse.ping(follower.cursor)  # carries the starting position: resumable at once
    last_write = time.monotonic()
    while True:
        receipts, invalidations = await follower.poll()
        if receipts or invalidations:
            chunk = [sse.frame("receipt-refresh", e.stream, id=e.seq) for e in receipts]
            # an invalidation has no id: it is not a position in the sequence
            chunk += [sse.frame("receipt-refresh", i.stream) for i in invalidations]
            yield b"".join(chunk)
            last_write = time.monotonic()
            continue
        idle = time.monotonic() - last_write
        if idle >= _keepalive_s():
            yield sse.ping(follower.cursor)
            last_write = time.monotonic()
        else:
            await follower.wait(_keepalive_s() - idle)


# ---- A-6 GET /jobs/<id>/wait?timeoutMs= ---------------------------------------------------------


def _timeout_ms(request: HttpRequest) -> int:
    raw = request.GET.get("timeoutMs", "").strip()
    if not raw:
        return WAIT_DEFAULT_MS
    if not _INTEGER.fullmatch(raw):
        raise refuse("invalid_timeout",
                     f"timeoutMs must be an integer number of milliseconds, got {raw[:40]!r}", 400)
    return max(0, min(WAIT_MAX_MS, int(raw)))


async def wait_job(request: HttpRequest, job_id: str) -> HttpResponse:
    try:
        _allow(request, "GET")
        timeout_ms = _timeout_ms(request)
        _, job = await access.visible_job(request, job_id)
        live = await _feed() if timeout_ms and not job.is_terminal else None
    except Refused as refused:
        return refused.response
    if live is not None:
        deadline = time.monotonic() + timeout_ms / 1000
        follower = Follower(live, cursor=live.horizon, filter=Filter(stream=job.stream))
        job = await db.run(reads.job, job_id) or job  # after the cursor: nothing slips by
        while not job.is_terminal:
            receipts, invalidations = await follower.poll()
            if receipts or invalidations:
                job = await db.run(reads.job, job_id) or job
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            await follower.wait(remaining)
    response = JsonResponse({"ok": True, "job": job_json(job)})
    response["Deprecation"] = "true"
    response["Link"] = f'</jobs/{job_id}/events>; rel="successor-version"'
    response["Cache-Control"] = "no-store"
    return response


# ---- A-7 POST /receipt/callback ---------------------------------------------------------------


async def _callback_caller(request: HttpRequest) -> str | None:
    """None when the caller may invalidate anything, else the only organization it may."""
    expected = settings.RECEIPT.callback_token
    header = request.headers.get("Authorization", "")
    if expected:
        if not header:
            raise refuse("not_authenticated", "send Authorization: Bearer <callback token>",
                         401, access.CHALLENGE)
        scheme, _, secret = header.partition(" ")
        # constant time, whatever the scheme, so the answer leaks nothing by its timing.
        valid = hmac.compare_digest(secret.strip().encode(), expected.encode())
        if scheme.lower() != "bearer" or not valid:
            raise refuse("invalid_token", "the callback token is not valid", 401,
                         access.CHALLENGE)
        return None
    # No callback token configured: an API token with jobs:write. A session is refused
    # (this view is CSRF-exempt, so a browser must not be able to call it by itself).
    if not header:
        raise refuse("not_authenticated",
                     "credentials are required: send Authorization: Bearer <token>", 401,
                     access.CHALLENGE)
    who = await access.principal(request, WRITE_SCOPE)
    return who.organization_id


def _callback_body(request: HttpRequest) -> tuple[str, str]:
    try:
        body = json.loads(request.body or b"null")
    except RequestDataTooBig:
        raise refuse("payload_too_large", "the callback body is too large", 413) from None
    except (ValueError, UnicodeDecodeError):
        raise refuse("malformed_json", "the body is not valid JSON", 400) from None
    if not isinstance(body, dict):
        raise refuse("body_not_object", "the body must be a JSON object", 400)
    stream = body.get("stream")
    if not isinstance(stream, str) or not stream:
        raise refuse("stream_required", "stream required", 400)
    try:
        check_stream_name(stream)
    except InvalidEvent as error:
        raise refuse("invalid_stream", str(error), 400) from None
    # `event` too: the D-8 event callback names it so, and may point at this endpoint.
    event_type = next((body[k] for k in ("eventType", "type", "event") if body.get(k)), None)
    if not isinstance(event_type, str) or len(event_type) > MAX_EVENT_TYPE:
        raise refuse("event_type_required", "eventType required", 400)
    return stream, event_type


def _notify_invalidation(payload: str) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [INVALIDATE_CHANNEL, payload])


@csrf_exempt
async def receipt_callback(request: HttpRequest) -> HttpResponse:
    try:
        _allow(request, "POST")
        only_org = await _callback_caller(request)
        stream, event_type = _callback_body(request)
    except Refused as refused:
        return refused.response
    org = await db.run(reads.stream_organization, stream)
    if only_org is not None and org != only_org:
        return JsonResponse({"ok": True}, status=202)  # accepted, but not its stream: ignored
    if connections["default"].vendor == "postgresql":
        # Every API process listens on this channel: all their clients re-check.
        payload = json.dumps({"stream": stream, "type": event_type, "org": org})
        await db.run(_notify_invalidation, payload)
    elif (local := feed.existing()) is not None:
        local.invalidate(stream, event_type, org)
    return JsonResponse({"ok": True}, status=202)
