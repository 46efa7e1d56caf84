"""D-8 job event callbacks, durable: the sender of the transactional outbox that
`jobs.callbacks.record` writes in the transaction of the write that caused the event.

No attempt waits on a receiver: the worker and the driver only record. Each runworker
posts through its `Sender`, a bounded set of claimed rows posted by daemon threads that
do HTTP only (no database connection); `pump` (the `callbacks` loop, on the keeper's
time-critical schedule) writes the answers the sender has and claims as many due rows as
it has room for, so a pass never waits on a receiver either. A row the sender has no
room for stays due for the next pass or another process. `deliver_due` posts and waits
(tests and one-off use).

A claim moves the row's next try past CLAIM_MS, under FOR UPDATE SKIP LOCKED on
PostgreSQL and a conditional UPDATE on SQLite, so two processes never post one row at
once, and a process that dies with claimed rows (queued, mid-post, or answered but not
written) leaves them to the loop once the claim runs out: delivered at least once, never
lost. A failure is logged, counted and retried with backoff until
RECEIPT_CALLBACK_RETRY_FOR_MS after the event; it never fails the job.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Q

from jobs.core import callbacks as core
from jobs.models import Callback
from jobs.runtime import counters
from jobs.runtime.loops import Report
from observability.logs import log_event

logger = logging.getLogger("receipt.callbacks")
TIMEOUT_S = 5.0
DELIVER_INTERVAL_MS = 2_000  # the loop's cadence without a URL (rows of an earlier one)
PUMP_INTERVAL_MS = 500  # with a URL: how soon a recorded callback is picked up
CLAIM_MS = 30_000  # a claimed row is due again after this: longer than one post can take
ROUND = 16  # deliver_due: rows claimed and posted at once (one thread each)
PASS_BUDGET_S = 2.0  # deliver_due starts no new round after this
SENDER_THREADS = 16  # posts a runworker has in flight at once
PUMP_BUDGET_S = 0.25  # a pump pass keeps a quickly answering sender fed this long at most
ANSWER_WAIT_S = 0.02  # ... as long as an answer comes back within this
SENDER_ROWS = 64  # claimed rows a runworker holds at most (queued, posting, answered)
# A claimed row waits for at most SENDER_ROWS / SENDER_THREADS posts (its own included),
# each at most TIMEOUT_S: its claim must outlast that, or a replica would post it too.
assert SENDER_ROWS / SENDER_THREADS * TIMEOUT_S < CLAIM_MS / 1000
PASS_LIMIT = 512
KEEP_MS = 7 * 24 * 3_600_000  # delivered and given-up rows are pruned after a week
FAILURES = "receipt_callback_failures_total"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is an answer, not a delivery: urllib would re-send a GET


_OPENER = urllib.request.build_opener(_NoRedirect)


# ---- delivery ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Claimed:
    id: int
    job_id: str
    event: str
    url: str
    body: Any
    attempts: int
    give_up_at: int


@dataclass(frozen=True)
class _Answer:
    ok: bool
    status: int | None
    error: str | None


class Sender:
    """A process's callback sender: claimed rows posted by SENDER_THREADS daemon threads
    (HTTP only), their answers kept for the next `pump` to write. Holds at most
    `capacity` rows, queued, in flight or answered: `pump` claims no more than `room()`."""

    def __init__(self, *, threads: int = SENDER_THREADS, capacity: int = SENDER_ROWS) -> None:
        self.threads = threads
        self.capacity = capacity
        self._rows: queue.SimpleQueue[_Claimed] = queue.SimpleQueue()
        self._answers: list[tuple[_Claimed, _Answer]] = []
        self._held = 0
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._pid = 0  # the threads are started on first use, again after a fork

    def room(self) -> int:
        with self._lock:
            return self.capacity - self._held

    def offer(self, rows: Sequence[_Claimed]) -> None:
        if not rows:
            return
        with self._lock:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                for n in range(self.threads):
                    threading.Thread(target=self._post, name=f"callback-{n}", daemon=True).start()
            self._held += len(rows)
        for row in rows:
            self._rows.put(row)

    def answers(self) -> list[tuple[_Claimed, _Answer]]:
        """The answers so far, handed over once: their rows leave the sender."""
        with self._lock:
            taken, self._answers = self._answers, []
            self._held -= len(taken)
        return taken

    def wait_answer(self, timeout_s: float) -> bool:
        """Whether an answer is there, or arrives within `timeout_s`; False at once when no
        post is in flight."""
        with self._answered:
            if not self._answers and self._held:
                self._answered.wait(timeout_s)
            return bool(self._answers)

    def _post(self) -> None:
        while True:
            row = self._rows.get()
            answer = _post(row, settings.RECEIPT.callback_token)
            with self._answered:
                self._answers.append((row, answer))
                self._answered.notify_all()


_SENDER = Sender()


def pump(
    *,
    now_ms: int,
    sender: Sender | None = None,
    budget_s: float = PUMP_BUDGET_S,
    answer_wait_s: float = ANSWER_WAIT_S,
) -> Report:
    """The `callbacks` loop: write the outcome of every answered post, then claim as many
    due rows as the sender has room for and hand them over; again while answers come
    back within `answer_wait_s`, for at most `budget_s`, so a quick receiver gets more
    than one sender-load a pass. Never waits on a receiver longer than that: a hung one
    costs the sender's threads, not this pass, and a row the sender has no room for
    stays due."""
    sender = _SENDER if sender is None else sender
    report = Report("callbacks")
    started = time.monotonic()
    while True:
        report.acted += _settle_all(sender.answers(), now_ms)
        room = sender.room()
        claimed = _claim(now_ms, room) if room > 0 else []
        report.examined += len(claimed)
        sender.offer(claimed)
        if time.monotonic() - started >= budget_s or not sender.wait_answer(answer_wait_s):
            return report


def deliver_due(*, now_ms: int, limit: int = PASS_LIMIT) -> Report:
    """Post every due callback and wait for the answers, rounds of ROUND rows, until none
    is due, `limit` were claimed or the call ran PASS_BUDGET_S (tests, one-off use)."""
    report = Report("callbacks")
    started = time.monotonic()
    while report.examined < limit and time.monotonic() - started < PASS_BUDGET_S:
        claimed = _claim(now_ms, min(ROUND, limit - report.examined))
        report.examined += len(claimed)
        report.acted += _deliver(claimed, now_ms)
        if len(claimed) < ROUND:
            break
    return report


def prune(*, now_ms: int, limit: int = 1000) -> Report:
    """Delete delivered and given-up rows older than KEEP_MS, so the table stays bounded."""
    ids = list(
        Callback.objects.filter(
            state__in=("delivered", "gave_up"), finished_at__lt=now_ms - KEEP_MS
        ).values_list("id", flat=True)[:limit]
    )
    deleted, _ = Callback.objects.filter(id__in=ids).delete() if ids else (0, {})
    return Report("callback_prune", examined=len(ids), acted=deleted)


_DUE = "state = 'pending' AND next_at <= %s"
_TAKEN = "RETURNING id, job_id, event, url, body, attempts, give_up_at"


def _claim(now_ms: int, limit: int) -> list[_Claimed]:
    """Take up to `limit` due rows: each try counts, and its row is due again after
    CLAIM_MS (a process that dies mid-post leaves it to the loop)."""
    take = "SET attempts = attempts + 1, next_at = %s"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"UPDATE jobs_callback {take} WHERE id IN (SELECT id FROM jobs_callback "
                f"WHERE {_DUE} ORDER BY next_at LIMIT %s FOR UPDATE SKIP LOCKED) "
                f"{_TAKEN}",
                [now_ms + CLAIM_MS, now_ms, limit],
            )
        else:  # SQLite: one writer at a time; the WHERE refuses a row another took first
            cursor.execute(
                f"SELECT id FROM jobs_callback WHERE {_DUE} ORDER BY next_at LIMIT %s",
                [now_ms, limit],
            )
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                return []
            cursor.execute(
                f"UPDATE jobs_callback {take} WHERE id IN ({', '.join(['%s'] * len(ids))}) "
                f"AND {_DUE} {_TAKEN}",
                [now_ms + CLAIM_MS, *ids, now_ms],
            )
        rows = cursor.fetchall()
    return sorted(
        (
            _Claimed(
                row[0],
                row[1],
                row[2],
                row[3],
                json.loads(row[4]) if isinstance(row[4], str | bytes) else row[4],
                row[5],
                row[6],
            )
            for row in rows
        ),
        key=lambda c: c.id,
    )


def _deliver(claimed: list[_Claimed], now_ms: int) -> int:
    """Post the claimed rows (at once, one thread each: HTTP only, no database) and write
    each outcome; the number delivered."""
    if not claimed:
        return 0
    token = settings.RECEIPT.callback_token
    if len(claimed) == 1:
        answers = [_post(claimed[0], token)]
    else:
        with ThreadPoolExecutor(max_workers=len(claimed), thread_name_prefix="callback") as pool:
            answers = list(pool.map(lambda row: _post(row, token), claimed))
    return _settle_all(list(zip(claimed, answers, strict=True)), now_ms)


def _post(row: _Claimed, token: str | None) -> _Answer:
    data = json.dumps(row.body).encode("utf-8")
    request = urllib.request.Request(
        row.url,
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", "X-Receipt-Callback-Id": str(row.id)},
    )
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with _OPENER.open(request, timeout=TIMEOUT_S) as response:
            response.read(1024)
            return _Answer(True, response.status, None)
    except urllib.error.HTTPError as error:  # a non-2xx answer
        error.close()
        return _Answer(False, error.code, f"HTTP {error.code} {error.reason}"[:500])
    except (urllib.error.URLError, OSError, ValueError) as error:
        return _Answer(False, None, str(getattr(error, "reason", error))[:500])


def _settle_all(answered: Sequence[tuple[_Claimed, _Answer]], now_ms: int) -> int:
    """Write many tries' outcomes: the deliveries in one statement (each fenced by its
    try's number, as `_settle`), every failure on its own. The number delivered."""
    delivered = [(row, answer) for row, answer in answered if answer.ok]
    for row, answer in answered:
        if not answer.ok:
            _settle(row, answer, now_ms)
    for status in {answer.status for _, answer in delivered}:
        mine = Q(pk__in=[])
        for row, answer in delivered:
            if answer.status == status:
                mine |= Q(pk=row.id, attempts=row.attempts)
        Callback.objects.filter(mine, state="pending").update(
            state="delivered", last_status=status, last_error=None, next_at=None, finished_at=now_ms
        )
    return len(delivered)


def _settle(row: _Claimed, answer: _Answer, now_ms: int) -> None:
    """Write a failed try's outcome (`_settle_all` writes the deliveries), fenced by the
    try's number (a later claim of the same row has moved it on)."""
    mine = Callback.objects.filter(pk=row.id, state="pending", attempts=row.attempts)
    counters.incr(FAILURES, event=row.event)
    next_at = core.next_try_ms(row.attempts, now_ms=now_ms, give_up_at_ms=row.give_up_at)
    if next_at is None:
        mine.update(
            state="gave_up",
            last_status=answer.status,
            last_error=answer.error,
            next_at=None,
            finished_at=now_ms,
        )
        log_event(
            logger,
            "callback.gave_up",
            f"{row.event} callback for {row.job_id} given up after {row.attempts} "
            f"tries: {answer.error}",
            level=logging.ERROR,
            jobId=row.job_id,
            callbackEvent=row.event,
            attempts=row.attempts,
        )
        return
    mine.update(last_status=answer.status, last_error=answer.error, next_at=next_at)
    log_event(
        logger,
        "callback.failed",
        f"{row.event} callback for {row.job_id} failed (try {row.attempts}): {answer.error}",
        level=logging.WARNING,
        jobId=row.job_id,
        callbackEvent=row.event,
        attempts=row.attempts,
        nextAt=next_at,
    )
