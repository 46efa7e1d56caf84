"""Open live responses re-check their credential (issue 31; A-10, Q-1).

A stream or a long poll authenticates once and may then stay open for minutes, so a
revoked token would keep receiving frames, job data included, for as long as its client
stayed. Each open response registers a `Hold` here; once a second one task per process
reads every held credential again, past the token cache (all the tokens in one query,
each session by its key), and marks the holds whose credential no longer grants what the
response needs: the token revoked, deleted, re-scoped or moved to another organization;
the session ended, or its user lost the permission. The response then ends (streams) or
answers the error (the long poll) at once: within about `CHECK_EVERY_S` plus one query of
the revocation, whichever process wrote it.

Must not: end a response because the check itself failed (the database is down: the
feed sends nothing then either, and the next check decides), or cost a query per client.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from access import principals
from access.principals import Principal
from observability.logs import log_event
from receipts.live import db

logger = logging.getLogger("receipt.live")
CHECK_EVERY_S = 1.0
BATCH = 500  # token digests per query


@dataclass(eq=False)
class Hold:
    """One open response's credential and what it needs of it."""

    kind: str  # "token" (key: the token's digest) | "session" (key: the session key)
    key: str
    scope: str
    organization_id: str | None
    wake: Callable[[], None] = lambda: None  # called once the credential is lost
    lost: tuple[str, str, int] | None = field(default=None)  # (code, detail, status)


def verdict(hold: Hold, now: Principal | None) -> tuple[str, str, int] | None:
    """Why `hold` may no longer be served with the credential as it is `now`, or None."""
    if now is None:
        if hold.kind == "session":
            return "not_authenticated", "the admin session has ended", 401
        return "invalid_token", "unknown or revoked token", 401
    if not now.has_scope(hold.scope):
        return "missing_scope", f"this credential lacks the {hold.scope} scope", 403
    if now.organization_id != hold.organization_id:
        return "invalid_token", "the token's organization has changed", 401
    return None


def read_credentials(keys: list[tuple[str, str]]) -> dict[tuple[str, str], Principal | None]:
    """Each (kind, key) as it is now in the database (synchronous: the live pool runs it)."""
    digests = [key for kind, key in keys if kind == "token"]
    found: dict[str, Principal] = {}
    for start in range(0, len(digests), BATCH):
        found.update(principals.valid_tokens(digests[start : start + BATCH]))
    out: dict[tuple[str, str], Principal | None] = {}
    for kind, key in keys:
        out[(kind, key)] = found.get(key) if kind == "token" else principals.session_principal(key)
    return out


class Watch:
    """Every hold of one event loop, and the task that re-checks them while there are any."""

    def __init__(self) -> None:
        self._holds: set[Hold] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, hold: Hold) -> None:
        self._holds.add(hold)
        if self._task is None or self._task.done():
            # An empty context: the task outlives the request that started it.
            self._task = asyncio.get_running_loop().create_task(
                self._check_forever(), context=contextvars.Context()
            )

    def discard(self, hold: Hold) -> None:
        self._holds.discard(hold)

    async def _check_forever(self) -> None:
        while self._holds:
            await asyncio.sleep(CHECK_EVERY_S)
            holds = list(self._holds)
            if holds:
                await self._check(holds)

    async def _check(self, holds: list[Hold]) -> None:
        keys = sorted({(hold.kind, hold.key) for hold in holds})
        try:
            now = await db.run(read_credentials, keys)
        except Exception as error:  # the database is down: keep them, decide next time
            log_event(
                logger,
                "live.credential_check_failed",
                f"cannot re-check the credentials of open live responses: {error}",
                level=logging.WARNING,
            )
            return
        for hold in holds:
            if hold.lost is None and hold in self._holds:
                hold.lost = verdict(hold, now.get((hold.kind, hold.key)))
                if hold.lost is not None:
                    if hold.kind == "token":  # new requests of this process too, at once
                        principals.forget_token(hold.key)
                    log_event(
                        logger,
                        "live.credential_lost",
                        f"an open live response ends: {hold.lost[1]}",
                        credentialKind=hold.kind,
                        reason=hold.lost[0],
                    )
                    hold.wake()


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Watch] = weakref.WeakKeyDictionary()


def watch(hold: Hold) -> Hold:
    """Re-check `hold` from now on, until `release(hold)`."""
    loop = asyncio.get_running_loop()
    found = _watches.get(loop)
    if found is None:
        found = _watches[loop] = Watch()
    found.add(hold)
    return hold


def release(hold: Hold) -> None:
    found = _watches.get(asyncio.get_running_loop())
    if found is not None:
        found.discard(hold)
