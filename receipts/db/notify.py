"""LISTEN/NOTIFY (PostgreSQL): the channel every append notifies, and the one way a
process listens: `listen` on a connection (LISTEN per channel, quoted, and a handler for
what psycopg reads during statements), `wait` for a wake-up on it without a statement,
and `listening` for the async live listener. Notifications only wake; readers then read
the database, so a lost one costs latency, never data.

The psycopg internal it relies on: `pgconn.consume_input()` and `pgconn.notifies()`
read what arrived off the socket without running a statement (and without calling the
handlers, which `wait`'s caller does not need: it reads what the wake-up announced).
tests/integration/receipts/test_db_door.py covers it.
"""

from __future__ import annotations

import select
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

NOTIFY_CHANNEL = "receipt"  # every receipt: "<seq> <stream> <type>" (the append's statement)


def listen_sql(channels: Iterable[str]) -> str:
    """LISTEN on each channel, quoted (a channel may hold dots and dashes)."""
    return "; ".join(f'LISTEN "{channel}"' for channel in channels)


def connect(params: dict[str, Any]) -> Any:
    """A connection of its own, in autocommit: a listener's (Django's connection params)."""
    import psycopg

    return psycopg.connect(**params, autocommit=True)


def listen(pg: Any, channels: Iterable[str], on_notify: Callable[[Any], None]) -> None:
    """LISTEN on `channels` over the psycopg connection `pg` (in autocommit);
    `on_notify` hears each notification psycopg reads during a statement."""
    pg.add_notify_handler(on_notify)
    pg.execute(listen_sql(channels))


def wait(pg: Any, timeout_s: float) -> bool:
    """Until something arrives on `pg`'s socket or `timeout_s` passes: whether it did.
    Notifications that arrived are read off the socket here (their handlers are not
    called: the caller reads what they announce next). A broken connection raises."""
    if not select.select([pg.fileno()], [], [], timeout_s)[0]:
        return False
    pg.pgconn.consume_input()
    while pg.pgconn.notifies() is not None:
        pass
    return True


@asynccontextmanager
async def listening(channels: Iterable[str], **params: Any) -> AsyncIterator[AsyncIterator[Any]]:
    """An async connection of its own listening on `channels`: its notifications (each
    with `channel` and `payload`) until the connection fails or the block ends."""
    import psycopg

    conn = await psycopg.AsyncConnection.connect(**params)
    async with conn:
        await conn.execute(listen_sql(channels))
        yield conn.notifies()
