"""Server-sent event frames and the streaming response that carries them (E-1, E-2)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from django.http import StreamingHttpResponse

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
HEADERS = {
    "Cache-Control": "no-store",
    "X-Accel-Buffering": "no",  # nginx: pass frames through as they come
}


def frame(event: str, data: str, *, id: int | None = None) -> bytes:
    """One SSE frame. A data value with line breaks becomes several `data:` lines (the
    client joins them back), so no stream name or event type can inject a field."""
    lines = [f"event: {event}"]
    if id is not None:
        lines.append(f"id: {id}")
    lines += [f"data: {part}" for part in _LINE_BREAK.split(data)]
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def json_frame(event: str, value: Any) -> bytes:
    return frame(event, json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def ping(cursor: int) -> bytes:
    # The id is the position the client has fully seen; a reconnect resumes from there
    # instead of re-scanning everything it was not interested in.
    return frame("ping", "keepalive", id=cursor)


def response(frames: AsyncIterator[bytes]) -> StreamingHttpResponse:
    stream = StreamingHttpResponse(frames, content_type="text/event-stream")
    for name, value in HEADERS.items():
        stream[name] = value
    return stream
