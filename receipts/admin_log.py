"""The store-wide log in the admin: where each receipt of a page is in the log (its leaf
and the first checkpoint that holds it) and the download of its inclusion proof, and
the latest checkpoint for the dashboard. Reads only: three queries for a whole page."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse

from receipts import checkpoints, log, proofs
from receipts.core.chain import Receipt
from receipts.errors import ReceiptsError
from receipts.models import LogCheckpoint
from receipts.models import Receipt as ReceiptRow

CHECKPOINTS_PER_PAGE = 1000  # the checkpoints a page's leaves span, at most (one a minute)


@dataclass(frozen=True)
class Inclusion:
    """A receipt in the log: leaf `index`, in checkpoint `checkpoint` (None: not yet)."""

    index: int
    checkpoint: int | None
    proof_url: str | None


def inclusions(page: Sequence[Receipt]) -> dict[int, Inclusion]:
    """By seq, each receipt of `page` that is in the log (missing: not yet)."""
    index_of = log.leaf_indexes(r.seq for r in page if r.seq is not None)
    if not index_of:
        return {}
    low, high = min(index_of.values()), max(index_of.values())
    sizes = list(
        LogCheckpoint.objects.filter(tree_size__gt=low, tree_size__lte=high)
        .order_by("tree_size")
        .values_list("tree_size", "number")[:CHECKPOINTS_PER_PAGE]
    )
    after = (
        LogCheckpoint.objects.filter(tree_size__gt=high)
        .order_by("tree_size")
        .values_list("tree_size", "number")
        .first()
    )
    sizes += [after] if after else []
    out = {}
    for seq, index in index_of.items():
        number = next((n for size, n in sizes if size > index), None)
        url = reverse("admin:receipts_receipt_inclusion", args=(seq,)) if number else None
        out[seq] = Inclusion(index, number, url)
    return out


def proof_download(request: HttpRequest, seq: str) -> HttpResponse:
    """The inclusion proof of receipt `seq` as a JSON file, against `?checkpoint=` or the
    first checkpoint that holds it."""
    row = (
        ReceiptRow.objects.filter(seq=int(seq) if seq.isascii() and seq.isdigit() else 0)
        .values_list("stream", "stream_seq")
        .first()
    )
    if row is None:
        raise Http404(f"receipt {seq[:20]} not found")
    try:
        located = proofs.locate_position(row[0], row[1])
        ref = request.GET.get("checkpoint")
        cp = checkpoints.resolve(ref) if ref else checkpoints.first_covering(located.index)
        if cp is None:
            raise Http404(f"receipt {located.name} is in no checkpoint yet")
        proof = proofs.inclusion(located, cp)
    except ReceiptsError as error:
        raise Http404(str(error)) from None
    name = f"inclusion-{row[0].replace('/', '_')}-{row[1]}-checkpoint-{cp.number}.json"
    response = HttpResponse(
        json.dumps(proof.to_wire(), indent=2) + "\n", content_type="application/json"
    )
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@dataclass(frozen=True)
class Latest:
    number: int
    tree_size: int
    age_ms: int
    signed: bool


def latest(*, now_ms: int) -> Latest | None:
    """The latest checkpoint, for the dashboard: its number, size, age, signed or not."""
    row = (
        LogCheckpoint.objects.order_by("-number")
        .values_list("number", "tree_size", "timestamp_ms", "key_id")
        .first()
    )
    if row is None:
        return None
    number, size, at, key_id = row
    return Latest(number, size, max(0, now_ms - at), key_id is not None)
