"""S-3: a receipt's body, context and hints columns. On PostgreSQL they are `json` text,
not `jsonb`: an append writes them without parsing them into a tree, they hold the text as
written, and their keys are still read with `->>`."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.db.models.fields.json import KT

from receipts import store
from receipts.models import Receipt as ReceiptRow
from receipts.store import NewStream

pytestmark = pytest.mark.django_db

BODY = {"type": "t", "longer_key": 1, "a": [1.5, "ü"]}  # jsonb would reorder these keys
CONTEXT = {"organizationId": "org-1", "z": None}


def _stored(stream: str) -> tuple[str, str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT body, context, event_type FROM receipt_receipt WHERE stream = %s", [stream]
        )
        return cursor.fetchone()


@pytest.mark.parametrize("opened", ["append", "append_new_streams"])
def test_columns_hold_the_values_and_their_keys_are_readable(opened):
    stream = f"cols/{opened}"
    if opened == "append":
        store.append(stream, BODY, context=CONTEXT)
    else:
        store.append_new_streams([NewStream(stream, BODY, CONTEXT)])
    body, context, _ = _stored(stream)
    assert (json.loads(body), json.loads(context)) == (BODY, CONTEXT)
    row = ReceiptRow.objects.annotate(org=KT("context__organizationId")).get(stream=stream)
    assert (row.body, row.context, row.org) == (BODY, CONTEXT, "org-1")
    assert store.verify(stream).ok


@pytest.mark.postgres_only
def test_postgresql_keeps_the_text_as_written():
    store.append("cols/pg", BODY, context=CONTEXT)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_typeof(body)::text, pg_typeof(context)::text, pg_typeof(hints)::text, "
            "body FROM receipt_receipt WHERE stream = 'cols/pg'"
        )
        *kinds, body = cursor.fetchone()
    assert kinds == ["json", "json", "json"]
    assert list(json.loads(body)) == list(BODY)  # jsonb: ["a", "type", "longer_key"]
