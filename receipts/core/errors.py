"""The one error root every app's errors derive from: a stable API code, an HTTP status
and a sentence with the ids in it. Pure, so the cores' own refusals can carry a code too;
the HTTP layer renders any `AppError` the same way and needs no per-app list."""

from __future__ import annotations


class AppError(Exception):
    code = "app_error"
    status = 409
