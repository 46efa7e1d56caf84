"""Text that every database can store in a receipt (S-3, Q-3).

PostgreSQL's jsonb and text columns refuse U+0000, and neither database can encode a
surrogate code point (U+D800..U+DFFF) as UTF-8. The store refuses such text, naming its
path (`first_unstorable`), so both databases behave alike. Handler output, which no one
can correct after the fact, goes through `storable` at the runtime's boundary instead:
each NUL and each lone surrogate becomes U+FFFD, the Unicode replacement character.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """`text` with NUL and lone surrogates replaced by U+FFFD (unchanged when clean).

    A surrogate pair held as two code points (from a `surrogatepass` decode) becomes the
    character it encodes; any other surrogate is lone."""
    if _UNSTORABLE.search(text) is None:
        return text
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.replace("\x00", REPLACEMENT)


def storable(value: Any) -> Any:
    """`value` with `storable_text` applied to every string, object keys included, at any
    depth. Parts that need no change are returned as they are (no copy); values that are
    not JSON (and cycles) are left for the store to refuse with their path. Two keys that
    differ only in replaced characters collapse into one (the later wins)."""
    return _storable(value, set())


def _storable(value: Any, seen: set[int]) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if not isinstance(value, (dict, list)) or id(value) in seen:
        return value
    seen.add(id(value))
    try:
        if isinstance(value, list):
            items = [_storable(item, seen) for item in value]
            same = all(new is old for new, old in zip(items, value, strict=True))
            return value if same else items
        pairs = [(_storable(k, seen), _storable(v, seen)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    finally:
        seen.discard(id(value))


def first_unstorable(value: Any, path: str = "$") -> tuple[str, str] | None:
    """(path, reason) of the first string in `value` (keys included) that no database can
    store, or None. A full walk: callers run it only once a cheap check found something."""
    pending: list[tuple[Any, str]] = [(value, path)]
    while pending:
        item, where = pending.pop()
        if isinstance(item, str):
            reason = _unstorable_reason(item)
            if reason:
                return where, reason
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                pending.append((child, f"{where}.{key}"))
                if isinstance(key, str):
                    pending.append((key, f"{where} (key)"))
        elif isinstance(item, list):
            pending.extend((child, f"{where}[{i}]") for i, child in reversed(list(enumerate(item))))
    return None


def _unstorable_reason(text: str) -> str | None:
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "NUL character (U+0000), which no database stores,"
    return "lone surrogate, which UTF-8 cannot encode,"
