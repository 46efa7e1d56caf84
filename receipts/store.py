"""The append-only store: the only writer of receipt rows (S-3 to S-9), as one facade.

`from receipts import store; store.append(...)`: callers import this module and call
its verbs; the work lives beside it, one concept a module:
- `receipts.append`: the single append (`open_stream`, `append`), its reads and verify;
- `receipts.new_streams`: many new streams opened at once, set-based, writing exactly
  what the single append per stream would (`append_new_streams`, `send_new_streams`);
- `receipts.replay`: read models rebuilt from verified receipts (`rebuild`, `replay`);
- `receipts.retention`: streams removed with their tombstones (`remove_streams`).
Nothing updates a receipt row; only `remove_streams` deletes them.
"""

from __future__ import annotations

from receipts.append import (
    ANY,
    MAX_STREAM_NAME,
    VERIFY_PAGE,
    StreamHandle,
    StreamInfo,
    append,
    append_observers,
    check_stream_name,
    fold,
    iter_receipts,
    last_seq,
    list_streams,
    open_stream,
    read,
    read_global,
    rowless_streams,
    state_at,
    stream_info,
    stream_names,
    verify,
    verify_many,
)
from receipts.new_streams import (
    Joined,
    NewStream,
    append_new_streams,
    chunk_bounds,
    send_new_streams,
)
from receipts.replay import Drift, RebuildReport, matching_streams, rebuild, replay
from receipts.retention import remove_streams

__all__ = [
    "ANY",
    "MAX_STREAM_NAME",
    "VERIFY_PAGE",
    "Drift",
    "Joined",
    "NewStream",
    "RebuildReport",
    "StreamHandle",
    "StreamInfo",
    "append",
    "append_new_streams",
    "append_observers",
    "check_stream_name",
    "chunk_bounds",
    "fold",
    "iter_receipts",
    "last_seq",
    "list_streams",
    "matching_streams",
    "open_stream",
    "read",
    "read_global",
    "rebuild",
    "remove_streams",
    "replay",
    "rowless_streams",
    "send_new_streams",
    "state_at",
    "stream_info",
    "stream_names",
    "verify",
    "verify_many",
]
