"""Receipts, their hashes and chain verification (S-1, S-2, S-6, S-7)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from receipts.core.canonical import JSONValue, sha256_hex

_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


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
    if len(random_hex16) != 16 or any(c not in "0123456789abcdef" for c in random_hex16):
        raise ValueError("receipt id needs exactly 16 lowercase hex chars")
    return f"{base36(ts_ms)}-{random_hex16}"


def receipt_hash(
    *, id: str, ts: int, stream: str, prev: str | None, body: JSONValue,
    context: JSONValue | None = None,
) -> str:
    """S-2: sha256 over {id, ts, stream, prev, body, context?}; hints are not hashed."""
    material: dict[str, Any] = {"id": id, "ts": ts, "stream": stream, "prev": prev, "body": body}
    if context is not None:
        material["context"] = context
    return sha256_hex(material)


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

    @property
    def type(self) -> str:
        return str(self.body["type"])

    def expected_hash(self) -> str:
        return receipt_hash(id=self.id, ts=self.ts, stream=self.stream, prev=self.prev,
                            body=self.body, context=self.context)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"id": self.id, "ts": self.ts, "stream": self.stream,
                                "prev": self.prev, "body": self.body, "hash": self.hash}
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
    *, stream: str, prev: str | None, body: dict[str, Any], ts: int, random_hex16: str,
    context: dict[str, Any] | None = None, hints: dict[str, Any] | None = None,
) -> Receipt:
    """Build the next receipt of `stream` after head `prev`."""
    if not isinstance(body, dict) or not isinstance(body.get("type"), str) or not body["type"]:
        raise ValueError("a receipt body is a JSON object with a non-empty string 'type'")
    if context is not None and not isinstance(context, dict):
        raise ValueError("a receipt context is a JSON object")
    rid = receipt_id(ts, random_hex16)
    digest = receipt_hash(id=rid, ts=ts, stream=stream, prev=prev, body=body, context=context)
    return Receipt(id=rid, ts=ts, stream=stream, prev=prev, body=body, hash=digest,
                   context=context, hints=hints)


@dataclass(frozen=True, slots=True)
class Verification:
    """Result of verifying one stream: ok with count and head, or where it breaks."""

    stream: str
    ok: bool
    count: int
    head: str | None
    index: int | None = None
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"stream": self.stream, "ok": self.ok, "count": self.count,
                                "head": self.head}
        if not self.ok:
            wire.update(index=self.index, reason=self.reason)
        return wire

    def describe(self) -> str:
        if self.ok:
            return f"ok: {self.count} receipts, head {self.head}"
        return f"{self.reason} at index {self.index}"


def verify(stream: str, receipts: Iterable[Receipt]) -> Verification:
    """Walk the chain in order; report the first index whose prev or hash is wrong (S-6)."""
    prev: str | None = None
    count = 0
    for index, receipt in enumerate(receipts):
        if receipt.prev != prev:
            return Verification(stream, False, count, prev, index, "broken prev",
                                {"expected": prev, "found": receipt.prev})
        if receipt.expected_hash() != receipt.hash:
            return Verification(stream, False, count, prev, index, "hash mismatch",
                                {"stored": receipt.hash})
        prev = receipt.hash
        count += 1
    return Verification(stream, True, count, prev)


S = TypeVar("S")
Reducer = Callable[[S | None, Receipt], S | None]


def fold(receipts: Iterable[Receipt], reducer: Callable[[Any, Receipt], Any],
         initial: Any = None) -> Any:
    """Fold `receipts` with `reducer`, starting from `initial` (S-7)."""
    state = initial
    for receipt in receipts:
        state = reducer(state, receipt)
    return state


def state_at(receipts: Sequence[Receipt], n: int, reducer: Callable[[Any, Receipt], Any]) -> Any:
    """State after the first `n` receipts (time travel); n is clamped to 0..len."""
    n = max(0, min(n, len(receipts)))
    return fold(receipts[:n], reducer)
