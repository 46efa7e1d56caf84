"""WhiteNoise as an async-capable middleware: static files keep WhiteNoise, every other
request stays on the event loop (T-2).

`WhiteNoiseMiddleware` is synchronous only, so under ASGI Django runs it in a worker
thread and hands the rest of the chain back to the event loop with `async_to_sync`: every
API request then crossed between the loop and a thread three times instead of once (the
view's own hop). WhiteNoise only ever answers paths under its static prefix (WHITENOISE_ROOT,
which would serve from `/`, is not used here; when it is set, every request goes through
WhiteNoise as before), so this wrapper calls it for those paths and passes the others
straight on. Responses are the same: WhiteNoise's own code serves every static file.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        self.whitenoise = WhiteNoiseMiddleware(
            async_to_sync(get_response) if self.is_async else get_response
        )
        # "" matches every path: with WHITENOISE_ROOT WhiteNoise may answer any URL.
        self.prefix = (
            "" if getattr(settings, "WHITENOISE_ROOT", None) else self.whitenoise.static_prefix
        )
        self._serve = sync_to_async(self.whitenoise)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return self.whitenoise(request)

    async def _acall(self, request: HttpRequest) -> Any:
        if request.path_info.startswith(self.prefix):
            return await self._serve(request)
        return await self.get_response(request)
