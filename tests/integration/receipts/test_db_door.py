"""receipts.db, the one door to PostgreSQL: its LISTEN helper hears a commit's
notification and is woken without a statement, and a refused assumption comes out of a
pipelined transaction as `AssumptionRefused`, with nothing of the transaction kept."""

from __future__ import annotations

import pytest
from django.db import DataError, connection

from receipts import store
from receipts.db import (
    AssumptionRefused,
    notify,
    pipelined_transaction,
    prepared,
    refused_unless_found,
)
from receipts.models import Stream as StreamRow

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]


def test_listen_and_wait_hear_a_notification_without_a_statement():
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    pg = notify.connect(params)
    heard: list[str] = []
    try:
        notify.listen(pg, ["receipt_test.door-1"], lambda note: heard.append(note.payload))
        assert notify.wait(pg, 0.05) is False
        prepared("SELECT pg_notify('receipt_test.door-1', 'hello')", [])
        assert notify.wait(pg, 5.0) is True
        assert heard == []  # read off the socket, not handed to the handler
        pg.execute("SELECT pg_notify('receipt_test.door-1', 'during')")
        assert heard == ["during"]  # psycopg hands what it reads during a statement
    finally:
        pg.close()


def test_a_refused_assumption_is_a_typed_error_and_nothing_is_kept():
    store.append("door/a", {"type": "ping"})
    with pytest.raises(AssumptionRefused) as refused, pipelined_transaction():
        store.append("door/b", {"type": "ping"})
        held = refused_unless_found("SELECT 1 FROM receipt_stream WHERE name = %s")
        prepared(held, ["door/missing"], wait=False)
    assert isinstance(refused.value, DataError)  # callers that caught DataError still do
    assert not StreamRow.objects.filter(name="door/b").exists()


def test_another_data_error_is_not_a_refusal():
    with pytest.raises(DataError) as error, pipelined_transaction():
        prepared("SELECT 1 / 0 + %s::int", ["x"], wait=False)
    assert not isinstance(error.value, AssumptionRefused)


def test_a_long_statement_is_converted_once_and_runs_right(monkeypatch):
    """psycopg splits a statement's text into `$n` placeholders and remembers only short
    ones (<= 50 parameters); the door remembers every hot-path statement. A statement of
    120 parameters, run three times with other values, is split once."""
    from psycopg import _queries

    from receipts.db import converted

    split: list[bytes] = []
    original = _queries._query2pg_nocache

    def counted(query: bytes, encoding: str):
        split.append(query)
        return original(query, encoding)

    monkeypatch.setattr(converted, "_query2pg_nocache", counted)
    converted._converted.cache_clear()
    sql = "SELECT " + " + ".join(["%s::int"] * 120)
    for base in (0, 1, 2):
        rows, _ = prepared(sql, [base + i for i in range(120)])
        assert rows == [(sum(range(120)) + 120 * base,)]
    assert split == [sql.encode()]
    with connection.cursor() as django_cursor:  # Django's own cursors are psycopg's
        django_cursor.execute(sql, [1] * 120)
        assert django_cursor.fetchone() == (120,)
    assert len(split) == 1
