"""Open health endpoints (A-8): `/healthz` always answers 200, `/readyz` 503 without a DB."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse

from receipt_site.config import redact_url

_STARTED = time.monotonic()


def _database() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    if connection.vendor == "postgresql":
        target = redact_url(f"postgres://{db.get('USER') or ''}@{db.get('HOST')}:{db.get('PORT') or 5432}/{db['NAME']}")
    else:
        target = f"sqlite:{db['NAME']}"
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"ok": True, "vendor": connection.vendor, "target": target}
    except Exception as error:  # health must answer whatever the database does
        return {"ok": False, "vendor": connection.vendor, "target": target,
                "error": type(error).__name__}


def healthz(request: HttpRequest) -> JsonResponse:
    database = _database()
    return JsonResponse({
        "ok": True,
        "ready": database["ok"],
        "degraded": not database["ok"],
        "uptimeSec": int(time.monotonic() - _STARTED),
        "processRole": settings.RECEIPT.process_role or "api",
        "database": database,
    })


def readyz(request: HttpRequest) -> JsonResponse:
    database = _database()
    return JsonResponse({"ok": database["ok"], "database": database},
                        status=200 if database["ok"] else 503)
