"""Operator audit (U-3): the operator actions that write no receipt of their own.

Abort, steer and follow-up are receipts on the job's stream already. Redrive, verify and
replay change no stream, so each is recorded here, with `by`, on the audit stream of its
target: `audit/<target stream>`, or `audit/<prefix>*` for a command over a prefix.
Audit streams belong to no family: no reducer or projector reads them, so recording an
action never moves a job's `updated_at` (which L-1's redrive keys and ages read) and
never changes the chain that was just verified. Their receipts carry no organization
in their context, so organization-bound principals never see them (Q-2).
"""

from __future__ import annotations

import getpass
import hashlib
from typing import Any

from receipts import store
from receipts.core.chain import Receipt, Verification

PREFIX = "audit/"
REDRIVEN = "operator.redriven"
VERIFIED = "operator.verified"
REPLAYED = "operator.replayed"


def cli_actor() -> str:
    """`by` of a management command run without `--by`: `cli:<OS user>`."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no user name in the environment (some containers)
        return "cli:unknown"


def stream_for(target: str) -> str:
    """The audit stream of `target`; an audit stream is its own (no `audit/audit/...`)."""
    if target.startswith(PREFIX):
        return target
    name = PREFIX + target
    if len(name) <= store.MAX_STREAM_NAME:
        return name
    return f"{PREFIX}~{hashlib.sha256(target.encode()).hexdigest()}"


def target_of(target: str, *, single: bool) -> str:
    """What a command over `store.matching_streams(target)` acted on: the one stream
    `target` names, or every stream under it as a prefix (`<prefix>*`)."""
    return target if single else target + "*"


def record(
    target: str, action: str, *, by: str, now_ms: int | None = None, **details: Any
) -> Receipt:
    body = {"type": action, "target": target, "by": by, **details}
    return store.append(stream_for(target), body, context={"actor": by}, now_ms=now_ms)[0]


def record_verify(target: str, verification: Verification, *, by: str) -> Receipt:
    extra: dict[str, Any] = (
        {} if verification.ok else {"index": verification.index, "reason": verification.reason}
    )
    return record(target, VERIFIED, by=by, ok=verification.ok, count=verification.count, **extra)


def record_replay(
    target: str, *, by: str, dry_run: bool, drift: int, refused: str | None = None
) -> Receipt:
    return record(target, REPLAYED, by=by, dryRun=dry_run, drift=drift, refused=refused)


def record_redrive(job_stream: str, started: Any, *, by: str, now_ms: int | None = None) -> Receipt:
    """A driver delivery an operator started (`started`: the dispatch's StartResult)."""
    return record(
        job_stream,
        REDRIVEN,
        by=by,
        now_ms=now_ms,
        started=started.created,
        promiseId=started.promise_id,
        reason=None if started.created else started.reason,
    )


def history(target: str, *, limit: int = 50) -> list[Receipt]:
    """The latest `limit` actions on `target`, oldest first."""
    info = store.stream_info(stream_for(target))
    if info is None:
        return []
    return store.read(info.name, after=max(0, info.count - limit), limit=limit)


def describe(body: dict[str, Any]) -> str:
    """One line for the admin: what was done and what came of it (the who and when are
    shown beside it)."""
    kind = body.get("type")
    if kind == REDRIVEN:
        if body.get("started"):
            return f"redriven: driver delivery {body.get('promiseId')} started"
        return f"redriven: no new delivery ({body.get('reason') or 'not started'})"
    if kind == VERIFIED and "streams" in body:  # a command over a prefix
        broken = len(body.get("broken") or [])
        return f"verified {body['streams']} stream(s): {broken or 'none'} broken"
    if kind == VERIFIED:
        if body.get("ok"):
            return f"chain verified: ok, {body.get('count')} receipts"
        return f"chain verified: broken ({body.get('reason')} at index {body.get('index')})"
    if kind == REPLAYED:
        what = "replay dry run" if body.get("dryRun") else "replayed (read model rebuilt)"
        if body.get("refused"):
            return f"{what}: refused ({body['refused']})"
        drift = body.get("drift") or 0
        return f"{what}: {'no drift' if not drift else f'{drift} row(s) drifted'}"
    return str(kind)
