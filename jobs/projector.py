"""The jobs read-model projector (J-5, S-5): folds new receipts of `jobs/<id>` onto the
job row inside the append transaction. Nothing else writes `jobs_job`.

It is also where a settlement is seen whoever wrote it, so it records the D-8 callback
of every settlement in the same transaction (`jobs.callbacks.record`), and where a capped
job that stops running frees its slot (`jobs.limits.released`). A rebuild
(`compute`/`write`) records nothing: replaying history posts no callback again."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import connection

from jobs import callbacks, limits
from jobs.core.callbacks import settlement_event
from jobs.core.contracts import routed_group
from jobs.core.reducer import fold_job, reduce
from jobs.core.state import JobState
from jobs.core.vocabulary import JOB_STREAM_PREFIX, job_id_from_stream
from jobs.core.wire import job_from_wire, job_to_wire
from jobs.models import Job
from receipts import wire_json
from receipts.core.chain import Receipt
from receipts.db import prepared, text_rows
from receipts.projection import RowProjector
from receipts.registry import Stream as StreamHandle

CACHE_KEY = "job"  # StreamHandle.cache slot: the job's state as of the stream head


def row_for(state: JobState) -> dict[str, Any]:
    """Every column of the job row, derived from the fold alone."""
    return {
        "id": state.job_id,
        "agent_id": state.agent_id,
        "lane": state.lane,
        "kind": state.kind,
        "status": state.status,
        "session_key": state.session_key,
        "organization_id": state.organization_id,
        "objective_id": state.objective_id,
        "worker_group": routed_group(state.agent_id, state.kind, state.queue),
        "limit_key": state.limit_key,
        "attempt": state.attempt,
        "lease_until": state.lease_until,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "state": job_to_wire(state, share=True),  # written as JSON text at once
    }


_LOAD = f"SELECT state FROM {Job._meta.db_table} WHERE id = %s"


def load_state(job_id: str) -> JobState | None:
    rows, _ = prepared(_LOAD, [job_id])  # read on every job write: no ORM on the hot path
    return state_from_rows(rows)


def state_read(job_id: str) -> tuple[str, list[Any]]:
    """The statement `load_state` runs, for `open_stream(read=...)`: the job's state read
    under the stream lock in the same round trip."""
    return _LOAD, [job_id]


def state_from_rows(rows: Sequence[tuple[Any, ...]]) -> JobState | None:
    if not rows:
        return None
    wire = json.loads(rows[0][0]) if isinstance(rows[0][0], str | bytes) else rows[0][0]
    return job_from_wire(wire)


class JobProjector(RowProjector[JobState]):
    """The hot path of every job write: the state read by a prepared statement, the row
    written by one (new jobs' rows a chunk per statement), no ORM; and the D-8 callback
    of each settlement, recorded as the projector sees it."""

    def project(
        self, handle: StreamHandle, key: str, before: JobState | None, after: JobState
    ) -> None:
        event = settlement_event(before, after)
        if event is not None:  # D-8: every settlement, whoever wrote it, with its receipt
            callbacks.record([(event, after, after.updated_at)], execute=handle.writer.execute)
        row = row_for(after)
        if before is None:
            _insert([row])
        else:
            keys = tuple(k for k in row if k != "id")
            handle.writer.execute(_update_sql(connection.vendor, keys), [*_values(row, keys), key])
            if before.limit_key is not None and _stopped_running(before, after):
                limits.released(before.limit_key, now_ms=after.updated_at)  # wake one held

    def apply_many(self, batch: Sequence[tuple[StreamHandle, Sequence[Receipt]]]) -> None:
        """`apply` for many streams at once (`store.append_new_streams`): the rows of new
        jobs are inserted a chunk per statement (pipelined on PostgreSQL when the store
        pipelines: the server inserts one chunk while the next is folded); any other
        stream goes through `apply`."""
        rows: list[dict[str, Any]] = []
        for handle, receipts in batch:
            if handle.count > len(receipts) or handle.cache.get(CACHE_KEY) is not None:
                self.apply(handle, receipts)  # not a new job stream
                continue
            after = fold_job(receipts)
            handle.cache[CACHE_KEY] = after
            if after is not None:
                rows.append(row_for(after))
            if len(rows) == _CHUNK:
                _insert(rows)
                rows = []
        if rows:
            _insert(rows)

    def insert_new(
        self, batch: Sequence[tuple[StreamHandle, Sequence[Receipt]]]
    ) -> tuple[str, list[Any]]:
        """PostgreSQL, streams the store is opening: each new job folded (and kept on its
        handle), and their rows as (INSERT, its parameters: a text array per column), which
        the store sends in the receipts' own statement (`store.append_new_streams`)."""
        rows: list[dict[str, Any]] = []
        for handle, receipts in batch:
            after = fold_job(receipts)
            handle.cache[CACHE_KEY] = after
            if after is not None:
                rows.append(row_for(after))
        keys = tuple(rows[0]) if rows else ("id",)  # no job (J-3): inserts nothing
        source, params = _text_columns(rows, keys)
        return _insert_sql("postgresql", keys, source), params


def _stopped_running(before: JobState, after: JobState) -> bool:
    return before.status in limits.RUNNING and (
        after.status not in limits.RUNNING or after.attempt != before.attempt
    )


_CHUNK = 250  # new rows per INSERT (14 variables each on SQLite, under its 32766)


@cache
def _insert_sql(vendor: str, keys: tuple[str, ...], source: str = "") -> str:
    """The INSERT of new job rows with `keys`: on PostgreSQL from the row `source` of
    `_text_columns`, cast where the column is not text; on SQLite multi-row VALUES
    (`{rows}`)."""
    fields = [Job._meta.get_field(key) for key in keys]
    assert all(f.column == f.name for f in fields)  # the row keys are the columns
    columns = ", ".join(f.column for f in fields)
    if vendor != "postgresql":
        return f"INSERT INTO {Job._meta.db_table} ({columns}) VALUES {{rows}}"
    # No cast to a character column: an explicit cast to varchar(n) would cut a long
    # value where the INSERT's own assignment refuses it.
    values = ", ".join(
        f.column
        if f.get_internal_type() in ("CharField", "TextField")
        else f"{f.column}::{f.db_type(connection)}"
        for f in fields
    )
    return (
        f"INSERT INTO {Job._meta.db_table} ({columns}) SELECT {values} "
        f"FROM {source} AS u({columns})"
    )


def _text_columns(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> tuple[str, list[Any]]:
    """The row source of `_insert_sql` on PostgreSQL for `rows`, and its parameters."""
    json = [position for position, key in enumerate(keys) if key in _JSON_KEYS]
    return text_rows([tuple(row.values()) for row in rows], len(keys), json=json)


def _insert(rows: list[dict[str, Any]]) -> None:
    """Insert new job rows with one statement: what `Job.objects.create(**row)` per row
    writes (JSON columns as Django's JSONField dumps them). Waits for no result."""
    keys = tuple(rows[0])
    if connection.vendor == "postgresql":
        source, params = _text_columns(rows, keys)
        prepared(_insert_sql(connection.vendor, keys, source), params, wait=False)
        return
    sql = _insert_sql(connection.vendor, keys)
    values = [value for row in rows for value in _values(row, keys)]
    one = f"({', '.join(['%s'] * len(keys))})"
    with connection.cursor() as cursor:
        cursor.execute(sql.format(rows=", ".join([one] * len(rows))), values)


_JSON_KEYS = frozenset(
    f.name for f in Job._meta.get_fields() if f.get_internal_type() == "JSONField"
)


def _values(row: dict[str, Any], keys: Sequence[str]) -> list[Any]:
    """Column values, JSON columns as JSON text (any valid text of the value: Django's
    JSONField reads it back the same)."""
    return [wire_json.dumps(row[k]) if k in _JSON_KEYS else row[k] for k in keys]


@cache
def _update_sql(vendor: str, keys: tuple[str, ...]) -> str:
    def cast(key: str) -> str:
        if vendor != "postgresql" or key not in _JSON_KEYS:
            return ""
        return f"::{Job._meta.get_field(key).db_type(connection)}"  # json or jsonb

    sets = ", ".join(f"{k} = %s{cast(k)}" for k in keys)
    return f"UPDATE {Job._meta.db_table} SET {sets} WHERE id = %s"


PROJECTOR = JobProjector(
    name="jobs",
    model=Job,
    cache_key=CACHE_KEY,
    noun="a job",
    id_from_stream=job_id_from_stream,
    reduce=reduce,
    row_for=row_for,
    load_state=load_state,
)


def register() -> None:
    PROJECTOR.register(JOB_STREAM_PREFIX, "job", job_to_wire)
