"""E-1 `GET /jobs/<id>/events` and E-2 `GET /receipt/stream`: the SSE views.

Thin: check and guard, then let a `Follower` on the shared feed say what is new and turn
it into frames (docs/live-events.md has the formats and the resume rules). The stream
ends as soon as its credential no longer serves it (`credentials`: revoked, re-scoped,
the session ended).
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from jobs.live import access, checks, credentials, snapshots, sse
from jobs.live.access import Refused, refuse
from jobs.presenters import job_json
from receipts.live import feed, reads
from receipts.live.follower import Filter, Follower

# ---- E-1 GET /jobs/<id>/events --------------------------------------------------------------


@csrf_exempt  # GET only: any other method gets the JSON 405, not an HTML CSRF page
async def job_events(request: HttpRequest, job_id: str) -> HttpResponse:
    try:
        checks.allow(request, "GET")
        checks.asgi_only(request)
        checks.single(request, "lastEventId")
        resume = checks.last_event_id(request)
        who, job = await access.visible_job(request, job_id)
        live = await checks.running_feed()
    except Refused as refused:
        return refused.response
    follower = Follower(
        live, cursor=live.horizon if resume is None else resume, filter=Filter(stream=job.stream)
    )
    missed = await follower.poll() if resume is not None else ([], [])
    if resume is not None and job.is_terminal and not missed[0]:
        # Nothing after the client's last id and nothing can follow: 204 is the one answer
        # that makes EventSource stop reconnecting (the stream ended at the terminal state).
        return HttpResponse(status=204)
    held = access.hold(request, who)
    return sse.response(_job_frames(follower, job_id, missed, held))


async def _job_frames(
    follower: Follower,
    job_id: str,
    missed: tuple[list[reads.Entry], list[feed.Invalidation]],
    held: credentials.Hold,
) -> AsyncIterator[bytes]:
    held.wake = follower.interrupt
    credentials.watch(held)  # the stream ends once its credential no longer serves it
    try:
        # The cursor was taken before this read, so no receipt can slip between the two.
        job = await snapshots.job(job_id, since=follower.polled_at)
        if job is None:
            return
        yield (
            sse.frame("job-refresh", "init", id=follower.cursor)
            + sse.json_frame("job", job_json(job))
        )
        receipts, invalidations = missed
        if job.is_terminal and not receipts:
            return  # decision: the stream ends once the job is terminal (docs/live-events.md)
        last_write = time.monotonic()
        while True:
            if receipts or invalidations:
                chunk = [sse.frame("job-refresh", e.type, id=e.seq) for e in receipts]
                chunk += [sse.frame("job-refresh", i.type) for i in invalidations]
                job = await snapshots.job(job_id, since=follower.polled_at)
                if job is None or held.lost:
                    return
                yield b"".join([*chunk, sse.json_frame("job", job_json(job))])
                last_write = time.monotonic()
                if job.is_terminal:
                    return
            # straight to waiting, as in _receipt_frames: one poll per wake-up
            ping = await _ping_or_wait(follower, last_write, held)
            if held.lost:
                return
            if ping is not None:
                yield ping
                last_write = time.monotonic()
            receipts, invalidations = await follower.poll()
    finally:
        credentials.release(held)
        follower.close()  # its keepalive timer


# ---- E-2 GET /receipt/stream[?prefix=] --------------------------------------------------------


@csrf_exempt  # GET only: any other method gets the JSON 405, not an HTML CSRF page
async def receipt_stream(request: HttpRequest) -> HttpResponse:
    try:
        checks.allow(request, "GET")
        checks.asgi_only(request)
        checks.single(request, "prefix", "lastEventId")
        resume = checks.last_event_id(request)
        prefix = request.GET.get("prefix", "")
        if len(prefix) > 255:
            raise refuse("invalid_prefix", "prefix must be at most 255 characters", 400)
        who = await access.principal(request, access.READ_SCOPE)
        live = await checks.running_feed()
    except Refused as refused:
        return refused.response
    follower = Follower(
        live,
        cursor=live.horizon if resume is None else resume,
        filter=Filter(prefix=prefix, org=who.organization_id),
    )
    return sse.response(_receipt_frames(follower, access.hold(request, who)))


async def _receipt_frames(follower: Follower, held: credentials.Hold) -> AsyncIterator[bytes]:
    held.wake = follower.interrupt
    credentials.watch(held)  # the stream ends once its credential no longer serves it
    try:
        yield sse.ping(follower.cursor)  # carries the starting position: resumable at once
        last_write = time.monotonic()
        while True:
            receipts, invalidations = await follower.poll()
            if held.lost:
                return
            if receipts or invalidations:
                # Followers woken together mostly have the same batch: render it once (T-6).
                chunk = follower.feed.shared(
                    ("receipt-refresh", follower.batch),
                    functools.partial(_refresh_frames, receipts),
                )
                # an invalidation has no id: it is not a position in the sequence
                yield chunk + b"".join(
                    sse.frame("receipt-refresh", i.stream) for i in invalidations
                )
                last_write = time.monotonic()
            # straight to waiting: the signal taken by that poll is already set if anything
            # came since, so there is no second poll per wake-up
            ping = await _ping_or_wait(follower, last_write, held)
            if held.lost:
                return
            if ping is not None:
                yield ping
                last_write = time.monotonic()
    finally:
        credentials.release(held)
        follower.close()  # its keepalive timer


async def _ping_or_wait(
    follower: Follower, last_write: float, held: credentials.Hold
) -> bytes | None:
    """A keepalive ping when the stream has been quiet for the keepalive interval; else
    wait (at most until then) for the follower's next wake-up and return None. A lost
    credential interrupts the wait (`Hold.wake`)."""
    idle = time.monotonic() - last_write
    if idle >= checks.keepalive_s():
        return sse.ping(follower.cursor)
    if not held.lost:
        await follower.wait(checks.keepalive_s() - idle)
    return None


def _refresh_frames(receipts: list[reads.Entry]) -> bytes:
    return b"".join(sse.frame("receipt-refresh", e.stream, id=e.seq) for e in receipts)
