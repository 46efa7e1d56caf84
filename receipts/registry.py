"""What the store knows about each family of streams, by name prefix.

A family may have a reducer (fold for the admin, the API and time travel) and a
projector (read model updated inside the append transaction, S-5). Apps register
their families in `AppConfig.ready()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from receipts.core.chain import Receipt

if TYPE_CHECKING:
    from receipts.store import StreamHandle


class Projector(Protocol):
    """A read model kept in step with its streams.

    `apply` runs inside the append transaction with the receipts just written; an
    exception there rolls the append back. `snapshot`/`compute`/`write` let
    `store.rebuild` recompute a row from receipts and report drift (S-8).
    """

    name: str

    def apply(self, handle: StreamHandle, receipts: Sequence[Receipt]) -> None: ...

    def snapshot(self, stream: str) -> dict[str, Any] | None: ...

    def compute(self, stream: str, receipts: Sequence[Receipt]) -> dict[str, Any] | None: ...

    def write(self, stream: str, row: dict[str, Any] | None) -> None: ...


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
