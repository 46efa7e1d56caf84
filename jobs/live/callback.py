"""A-7 `POST /receipt/callback`: an invalidation, not an append. It writes no receipt; it
tells live clients of a stream to re-check (docs/live-events.md)."""

from __future__ import annotations

import hmac
import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from jobs.live import access, checks
from jobs.live.access import Refused, refuse
from receipts.errors import InvalidEvent
from receipts.live import db, feed, reads
from receipts.live.listener import INVALIDATE_CHANNEL
from receipts.store import check_stream_name

MAX_EVENT_TYPE = 100
WRITE_SCOPE = "jobs:write"


async def _callback_caller(request: HttpRequest) -> str | None:
    """None when the caller may invalidate anything, else the only organization it may."""
    expected = settings.RECEIPT.callback_token
    header = request.headers.get("Authorization", "")
    if expected:
        if not header:
            raise refuse(
                "not_authenticated",
                "send Authorization: Bearer <callback token>",
                401,
                access.CHALLENGE,
            )
        scheme, _, secret = header.partition(" ")
        # constant time, whatever the scheme, so the answer leaks nothing by its timing.
        valid = hmac.compare_digest(secret.strip().encode(), expected.encode())
        if scheme.lower() != "bearer" or not valid:
            raise refuse("invalid_token", "the callback token is not valid", 401, access.CHALLENGE)
        return None
    # No callback token configured: an API token with jobs:write. A session is refused
    # (this view is CSRF-exempt, so a browser must not be able to call it by itself).
    if not header:
        raise refuse(
            "not_authenticated",
            "credentials are required: send Authorization: Bearer <token>",
            401,
            access.CHALLENGE,
        )
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
        checks.allow(request, "POST")
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
