"""Query parameters every list shares: one `limit` rule and no repeated parameter.

Every endpoint refuses a query parameter it does not read with 400 `unknown_parameter`
naming the ones it takes, so a typo (`?stauts=failed`) or a parameter of another list
(`?cursor=` on a list without pages) is never silently ignored.

The rule is the same on `GET /jobs`, `/jobs/<id>/receipts` and the objectives lists (and
`manage.py jobs list`): a limit is an integer from 1 to the list's maximum, absent or
empty means the default, anything else is 400 `invalid_limit` naming the range. A
parameter an endpoint reads may be given once; `?status=a&status=b` is 400
`repeated_parameter` instead of "last one wins". Pure functions over raw values: no
request, no database, so the CLI validates with the very same rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from jobs.errors import InvalidRequest


class MultiValued(Protocol):
    def getlist(self, key: str) -> list[Any]: ...

    def keys(self) -> Iterable[str]: ...


def check_single(query: MultiValued, names: Iterable[str]) -> None:
    """400 `repeated_parameter` when any of `names` is given more than once."""
    for name in names:
        if len(query.getlist(name)) > 1:
            raise InvalidRequest(
                "repeated_parameter", f"{name} is given more than once; give it at most once"
            )


def shown(raw: object, limit: int = 40) -> str:
    """A client's value quoted for an error message, clipped past `limit` characters with
    its length: an error never echoes a 5,000-character value whole."""
    text = str(raw)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def check_known(query: MultiValued, names: Iterable[str]) -> None:
    """400 `unknown_parameter` when the query has a parameter not in `names`."""
    taken = list(names)
    unknown = sorted(set(query.keys()) - set(taken))
    if unknown:
        takes = f"it takes {', '.join(taken)}" if taken else "it takes none"
        raise InvalidRequest(
            "unknown_parameter", f"{shown(unknown[0])} is not a parameter of this endpoint; {takes}"
        )


def parse_limit(raw: Any, *, default: int, maximum: int) -> int:
    """The page size: an integer 1..maximum; None or "" is `default`."""
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = None
    if isinstance(raw, bool) or value is None or not 1 <= value <= maximum:
        raise InvalidRequest(
            "invalid_limit", f"limit must be an integer from 1 to {maximum}; got {shown(raw)}"
        )
    return value


def limit_text(default: int, maximum: int) -> str:
    """The limit parameter's description for the schema."""
    return f"page size, an integer from 1 to {maximum} (default {default}); else 400 invalid_limit"
