"""`pipelined_transaction`: a transaction whose COMMIT travels with its last statements on
PostgreSQL (the worker's begin and settlement, T-3/T-4). It must keep every promise of
`transaction.atomic()`: all or nothing, a savepoint inside another transaction, on-commit
hooks after the commit, and a COMMIT the server refuses is an error with nothing kept.
Both backends."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from receipts import store
from receipts.db import pipelined_transaction
from receipts.models import Stream as StreamRow

pytestmark = pytest.mark.django_db(transaction=True)


def names() -> set[str]:
    return set(StreamRow.objects.filter(name__startswith="ptx/").values_list("name", flat=True))


def test_the_block_commits_and_hooks_run_after_the_commit():
    heard: list[set[str]] = []
    with pipelined_transaction():
        store.append("ptx/a", {"type": "ping"})
        transaction.on_commit(lambda: heard.append(names()))
        store.append("ptx/b", {"type": "ping"})
    assert names() == {"ptx/a", "ptx/b"}
    assert heard == [{"ptx/a", "ptx/b"}]  # the hook saw the committed rows
    assert not connection.in_atomic_block
    store.append("ptx/c", {"type": "ping"})  # the connection goes on as usual
    assert "ptx/c" in names()


def test_an_error_in_the_block_keeps_nothing():
    heard: list[str] = []
    with pytest.raises(RuntimeError), pipelined_transaction():
        store.append("ptx/a", {"type": "ping"})
        transaction.on_commit(lambda: heard.append("hook"))
        raise RuntimeError("the caller failed")
    assert names() == set() and heard == []


def test_inside_another_transaction_it_is_a_savepoint_of_it():
    with pytest.raises(RuntimeError), transaction.atomic():
        with pipelined_transaction():
            store.append("ptx/inner", {"type": "ping"})
        assert names() == {"ptx/inner"}
        raise RuntimeError("the outer transaction fails after the inner block")
    assert names() == set()  # the outer rollback took the inner block with it


def test_a_block_marked_for_rollback_is_not_committed():
    with pipelined_transaction():
        store.append("ptx/a", {"type": "ping"})
        transaction.set_rollback(True)
    assert names() == set()


@pytest.mark.postgres_only
def test_a_commit_the_server_refuses_raises_and_keeps_nothing():
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE ptx_deferred (id int, CONSTRAINT ptx_unique UNIQUE (id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
    try:
        with pytest.raises(DatabaseError), pipelined_transaction():
            store.append("ptx/a", {"type": "ping"})
            with connection.cursor() as cursor:  # checked only at COMMIT
                cursor.execute("INSERT INTO ptx_deferred VALUES (1), (1)")
        assert names() == set()
        assert not connection.in_atomic_block
        store.append("ptx/after", {"type": "ping"})
        assert names() == {"ptx/after"}
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE ptx_deferred")
