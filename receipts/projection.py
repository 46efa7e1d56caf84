"""One read-model row per stream, the fold of its receipts (S-5, S-8): the projector the
read models share, so each family states only what differs (its model, fold and row).

In the append transaction it folds the new receipts onto the state as of the stream
head, kept on `handle.cache` so that several appends in one transaction read the row
once, and writes the row (through the ORM unless a hot family overrides `project`).
`snapshot`/`compute`/`write` let `store.rebuild` recompute the row and report drift."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db.models import Model

from receipts import registry
from receipts.core import chain
from receipts.core.chain import Receipt

S = TypeVar("S")


@dataclass(eq=False)  # compared and hashed by identity, as StreamFamily holds it
class RowProjector(Generic[S]):
    name: str
    model: type[Model]  # one row per stream, its primary key the id in the stream name
    cache_key: str  # the store's StreamHandle.cache slot: the state as of the stream head
    noun: str  # what the stream names, for refusing a stray name ("a job")
    id_from_stream: Callable[[str], str | None]
    reduce: Callable[[S | None, Receipt], S | None]
    row_for: Callable[[S], dict[str, Any]]  # every column of the row, from the fold alone
    load_state: Callable[[str], S | None]  # the state the row holds

    def id_of(self, stream: str) -> str:
        found = self.id_from_stream(stream)
        if found is None:
            raise ValueError(f"stream {stream!r} does not name {self.noun}")
        return found

    def apply(self, handle: registry.Stream, receipts: Sequence[Receipt]) -> None:
        key = self.id_of(handle.name)
        if self.cache_key in handle.cache:
            before = handle.cache[self.cache_key]
        else:  # only a stream with receipts before these has a row
            before = self.load_state(key) if handle.count > len(receipts) else None
        after = chain.fold(receipts, self.reduce, before)
        handle.cache[self.cache_key] = after
        if after is not None:  # (J-3: a late failure of a job that never existed: no row)
            self.project(handle, key, before, after)

    def project(self, handle: registry.Stream, key: str, before: S | None, after: S) -> None:
        """Write the row of `after`: a new one when there was no state `before`."""
        row = self.row_for(after)
        if before is None:
            self.model._default_manager.create(**row)
        else:
            self.model._default_manager.filter(pk=key).update(**_columns(row))

    def snapshot(self, stream: str) -> dict[str, Any] | None:
        fields = [f.name for f in self.model._meta.get_fields()]
        row = self.model._default_manager.filter(pk=self.id_of(stream)).values(*fields).first()
        return dict(row) if row else None

    def compute(self, stream: str, receipts: Sequence[Receipt]) -> dict[str, Any] | None:
        state = chain.fold(receipts, self.reduce)
        return self.row_for(state) if state is not None else None

    def write(self, stream: str, row: dict[str, Any] | None) -> None:
        key = self.id_of(stream)
        if row is None:
            self.model._default_manager.filter(pk=key).delete()
        else:
            self.model._default_manager.update_or_create(pk=key, defaults=_columns(row))

    def register(self, prefix: str, label: str, to_wire: Callable[[S], Any]) -> None:
        """Register the family of streams under `prefix`: this fold, this row."""

        def describe(state: S | None) -> Any:
            return to_wire(state) if state is not None else None

        registry.register(registry.StreamFamily(prefix, label, self.reduce, self, describe))


def stored_state(model: type[Model], from_wire: Callable[[Any], S]) -> Callable[[str], S | None]:
    """A `load_state` reading the fold's wire form from the row's `state` column."""

    def load_state(key: str) -> S | None:
        wire = model._default_manager.filter(pk=key).values_list("state", flat=True).first()
        return from_wire(wire) if wire is not None else None

    return load_state


def _columns(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "id"}
