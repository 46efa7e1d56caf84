"""A transaction sent as ONE statement (PostgreSQL): the writes of a block gathered and
run at its end as data-modifying CTEs of a single statement, in autocommit, where it is
its own transaction. No BEGIN, no COMMIT, no pipeline: one execute on the client, one
statement for the server to run, one round trip.

For the hot path's short transactions whose every write is already decided when it is
sent (an attempt's begin and settlement): a caller's block calls the owners' usual
functions, and they, seeing `gathering()`, hand their statements here instead of running
them. Two kinds:

- `require(sql, params)`: an UPDATE ... RETURNING that must touch a row (a claim, a
  stream still at the head the caller assumed). They run first, in order, each one only
  if the ones before it touched their rows; one that touches none fails the statement
  (a division by zero) and it comes out as `AssumptionRefused`, nothing of it kept.
- `write(sql, params, name=None)`: an INSERT or UPDATE (no WITH of its own) that runs
  once every requirement held. `name`: a CTE later statements may read (`notify`).

`after(fn)`: what `transaction.on_commit` would run, run once the statement committed.
Within a statement every CTE sees the same snapshot: gather only writes that do not read
each other's rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DataError, connections

from receipts.db.pipeline import _REFUSED_SQLSTATE, AssumptionRefused


@dataclass
class OneStatement:
    requires: list[tuple[str, Sequence[Any]]] = field(default_factory=list)
    writes: list[tuple[str | None, str, Sequence[Any]]] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)  # CTEs the result must read to run
    hooks: list[Callable[[], None]] = field(default_factory=list)

    def require(self, sql: str, params: Sequence[Any]) -> None:
        self.requires.append((sql, params))

    def write(self, sql: str, params: Sequence[Any], *, name: str | None = None) -> None:
        self.writes.append((name, sql, params))

    def fresh(self, name: str) -> str:
        """`name`, or `name_<n>` when a CTE has it already: two appends (two streams) may
        gather into one statement."""
        taken = {n for n, _, _ in self.writes}
        if name not in taken:
            return name
        return next(f"{name}_{k}" for k in range(2, len(taken) + 2) if f"{name}_{k}" not in taken)

    def read(self, name: str) -> None:
        """A CTE with no write of its own (a SELECT, as `pg_notify`'s) runs only when the
        statement reads it: counted in the result."""
        self.reads.append(name)

    def after(self, hook: Callable[[], None]) -> None:
        self.hooks.append(hook)

    def statement(self) -> tuple[str, list[Any]]:
        """The gathered writes as one statement and its parameters."""
        ctes: list[str] = []
        params: list[Any] = []
        held = ""
        for k, (sql, args) in enumerate(self.requires):
            guard = f" AND EXISTS (SELECT FROM q{k - 1})" if k else ""
            ctes.append(f"q{k} AS ({_guarded(sql, guard)})")
            params += args
            held = f"q{k}"
        for k, (name, sql, args) in enumerate(self.writes):
            ctes.append(f"{name or f'w{k}'} AS ({sql})")
            params += args
        checks = [f"(SELECT 1 / count(*) FROM {held})"] if held else []
        checks += [f"(SELECT count(*) FROM {name})" for name in self.reads]
        return f"WITH {', '.join(ctes)} SELECT {', '.join(checks) or '1'}", params


def _guarded(sql: str, guard: str) -> str:
    """`sql` (an UPDATE ... RETURNING whose WHERE is a conjunction, as every requirement's
    is) touching rows only when `guard` holds."""
    if not guard:
        return sql
    where, returning = sql.rsplit(" RETURNING ", 1)
    return f"{where}{guard} RETURNING {returning}"


_GATHERING: ContextVar[OneStatement | None] = ContextVar("receipt_one_statement", default=None)


def gathering() -> OneStatement | None:
    """The block's gathered statement, inside `one_statement()`; else None."""
    return _GATHERING.get()


def available() -> bool:
    """Whether a block may be one statement here: PostgreSQL, outside any transaction."""
    db = connections[DEFAULT_DB_ALIAS]  # one lookup of the thread's connection
    return db.vendor == "postgresql" and not db.in_atomic_block


@contextmanager
def one_statement() -> Iterator[OneStatement]:
    """Gather the block's writes and run them as one statement when it ends normally (see
    the module's docstring); a block that raises sends nothing. Only where `available()`."""
    assert gathering() is None
    gathered = OneStatement()
    token = _GATHERING.set(gathered)
    try:
        yield gathered
    finally:
        _GATHERING.reset(token)
    if gathered.requires or gathered.writes:
        _run(*gathered.statement())
    for hook in gathered.hooks:
        hook()


def _run(sql: str, params: Sequence[Any]) -> None:
    from receipts.db.converted import Cursor

    db = connections[DEFAULT_DB_ALIAS]
    assert db.vendor == "postgresql" and not db.in_atomic_block
    db.close_if_health_check_failed()
    db.ensure_connection()
    try:
        with db.wrap_database_errors, Cursor(db.connection) as cursor:
            cursor.execute(sql, params, prepare=True)
    except DataError as error:
        if getattr(error.__cause__, "sqlstate", None) == _REFUSED_SQLSTATE:
            raise AssumptionRefused(str(error)) from error
        raise
