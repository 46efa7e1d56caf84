"""What the store knows about each family of streams, by name prefix.

A family may have a reducer (fold for the admin, the API and time travel) and a
projector (read model updated inside the append transaction, S-5). Apps register
their families in `AppConfig.ready()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from receipts.core.chain import Receipt


class Statements(Protocol):
    """The append's own cursor: a projector's writes join the append's transaction."""

    def execute(self, sql: str, params: Sequence[Any]) -> None: ...


class Stream(Protocol):
    """A stream the store has locked for an append (`store.StreamHandle`), as its
    projector sees it: `cache` is shared by the services and the projector for the rest
    of the transaction, `read` holds the rows of the read the lock carried."""

    @property
    def name(self) -> str: ...

    @property
    def count(self) -> int: ...

    @property
    def cache(self) -> dict[str, Any]: ...

    @property
    def read(self) -> list[tuple[Any, ...]]: ...

    @property
    def writer(self) -> Statements: ...


class Projector(Protocol):
    """A read model kept in step with its streams.

    `apply` runs inside the append transaction with the receipts just written; an
    exception there rolls the append back. `snapshot`/`compute`/`write` let
    `store.rebuild` recompute a row from receipts and report drift (S-8).

    Two capabilities for opening many new streams at once (`store.append_new_streams`),
    each optional: `apply_many` (`ManyProjector`) and `insert_new` (`JoiningProjector`).
    """

    name: str

    def apply(self, handle: Stream, receipts: Sequence[Receipt]) -> None: ...

    def snapshot(self, stream: str) -> dict[str, Any] | None: ...

    def compute(self, stream: str, receipts: Sequence[Receipt]) -> dict[str, Any] | None: ...

    def write(self, stream: str, row: dict[str, Any] | None) -> None: ...


class ManyProjector(Projector, Protocol):
    """`apply` for many streams at once: what `apply` per stream would write."""

    def apply_many(self, batch: Sequence[tuple[Stream, Sequence[Receipt]]]) -> None: ...


class JoiningProjector(Projector, Protocol):
    """PostgreSQL: the read-model rows of streams the store is opening, as (an INSERT,
    its parameters: `receipts.db.text_rows`) that the store sends as part of the
    receipts' own statement, one round trip for all of it."""

    def insert_new(
        self, batch: Sequence[tuple[Stream, Sequence[Receipt]]]
    ) -> tuple[str, list[Any]]: ...


def many(projector: Projector) -> ManyProjector | None:
    """`projector` when it has `apply_many`."""
    has = getattr(projector, "apply_many", None) is not None
    return cast(ManyProjector, projector) if has else None


def joining(projector: Projector) -> JoiningProjector | None:
    """`projector` when it has `insert_new`."""
    has = getattr(projector, "insert_new", None) is not None
    return cast(JoiningProjector, projector) if has else None


@dataclass(frozen=True)
class StreamFamily:
    prefix: str
    label: str
    reducer: Callable[[Any, Receipt], Any] | None = None
    projector: Projector | None = None
    describe: Callable[[Any], Any] | None = None  # state -> JSON for display


_FAMILIES: dict[str, StreamFamily] = {}
# The families, longest prefix first: the first that matches is the longest match.
_LONGEST_FIRST: list[StreamFamily] = []


def register(family: StreamFamily) -> StreamFamily:
    _FAMILIES[family.prefix] = family
    _order()
    return family


def _order() -> None:
    _LONGEST_FIRST[:] = sorted(_FAMILIES.values(), key=lambda f: -len(f.prefix))


def family_for(stream: str) -> StreamFamily | None:
    """The family with the longest prefix matching `stream`."""
    for family in _LONGEST_FIRST:
        if stream.startswith(family.prefix):
            return family
    return None


def families() -> list[StreamFamily]:
    return sorted(_FAMILIES.values(), key=lambda f: f.prefix)


def describe_state(stream: str, state: Any) -> Any:
    family = family_for(stream)
    if family and family.describe:
        return family.describe(state)
    return state


def unregister(prefix: str) -> None:
    _FAMILIES.pop(prefix, None)
    _order()
