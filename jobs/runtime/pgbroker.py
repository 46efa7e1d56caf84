"""django-q2's ORM broker, woken by PostgreSQL LISTEN/NOTIFY instead of a sleep (T-4).

Enqueue also issues `pg_notify('receipt_q', <queue>)` in the caller's transaction, so
the notification is delivered exactly when the task row commits. An idle pusher blocks
on its own listening connection for at most `poll` x 20 (a safety net for a missed
notification) instead of sleeping `poll` between queries: work starts in a few
milliseconds and an idle cluster stops hammering the database.
"""

from __future__ import annotations

import select
from typing import Any

from django.db import connections
from django_q.brokers.orm import ORM
from django_q.conf import Conf

CHANNEL = "receipt_q"
IDLE_WAIT_FACTOR = 20


class NotifyORM(ORM):
    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key)
        self._listener: Any = None

    def enqueue(self, task: Any) -> Any:
        task_id = super().enqueue(task)
        with connections[Conf.ORM].cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, self.list_key])
        return task_id

    def dequeue(self) -> Any:
        tasks = self._take()
        if tasks:
            return tasks
        self._wait(Conf.POLL * IDLE_WAIT_FACTOR)
        return None

    def _take(self) -> list[tuple[Any, Any]] | None:
        # ORM.dequeue without its trailing sleep: the sleep is replaced by _wait.
        from django.utils import timezone

        rows = self.get_connection().filter(key=self.list_key, lock__lt=timezone.now())[: Conf.BULK]
        taken = []
        for row in rows:
            if self.get_connection().filter(id=row.id, lock=row.lock).update(lock=self.timeout(row)):
                taken.append((row.pk, row.payload))
        return taken or None

    def _wait(self, timeout_s: float) -> None:
        try:
            listener = self._listening()
            if select.select([listener.fileno()], [], [], timeout_s)[0]:
                for _ in listener.notifies(timeout=0):
                    pass  # any notification is a reason to look again
        except Exception:  # a broken listener must never stop the pusher: fall back
            self._close_listener()
            import time

            time.sleep(Conf.POLL)

    def _listening(self) -> Any:
        if self._listener is None or self._listener.closed:
            import psycopg

            params = connections[Conf.ORM].get_connection_params()
            params.pop("cursor_factory", None)
            params.pop("context", None)
            self._listener = psycopg.connect(**params, autocommit=True)
            self._listener.execute(f"LISTEN {CHANNEL}")
        return self._listener

    def _close_listener(self) -> None:
        if self._listener is not None:
            try:
                self._listener.close()
            finally:
                self._listener = None
