"""Receipts, their hashes and chain verification (S-1, S-2, S-6, S-7).

A sealed receipt keeps the exact canonical text its hash covers (`sealed`); the store
writes it beside the jsonb columns, because PostgreSQL respells numbers in jsonb
(`1e16` becomes `10000000000000000`) and the hash of the respelled value differs.
Verification hashes that text, then checks that the receipt's fields (as the database
gave them back) still hold the values it seals.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from receipts.core.canonical import (
    CanonicalJSONError,
    JSONValue,
    canonical_json,
    same_json,
    sha256_hex,
)
from receipts.core.storable import first_unstorable

_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_HEX16 = re.compile("[0-9a-f]{16}")

S = TypeVar("S")


def base36(number: int) -> str:
    if number < 0:
        raise ValueError("base36 takes a non-negative integer")
    digits = []
    while True:
        number, rest = divmod(number, 36)
        digits.append(_BASE36[rest])
        if number == 0:
            return "".join(reversed(digits))


def receipt_id(ts_ms: int, random_hex16: str) -> str:
    """`<ts base36>-<16 hex chars>` (S-1); the caller supplies the randomness."""
    if _HEX16.fullmatch(random_hex16) is None:
        raise ValueError("receipt id needs exactly 16 lowercase hex chars")
    return f"{base36(ts_ms)}-{random_hex16}"


def _material(
    *, id: str, ts: int, stream: str, prev: str | None, body: JSONValue, context: JSONValue | None
) -> dict[str, Any]:
    material: dict[str, Any] = {"id": id, "ts": ts, "stream": stream, "prev": prev, "body": body}
    if context is not None:
        material["context"] = context
    return material


def text_hash(text: str) -> str:
    """sha256 hex of `text` as UTF-8 (a surrogate, which no sealed text holds, is hashed
    as is rather than raising, so it shows as a mismatch)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def receipt_hash(
    *,
    id: str,
    ts: int,
    stream: str,
    prev: str | None,
    body: JSONValue,
    context: JSONValue | None = None,
) -> str:
    """S-2: sha256 over {id, ts, stream, prev, body, context?}; hints are not hashed."""
    return sha256_hex(_material(id=id, ts=ts, stream=stream, prev=prev, body=body, context=context))


@dataclass(frozen=True, slots=True)
class Receipt:
    """One immutable event of a stream. `seq`/`stream_seq` are storage positions (not hashed)."""

    id: str
    ts: int
    stream: str
    prev: str | None
    body: dict[str, Any]
    hash: str
    context: dict[str, Any] | None = None
    hints: dict[str, Any] | None = None
    seq: int | None = None
    stream_seq: int | None = None
    # The canonical text the hash covers; None for rows stored before it was kept.
    sealed: str | None = field(default=None, repr=False, compare=False)

    @property
    def type(self) -> str:
        return str(self.body["type"])

    def at(self, seq: int | None, stream_seq: int | None) -> Receipt:
        """This receipt at these storage positions (`dataclasses.replace` without its
        walk over the fields: on every append's path)."""
        return Receipt(
            self.id,
            self.ts,
            self.stream,
            self.prev,
            self.body,
            self.hash,
            self.context,
            self.hints,
            seq,
            stream_seq,
            self.sealed,
        )

    def expected_hash(self) -> str:
        """The hash of the sealed text, or recomputed from the fields when there is none."""
        if self.sealed is not None:
            return text_hash(self.sealed)
        return sha256_hex(self._hashed_fields())

    def _hashed_fields(self) -> dict[str, Any]:
        """The fields the hash covers (S-2)."""
        return _material(
            id=self.id,
            ts=self.ts,
            stream=self.stream,
            prev=self.prev,
            body=self.body,
            context=self.context,
        )

    def unsealed_field(self) -> str | None:
        """The first field whose value is not the one the sealed text holds, or None."""
        if self.sealed is None:
            return None
        try:
            material = json.loads(self.sealed)
        except ValueError:
            return "sealed"
        if not isinstance(material, dict):
            return "sealed"
        mine = self._hashed_fields()
        if material.keys() != mine.keys():
            return "context" if "context" in material.keys() ^ mine.keys() else "sealed"
        for name in ("id", "ts", "stream", "prev", "body", "context"):
            if name in mine and not same_json(material[name], mine[name]):
                return name
        return None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "id": self.id,
            "ts": self.ts,
            "stream": self.stream,
            "prev": self.prev,
            "body": self.body,
            "hash": self.hash,
        }
        if self.context is not None:
            wire["context"] = self.context
        if self.hints is not None:
            wire["hints"] = self.hints
        if self.seq is not None:
            wire["seq"] = self.seq
        if self.stream_seq is not None:
            wire["streamSeq"] = self.stream_seq
        return wire


def seal(
    *,
    stream: str,
    prev: str | None,
    body: dict[str, Any],
    ts: int,
    random_hex16: str,
    context: dict[str, Any] | None = None,
    hints: dict[str, Any] | None = None,
    stream_seq: int | None = None,
) -> Receipt:
    """Build the next receipt of `stream` after head `prev` (at `stream_seq` when known)."""
    if not isinstance(body, dict) or not isinstance(body.get("type"), str) or not body["type"]:
        raise ValueError("a receipt body is a JSON object with a non-empty string 'type'")
    if context is not None and not isinstance(context, dict):
        raise ValueError("a receipt context is a JSON object")
    rid = receipt_id(ts, random_hex16)
    material = _material(id=rid, ts=ts, stream=stream, prev=prev, body=body, context=context)
    text = canonical_json(material)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the text has no UTF-8 bytes to hash
        found = first_unstorable(material)
        raise CanonicalJSONError(*(found or ("$", "text that is not UTF-8"))) from None
    digest = hashlib.sha256(data).hexdigest()
    return Receipt(
        id=rid,
        ts=ts,
        stream=stream,
        prev=prev,
        body=body,
        hash=digest,
        context=context,
        hints=hints,
        stream_seq=stream_seq,
        sealed=text,
    )


def unseal(sealed: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(body, context) exactly as sealed, from a receipt's sealed text."""
    material = json.loads(sealed)
    return material["body"], material.get("context")


def as_sealed(receipt: Receipt) -> Receipt:
    """`receipt` with body and context decoded from its sealed text (itself without one)."""
    if receipt.sealed is None:
        return receipt
    body, context = unseal(receipt.sealed)
    return replace(receipt, body=body, context=context)


@dataclass(frozen=True, slots=True)
class Verification:
    """Result of verifying one stream: ok with count and head, or where it breaks.

    `index` is the position of the receipt to blame, or None when the fault is the
    stream's as a whole (its chain disagrees with its stream row: `check_against_head`)."""

    stream: str
    ok: bool
    count: int
    head: str | None
    index: int | None = None
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    last_ts: int | None = None  # the newest receipt's ts, for the stream row's last_ts

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "stream": self.stream,
            "ok": self.ok,
            "count": self.count,
            "head": self.head,
        }
        if not self.ok:
            wire.update(index=self.index, reason=self.reason)
        return wire

    def describe(self) -> str:
        if self.ok:
            return f"ok: {self.count} receipts, head {self.head}"
        if self.index is None:
            return str(self.reason)
        return f"{self.reason} at index {self.index}"


def fault(receipt: Receipt, prev: str | None) -> tuple[str, dict[str, Any]] | None:
    """Why `receipt` does not follow head `prev` (S-6), or None when it does.

    `hash mismatch` covers both a sealed text that does not hash to the stored hash and
    a field whose stored value is not the sealed one (an edited JSON column)."""
    if receipt.prev != prev:
        return "broken prev", {"expected": prev, "found": receipt.prev}
    if receipt.expected_hash() != receipt.hash:
        return "hash mismatch", {"stored": receipt.hash}
    differs = receipt.unsealed_field()
    if differs is not None:
        return "hash mismatch", {"stored": receipt.hash, "field": differs}
    return None


def _sealed_stream(receipt: Receipt) -> str:
    """The stream `receipt` was sealed for (its stored column when it has no sealed text,
    or one that cannot be read: a hash mismatch then tells the rest)."""
    try:
        material = json.loads(receipt.sealed) if receipt.sealed is not None else None
    except ValueError:
        return receipt.stream
    found = material.get("stream") if isinstance(material, dict) else None
    return found if isinstance(found, str) else receipt.stream


def _gap(receipt: Receipt, position: int) -> tuple[str, dict[str, Any]] | None:
    """Why `receipt` is not stored at `position` (1-based), or None when it is (or has no
    position: receipts built in memory)."""
    stored = receipt.stream_seq
    if stored is None or stored == position:
        return None
    if stored < position:
        return f"out of sequence: stored as #{stored} where #{position} belongs", {}
    if stored == position + 1:
        return f"missing receipt: #{position} is not stored", {}
    return f"missing receipts: #{position} to #{stored - 1} are not stored", {}


class ChainWalk:
    """S-6's walk over one stream's receipts in stream order, fed in parts (the store feeds
    pages, then whatever its stream row counts beyond them). The first fault stands.

    At a receipt that does not link, the walk names what it can: a receipt sealed for
    another stream is `moved`; a receipt further on that does link here means the
    receipts are `reordered` (it reads on to find it, only on that path)."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.count = 0
        self.head: str | None = None
        self.last_ts: int | None = None
        self.broken: Verification | None = None

    def feed(self, receipts: Iterable[Receipt]) -> None:
        if self.broken is not None:
            return
        rest = iter(receipts)
        for receipt in rest:
            found = _gap(receipt, self.count + 1) or fault(receipt, self.head)
            if found is not None:
                reason, details = self._named(receipt, found, rest)
                self.broken = Verification(
                    self.stream,
                    False,
                    self.count,
                    self.head,
                    self.count,
                    reason,
                    details,
                    self.last_ts,
                )
                return
            self.head = receipt.hash
            self.last_ts = receipt.ts
            self.count += 1

    def result(self) -> Verification:
        if self.broken is not None:
            return self.broken
        return Verification(self.stream, True, self.count, self.head, last_ts=self.last_ts)

    def _named(
        self, receipt: Receipt, found: tuple[str, dict[str, Any]], rest: Iterator[Receipt]
    ) -> tuple[str, dict[str, Any]]:
        position = self.count + 1
        sealed_for = _sealed_stream(receipt)
        if sealed_for != self.stream:
            return f"moved: receipt #{position} was sealed for stream {sealed_for!r}", {}
        if found[0] != "broken prev":
            return found
        for offset, later in enumerate(rest, start=1):
            if later.prev == self.head:  # the receipt that belongs here is stored further on
                if offset == 1 and receipt.prev == later.hash:
                    return (
                        f"reordered: receipts #{position} and #{position + 1} are stored "
                        "in each other's place",
                        {},
                    )
                after = f"#{self.count}" if self.count else "the start"
                return (
                    f"reordered: the receipt that follows {after} is stored as "
                    f"#{position + offset}",
                    {},
                )
        return found


def verify(stream: str, receipts: Iterable[Receipt]) -> Verification:
    """Walk the chain in order; report the first index whose position, prev or hash is
    wrong (S-6)."""
    walk = ChainWalk(stream)
    walk.feed(receipts)
    return walk.result()


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """What a stream row says its chain is: the head hash, how many receipts, and the
    newest receipt's timestamp."""

    head: str | None
    count: int
    last_ts: int | None


def check_against_head(chain: Verification, row: StreamRecord | None) -> Verification:
    """`chain`, a walk of the receipts stored for a stream, held against its stream row
    (None: there is none). A chain that breaks on its own keeps its fault. Otherwise a
    chain shorter than its row was truncated or emptied, a longer one has receipts the
    row never counted, and at the same length the head and the newest timestamp must be
    the row's. A fault found here is the stream's as a whole (`index` None).

    Only the caller knows whether the row and the receipts were read consistently: the
    store reads the row after the receipts and then reads up to the row's count."""
    if not chain.ok:
        return chain
    reason: str | None = None
    if row is None:
        if chain.count:
            reason = f"stream row missing: {chain.count} receipt(s) stored without it"
    elif row.count == 0 and chain.count == 0:
        reason = "empty stream row: it counts no receipts, and the store never keeps one"
    elif chain.count == 0:
        reason = f"emptied: the stream row counts {row.count} receipt(s) but none are stored"
    elif chain.count < row.count:
        reason = (
            f"truncated: the chain ends after {chain.count} receipt(s) but the stream row "
            f"counts {row.count} (the newest {row.count - chain.count} missing)"
        )
    elif chain.count > row.count:
        reason = (
            f"receipts past the stream row: {chain.count} stored but the stream row "
            f"counts {row.count}"
        )
    elif chain.head != row.head:
        reason = (
            f"head mismatch: the chain ends at {chain.head} but the stream row's head is {row.head}"
        )
    elif chain.last_ts != row.last_ts:
        reason = (
            f"last timestamp mismatch: the newest receipt has ts {chain.last_ts} but the "
            f"stream row says {row.last_ts}"
        )
    if reason is None:
        return chain
    return replace(chain, ok=False, index=None, reason=reason, details={})


def fold(
    receipts: Iterable[Receipt],
    reducer: Callable[[S | None, Receipt], S | None],
    initial: S | None = None,
) -> S | None:
    """Fold `receipts` with `reducer`, starting from `initial` (S-7)."""
    state = initial
    for receipt in receipts:
        state = reducer(state, receipt)
    return state


def state_at(receipts: Sequence[Receipt], n: int, reducer: Callable[[Any, Receipt], Any]) -> Any:
    """State after the first `n` receipts (time travel); n is clamped to 0..len."""
    n = max(0, min(n, len(receipts)))
    return fold(receipts[:n], reducer)
