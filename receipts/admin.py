"""Operator admin for the receipt store (U-4, S-3, U-7): streams and receipts, read-only.

Owns the Streams and Receipts changelists and the stream page (the chain with verified
badges, Verify chain, the state at any receipt, Replay). It never writes a receipt row:
replay goes through `store.replay`, which rebuilds read models only, and `audit` puts
each verify and replay on record (U-3). Every list stays
on an index at any size: prefix lookups instead of `icontains`, keyset pages on the
stream page, and a paginator that never counts a whole table.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.urls import path, reverse
from django.utils.html import format_html

from observability.logs import log_event
from receipts import admin_log, audit, registry, store
from receipts.admin_kit import (
    NONE_HTML,
    OwnChangePage,
    ReadOnlyAdmin,
    jsonable,
    pretty_json,
    require,
    stream_url,
    titled,
    utc,
)
from receipts.core.chain import Receipt, Verification, fault
from receipts.errors import ReplayRefused
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow

logger = logging.getLogger(__name__)

PAGE_SIZE = 200  # receipts per stream page
# Badges on a page starting past this position are checked from the receipt just before
# the page instead of from the start of the stream: a page view must not rehash a whole
# long chain. "Verify chain" always walks everything.
BADGE_WALK_LIMIT = 20_000


# ---- formatting ----------------------------------------------------------------------------


def short_hash(value: str | None) -> str:
    """A hash cut to 12 characters, the whole of it in the tooltip."""
    if not value:
        return NONE_HTML
    return format_html('<code class="rcpt-hash" title="{}">{}…</code>', value, value[:12])


def _preview(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=jsonable)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---- index-friendly prefix lookups -------------------------------------------------------


def _prefix_upper(prefix: str) -> str | None:
    """The smallest string above every string that starts with `prefix` (None: no bound)."""
    while prefix:
        last = ord(prefix[-1]) + 1
        if 0xD800 <= last <= 0xDFFF:  # surrogates cannot be stored; skip over them
            last = 0xE000
        if last <= 0x10FFFF:
            return prefix[:-1] + chr(last)
        prefix = prefix[:-1]
    return None


def name_prefix_q(field: str, prefix: str, *, vendor: str) -> Q:
    """`field` starts with `prefix`, phrased so the database answers from a B-tree index.

    PostgreSQL: `LIKE 'p%'`, served by the varchar_pattern_ops index Django builds for
    the stream name. SQLite: its LIKE is case-insensitive and never uses an index on a
    BINARY column, so the prefix becomes the range [prefix, next prefix), which in
    SQLite's byte order is exactly the set of names starting with it.
    """
    if vendor == "postgresql":
        return Q(**{f"{field}__startswith": prefix})
    bound = Q(**{f"{field}__gte": prefix})
    upper = _prefix_upper(prefix)
    return bound & Q(**{f"{field}__lt": upper}) if upper else bound


class CheapCountPaginator(Paginator):
    """A paginator that never runs COUNT(*) over a whole table.

    The admin asks its paginator for `count` on every changelist view, and an exact
    count reads every row (PostgreSQL keeps no row count; SQLite walks the whole
    B-tree): seconds at a million streams or tens of millions of receipts. Instead:

    - unfiltered, an estimate that costs one catalogue or index lookup, used once it
      says the table holds at least `cap` rows: `pg_class.reltuples` on PostgreSQL
      (kept by autovacuum/ANALYZE); `MAX(rowid)` on SQLite, which is the row count
      plus rolled-back gaps because both tables paged here are append-only (S-3);
    - filtered (a prefix search), a capped count `SELECT COUNT(*) FROM (... LIMIT
      cap + 1)`: exact up to the cap, "more than cap" beyond it, never more than
      cap + 1 rows read.

    Page links follow the estimate; a name past the last linked page is reached with
    the prefix search, which is how an operator finds one stream among a million.
    """

    cap = 10_000

    @cached_property
    def _measured(self) -> tuple[int, str]:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return len(rows), "exact"
        estimate = self._estimate(rows)
        if estimate is not None and estimate >= self.cap:
            return estimate, "about"
        counted = rows.order_by()[: self.cap + 1].count()
        return counted, "exact" if counted <= self.cap else "more_than"

    @staticmethod
    def _estimate(rows: QuerySet[Any]) -> int | None:
        if rows.query.where:
            return None  # a filtered set has no cheap estimate
        connection = connections[rows.db]
        table = rows.model._meta.db_table
        if connection.vendor == "postgresql":
            sql, params = (
                "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
                [table],
            )
        elif connection.vendor == "sqlite":
            sql, params = f"SELECT MAX(rowid) FROM {connection.ops.quote_name(table)}", []
        else:
            return None
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if not row or row[0] is None or row[0] < 0:
            return None  # empty, or (PostgreSQL: -1) never vacuumed or analysed yet
        return int(row[0])

    @cached_property
    def count(self) -> int:
        return self._measured[0]

    @property
    def count_label(self) -> str:
        """`12`, `more than 10,000` or `about 1,000,000` for the changelist footer."""
        count, kind = self._measured
        if kind == "more_than":
            return f"more than {self.cap:,}"
        if kind == "about":
            return f"about {count:,}"
        return f"{count:,}"


# ---- the stream page -----------------------------------------------------------------------


@dataclass(frozen=True)
class ReceiptLine:
    """One row of the stream page's receipt table."""

    receipt: Receipt
    verified: bool  # hash recomputes and prev links, and so did every receipt before it
    broken: bool  # the index the last "Verify chain" reported
    ts_utc: str
    body_json: str
    body_preview: str
    context_json: str | None
    hints_json: str | None
    admin_url: str
    inclusion: admin_log.Inclusion | None = None  # None: not in the store-wide log yet


def chain_marks(name: str, page: list[Receipt], *, after: int) -> tuple[dict[int, bool], int]:
    """Verified flag per stream_seq of `page`, walking the chain up to the page's end.

    A flag is False at the first receipt that breaks the chain as `store.verify` sees it
    (prev does not link, the hash does not match, a stored column is not what was
    sealed), and at every receipt after it (S-6). Returns the flags and the position
    the walk started from: 0, or `after` when the page lies past BADGE_WALK_LIMIT and the
    walk trusts the receipt just before the page.
    """
    if not page:
        return {}, 0
    if after > BADGE_WALK_LIMIT:
        anchor = store.read(name, after=after - 1, limit=1)
        prev, start = (anchor[0].hash if anchor else None), after
    else:
        prev, start = None, 0
    last = page[-1].stream_seq or after + len(page)
    # The columns as stored (not the page's sealed values), so an edited one shows.
    walk = store.read(name, after=start, limit=last - start, stored=True)
    marks: dict[int, bool] = {}
    sound = True
    for receipt in walk:
        sound = sound and fault(receipt, prev) is None
        prev = receipt.hash
        if receipt.stream_seq is not None:
            marks[receipt.stream_seq] = sound
    return marks, start


def receipt_lines(
    page: list[Receipt], marks: dict[int, bool], verification: Verification | None
) -> list[ReceiptLine]:
    broken_seq = (
        verification.index + 1
        if verification and not verification.ok and verification.index is not None
        else None
    )
    included = admin_log.inclusions(page)
    return [
        ReceiptLine(
            receipt=r,
            verified=marks.get(r.stream_seq or 0, False),
            broken=r.stream_seq == broken_seq,
            ts_utc=utc(r.ts),
            body_json=pretty_json(r.body),
            body_preview=_preview(r.body),
            context_json=None if r.context is None else pretty_json(r.context),
            hints_json=None if r.hints is None else pretty_json(r.hints),
            admin_url=reverse("admin:receipts_receipt_change", args=(r.seq,)),
            inclusion=included.get(r.seq or 0),
        )
        for r in page
    ]


def position_param(raw: str | None, *, count: int, default: int) -> int:
    """A position in a stream of `count` receipts from the query string: `default` when it
    is missing or not a number, held to 0..count."""
    try:
        position = int(raw) if raw else default
    except ValueError:
        position = default
    return max(0, min(position, count))


def chain_page(
    request: HttpRequest,
    name: str,
    count: int,
    *,
    default_after: int,
    panels: dict[str, Any],
    replayable: bool = True,
) -> dict[str, Any]:
    """The chain on the stream page and the job page: a page of receipts after the query's
    `after` with their verified badges and the positions of the pages around it, and
    Verify chain and Replay, with the results of one just run (`panels`)."""
    after = position_param(request.GET.get("after"), count=count, default=default_after)
    verification = panels.get("verification")
    page = store.read(name, after=after, limit=PAGE_SIZE)
    marks, walked_from = chain_marks(name, page, after=after)
    last_shown = (page[-1].stream_seq or after + len(page)) if page else after
    return {
        "lines": receipt_lines(page, marks, verification),
        "walked_from": walked_from,
        "after": after,
        "first_shown": after + 1 if page else after,
        "last_shown": last_shown,
        "older_after": max(0, after - PAGE_SIZE) if after > 0 else None,
        "newer_after": last_shown if last_shown < count else None,
        "latest_after": max(0, count - PAGE_SIZE),
        "verification": verification,
        "replay": panels.get("replay"),
        "can_verify": can_verify(request),
        "can_replay": replayable and can_replay(request),
    }


def state_panel(name: str, family: registry.StreamFamily, at: int) -> dict[str, Any]:
    """The family's fold after the first `at` receipts, described for display (S-7)."""
    try:
        state = store.state_at(name, at, family.reducer)
        return {"at": at, "json": pretty_json(registry.describe_state(name, state))}
    except Exception as error:  # a reducer refusing a corrupt stream must not hide the page
        return {"at": at, "error": f"{type(error).__name__}: {error}"}


def replay_on_record(
    request: HttpRequest, name: str, *, logger: logging.Logger, event: str
) -> dict[str, Any]:
    """Run `store.replay` on one stream as the request asks, put it on record (U-3), log it
    as `event` and shape the drift report (S-8) for display."""
    by, dry_run = request.user.get_username(), request.POST.get("dry_run") == "1"
    try:
        report = store.replay(name, dry_run=dry_run)
    except ReplayRefused as error:
        replay: dict[str, Any] = {"refused": str(error), "dry_run": dry_run}
    else:
        drift = [
            {
                "stream": d.stream,
                "fields": [
                    {
                        "name": field,
                        "before": pretty_json((d.before or {}).get(field)),
                        "after": pretty_json((d.after or {}).get(field)),
                    }
                    for field in d.fields
                ],
                "missing_before": d.before is None,
                "missing_after": d.after is None,
            }
            for d in report.drift
        ]
        replay = {"checked": report.checked, "drift": drift, "dry_run": dry_run}
    drifted = len(replay.get("drift", []))
    audit.record_replay(name, by=by, dry_run=dry_run, drift=drifted, refused=replay.get("refused"))
    log_event(
        logger,
        event,
        f"{by} replayed {name}",
        stream=name,
        by=by,
        dry_run=dry_run,
        drift=drifted,
        refused="refused" in replay,
    )
    return replay


def verify_on_record(
    request: HttpRequest, name: str, *, logger: logging.Logger, event: str
) -> Verification:
    """Walk the whole chain of one stream, put the check on record (U-3) and log it as
    `event`."""
    by = request.user.get_username()
    verification = store.verify(name)
    audit.record_verify(name, verification, by=by)
    log_event(logger, event, f"{by} verified {name}", stream=name, by=by, ok=verification.ok)
    return verification


def can_verify(request: HttpRequest) -> bool:
    return request.user.has_perm("receipts.verify_stream")


def can_replay(request: HttpRequest) -> bool:
    # Rebuilding a read model is the one stream action that writes; U-7.
    return request.user.is_superuser or request.user.has_perm("receipts.replay_stream")


# ---- model admins --------------------------------------------------------------------------


class StoreAdmin(ReadOnlyAdmin):
    """Streams and receipts, read-only (S-3): receipts are written by the store alone. The
    lists are browsed by name prefix and never counted whole."""

    paginator = CheapCountPaginator
    prefix_label = "Browse by prefix"

    def prefix_shortcuts(self) -> list[str]:
        """The registered families' prefixes, offered as one-click browses."""
        return [family.prefix for family in registry.families()]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """The subclass's `with_prefix`: the rows of streams whose name starts with the
        term, found on an index."""
        prefix = search_term.strip()
        return (self.with_prefix(queryset, prefix) if prefix else queryset), False


@admin.register(StreamRow)
class StreamAdmin(OwnChangePage, StoreAdmin):
    list_display = ("name", "receipt_count", "head_short", "last_ts_utc", "updated_at_utc")
    ordering = ("name",)
    sortable_by = ("name",)  # the primary key; sorting on the other columns would scan
    search_fields = ("name",)  # shows the box; get_search_results makes it a prefix lookup
    search_help_text = "Stream name prefix, e.g. jobs/ (matches the start of the name)."
    stream_template = "admin/receipts/stream/stream_page.html"

    def with_prefix(self, queryset: QuerySet[StreamRow], prefix: str) -> QuerySet[StreamRow]:
        return queryset.filter(name_prefix_q("name", prefix, vendor=_vendor(queryset)))

    @admin.display(description="head")
    def head_short(self, obj: StreamRow) -> str:
        return short_hash(obj.head)

    @admin.display(description="last receipt (UTC)")
    def last_ts_utc(self, obj: StreamRow) -> str:
        return titled(utc(obj.last_ts), obj.last_ts or "")

    @admin.display(description="updated (UTC)")
    def updated_at_utc(self, obj: StreamRow) -> str:
        return titled(utc(obj.updated_at), obj.updated_at)

    def object_page(
        self, request: HttpRequest, name: str, extra_context: dict[str, Any] | None
    ) -> HttpResponse:
        """The stream page: the chain, its verification, time travel and replay (U-4)."""
        info = store.stream_info(name)
        if info is None:
            raise Http404(f"stream {name!r} not found")
        family = registry.family_for(name)
        has_reducer = bool(family and family.reducer)
        has_projector = bool(family and family.projector)

        panels: dict[str, Any] = {}
        if request.method == "POST":
            action = request.POST.get("action")
            if action == "verify":
                require(can_verify(request))
                panels["verification"] = verify_on_record(
                    request, name, logger=logger, event="admin.stream_verified"
                )
            elif action == "replay":
                require(has_projector and can_replay(request))
                panels["replay"] = replay_on_record(
                    request, name, logger=logger, event="admin.stream_replayed"
                )
            else:
                return HttpResponseBadRequest("unknown stream action")

        at = position_param(request.GET.get("at"), count=info.count, default=info.count)
        context = {
            "title": name,
            "app_label": self.opts.app_label,
            "stream": info,
            "head_ts": utc(info.last_ts),
            "family": family,
            "has_reducer": has_reducer,
            **chain_page(
                request, name, info.count, default_after=0, panels=panels, replayable=has_projector
            ),
            "state": state_panel(name, family, at) if family and has_reducer else None,
        }
        return self.render_page(request, self.stream_template, context, extra_context)


@admin.register(ReceiptRow)
class ReceiptAdmin(StoreAdmin):
    list_display = ("seq", "stream_link", "stream_seq", "type_badge", "ts_utc")
    list_display_links = ("seq",)
    ordering = ("-seq",)
    sortable_by = ("seq",)
    search_fields = ("stream",)  # stream-name prefix only: no scan on type or body
    search_help_text = "Stream name prefix, e.g. jobs/ (receipts of every matching stream)."
    prefix_label = "Receipts of streams starting with"
    fields = (
        "seq",
        "stream_link",
        "stream_seq",
        "receipt_id",
        "ts_utc",
        "type_badge",
        "prev_full",
        "hash_full",
        "body_json",
        "context_json",
        "hints_json",
        "event_id",
    )
    readonly_fields = fields

    def get_urls(self) -> list[Any]:
        def download(request: HttpRequest, seq: str) -> HttpResponse:
            if not self.has_view_permission(request):
                raise PermissionDenied
            return admin_log.proof_download(request, seq)

        return [
            path(
                "<path:seq>/inclusion/",
                self.admin_site.admin_view(download),
                name="receipts_receipt_inclusion",
            ),
            *super().get_urls(),
        ]

    def with_prefix(self, queryset: QuerySet[ReceiptRow], prefix: str) -> QuerySet[ReceiptRow]:
        # Through the stream table's name index, then the (stream, stream_seq) unique
        # index: receipt.stream has no pattern index of its own.
        names = StreamRow.objects.filter(name_prefix_q("name", prefix, vendor=_vendor(queryset)))
        return queryset.filter(stream__in=names.values("name"))

    @admin.display(description="stream")
    def stream_link(self, obj: ReceiptRow) -> str:
        """The stream page opened at this receipt's row."""
        after = (obj.stream_seq - 1) // PAGE_SIZE * PAGE_SIZE
        return format_html(
            '<a href="{}?after={}#r{}">{}</a>',
            stream_url(obj.stream),
            after,
            obj.stream_seq,
            obj.stream,
        )

    @admin.display(description="type")
    def type_badge(self, obj: ReceiptRow) -> str:
        return format_html('<span class="rcpt-type">{}</span>', obj.event_type)

    @admin.display(description="ts (UTC)")
    def ts_utc(self, obj: ReceiptRow) -> str:
        return titled(utc(obj.ts), obj.ts)

    @admin.display(description="prev")
    def prev_full(self, obj: ReceiptRow) -> str:
        return format_html('<code class="rcpt-hash">{}</code>', obj.prev or "—")

    @admin.display(description="hash")
    def hash_full(self, obj: ReceiptRow) -> str:
        return format_html('<code class="rcpt-hash">{}</code>', obj.hash)

    @admin.display(description="body")
    def body_json(self, obj: ReceiptRow) -> str:
        return _json_block(obj.body)

    @admin.display(description="context")
    def context_json(self, obj: ReceiptRow) -> str:
        return _json_block(obj.context)

    @admin.display(description="hints")
    def hints_json(self, obj: ReceiptRow) -> str:
        return _json_block(obj.hints)


def _json_block(value: Any) -> str:
    if value is None:
        return NONE_HTML
    return format_html('<pre class="rcpt-json">{}</pre>', pretty_json(value))


def _vendor(queryset: QuerySet[Any]) -> str:
    return connections[queryset.db].vendor
