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
