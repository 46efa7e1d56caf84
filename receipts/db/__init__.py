"""The one door to PostgreSQL: every use of psycopg in the project goes through here.

It owns how statements travel, not what they say: pipelining and the transaction whose
BEGIN and COMMIT ride with its statements (`pipeline`), a short transaction sent as one
statement (`one_statement`), prepared and deferred statements (`statements`), parameter
encoders (`params`, `text_array`, `json_text`), LISTEN/NOTIFY (`notify`), and the typed error of a refused assumption (`AssumptionRefused`). Every
workaround that reaches into psycopg's internals lives in this package, each with its
test. It holds no table's SQL: a statement lives in the module that owns its table
(docs/architecture.md, "How the hot path talks to PostgreSQL"). On SQLite each helper
falls back to Django's plain cursor.
"""

from __future__ import annotations

from receipts.db.notify import NOTIFY_CHANNEL
from receipts.db.one_statement import gathering, one_statement
from receipts.db.params import text_arrays, text_rows
from receipts.db.pipeline import (
    AssumptionRefused,
    in_pipeline,
    pipelined,
    pipelined_transaction,
    positions_deferred,
    refused_unless_found,
)
from receipts.db.statements import prepared, sent

__all__ = [
    "NOTIFY_CHANNEL",
    "AssumptionRefused",
    "gathering",
    "in_pipeline",
    "one_statement",
    "pipelined",
    "pipelined_transaction",
    "positions_deferred",
    "prepared",
    "refused_unless_found",
    "sent",
    "text_arrays",
    "text_rows",
]
