"""Reads of live views: receipt positions by global sequence, never whole bodies.

Only positions, stream names, types and the organization travel to SSE clients, so
these queries select four columns and leave body, context and hints in the database.
"""

from __future__ import annotations

from typing import NamedTuple

from django.db.models.fields.json import KT
from django.db.models.lookups import Exact

from receipts.models import Receipt as ReceiptRow


class Entry(NamedTuple):
    seq: int
    stream: str
    type: str
    org: str | None  # context.organizationId, for org-bound principals


def entries_between(
    after: int,
    upto: int,
    *,
    limit: int,
    newest: bool = False,
    stream: str | None = None,
    prefix: str = "",
    org: str | None = None,
) -> list[Entry]:
    """Receipts with after < seq <= upto in ascending order (the newest `limit` if `newest`)."""
    if upto <= after:
        return []
    rows = ReceiptRow.objects.filter(seq__gt=after, seq__lte=upto)
    if stream is not None:
        rows = rows.filter(stream=stream)
    if prefix:
        rows = rows.filter(stream__startswith=prefix)
    rows = rows.annotate(org=KT("context__organizationId"))
    if org is not None:
        # A plain text comparison of `->>`'s text. `filter(org=org)` would use the JSON
        # key lookup, which on SQLite reads the right-hand side as JSON: `org-1` is not
        # JSON, and the query failed with "malformed JSON".
        rows = rows.filter(Exact(KT("context__organizationId"), org))
    rows = rows.order_by("-seq" if newest else "seq")
    found = [Entry(*row) for row in rows.values_list("seq", "stream", "event_type", "org")[:limit]]
    return found[::-1] if newest else found


def stream_organization(stream: str) -> str | None:
    """The organization of a stream, from its latest receipt's context (None if unknown)."""
    org = (
        ReceiptRow.objects.filter(stream=stream)
        .order_by("-seq")
        .annotate(org=KT("context__organizationId"))
        .values_list("org", flat=True)
        .first()
    )
    return org if isinstance(org, str) else None
