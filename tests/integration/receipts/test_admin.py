"""U-4 streams browser and S-3 read-only receipts in the Django admin (both backends)."""

from __future__ import annotations

import html
import re
from urllib.parse import quote as urlquote

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts import admin as receipts_admin
from receipts import registry, store
from receipts.core.chain import fold
from receipts.models import Receipt as ReceiptRow

pytestmark = pytest.mark.django_db

FAMILY = "test-admin/"
STREAMS = reverse("admin:receipts_stream_changelist")
RECEIPTS = reverse("admin:receipts_receipt_changelist")


def counter(state, receipt):
    state = state or {"n": 0, "types": []}
    return {"n": state["n"] + 1, "types": [*state["types"], receipt.type]}


class MemoryProjector:
    """A read model in a dict: the fold of each stream."""

    name = "admin-memory"

    def __init__(self):
        self.rows: dict[str, dict] = {}

    def apply(self, handle, receipts):
        self.rows[handle.name] = self.compute(handle.name, store.read(handle.name))

    def snapshot(self, stream):
        return self.rows.get(stream)

    def compute(self, stream, receipts):
        return fold(receipts, counter) if receipts else None

    def write(self, stream, row):
        self.rows[stream] = row


@pytest.fixture
def family():
    projector = MemoryProjector()
    registry.register(
        registry.StreamFamily(
            FAMILY,
            "admin test",
            reducer=counter,
            projector=projector,
            describe=lambda state: None if state is None else {"seen": state["n"], **state},
        )
    )
    yield projector
    registry.unregister(FAMILY)


@pytest.fixture
def staff(django_user_model):
    """A staff user holding only receipts.view_stream; tests grant more."""
    user = django_user_model.objects.create_user("ops", password="x", is_staff=True)
    grant(user, "view_stream")
    return user


def grant(user, codename):
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="receipts", codename=codename)
    )


def stream_url(name: str) -> str:
    return reverse("admin:receipts_stream_change", args=(quote(name),))


def text(response) -> str:
    return html.unescape(response.content.decode())


def words(response) -> str:
    """The page's visible text: tags dropped, whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", text(response)).split())


def row_html(page: str, stream_seq: int) -> str:
    match = re.search(rf'<tr id="r{stream_seq}" class="([^"]*)">(.*?)</tr>', page, re.S)
    assert match, f"no row for receipt #{stream_seq}"
    return match.group(0)


def badges(response) -> dict[int, bool]:
    return {line.receipt.stream_seq: line.verified for line in response.context["lines"]}


def tamper_body(stream: str, stream_seq: int) -> None:
    ReceiptRow.objects.filter(stream=stream, stream_seq=stream_seq).update(
        body={"type": "forged", "amount": 1_000_000}
    )


# ---- Streams changelist --------------------------------------------------------------------


def test_stream_changelist_lists_streams_with_short_head_and_utc_time(admin_client):
    [r] = store.append("ops/one", {"type": "made"}, now_ms=1_700_000_000_123)
    response = admin_client.get(STREAMS)
    assert response.status_code == 200
    page = text(response)
    assert "ops/one" in page
    assert f'title="{r.hash}">{r.hash[:12]}…' in page  # shortened, the whole hash in the tooltip
    assert "2023-11-14 22:13:20.123 UTC" in page
    assert "Browse by prefix" in page


def test_prefix_search_finds_only_streams_starting_with_the_prefix(admin_client):
    for name in [
        "test-admin/a1",
        "test-admin/a2",
        "test-admin/b1",
        "other/test-admin/a",
        "TEST-ADMIN/a3",
        "test-admin",
        "test-admin/a",
    ]:
        store.append(name, {"type": "made"})
    response = admin_client.get(STREAMS, {"q": "test-admin/a"})
    names = [s.name for s in response.context["cl"].result_list]
    # case-sensitive, anchored at the start (SQLite's LIKE would match TEST-ADMIN/ too)
    assert names == ["test-admin/a", "test-admin/a1", "test-admin/a2"]
    assert "3 matches" in words(response)


def test_prefix_search_with_a_wildcard_character_is_literal(admin_client):
    store.append("pct/100%/a", {"type": "made"})
    store.append("pct/1000/a", {"type": "made"})
    store.append("pct/1_0/a", {"type": "made"})
    names = [s.name for s in admin_client.get(STREAMS, {"q": "pct/100%"}).context["cl"].result_list]
    assert names == ["pct/100%/a"]
    names = [s.name for s in admin_client.get(STREAMS, {"q": "pct/1_"}).context["cl"].result_list]
    assert names == ["pct/1_0/a"]


def test_family_prefixes_are_offered_as_shortcuts(admin_client, family):
    assert f'href="?q={urlquote(FAMILY)}"' in admin_client.get(STREAMS).content.decode()


@pytest.mark.parametrize("url", [STREAMS, RECEIPTS])
@pytest.mark.parametrize("search", [{}, {"q": "load/"}])
def test_changelists_never_count_a_whole_table(admin_client, url, search):
    for i in range(3):
        store.append(f"load/{i}", [{"type": "a"}, {"type": "b"}])
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(url, search)
    assert response.status_code == 200
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()]
    assert counts, "the paginator should count (capped) the filtered rows"
    for sql in counts:
        assert "LIMIT" in sql.upper(), f"unbounded count: {sql}"
    assert "icontains" not in str(queries) and "UPPER(" not in str(queries)


def test_capped_count_says_more_than_the_cap(admin_client, monkeypatch):
    monkeypatch.setattr(receipts_admin.CheapCountPaginator, "cap", 3)
    for i in range(5):
        store.append(f"many/{i}", {"type": "made"})
    response = admin_client.get(STREAMS, {"q": "many/"})
    cl = response.context["cl"]
    assert cl.paginator.count == 4  # cap + 1: "more than 3", and no more rows read
    assert "more than 3" in text(response)
    # the page still shows every row the paginator's page holds
    assert [s.name for s in cl.result_list] == [f"many/{i}" for i in range(5)]


def test_small_counts_are_exact(admin_client):
    for i in range(2):
        store.append(f"few/{i}", {"type": "made"})
    response = admin_client.get(STREAMS, {"q": "few/"})
    assert response.context["cl"].paginator.count == 2
    assert response.context["cl"].paginator.count_label == "2"


def test_unfiltered_count_is_a_cheap_estimate_not_a_count(admin_client, monkeypatch):
    monkeypatch.setattr(receipts_admin.CheapCountPaginator, "cap", 3)
    for i in range(6):
        store.append(f"est/{i}", {"type": "made"})
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE receipt_stream")  # reltuples, as autovacuum would
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(STREAMS)
    paginator = response.context["cl"].paginator
    assert paginator.count == 6 and paginator.count_label == "about 6"
    assert "about 6" in words(response)
    assert not [q for q in queries if "COUNT(" in q["sql"].upper()]
    assert len(response.context["cl"].result_list) == 6


def test_prefix_upper_bound_covers_exactly_the_prefix():
    upper = receipts_admin._prefix_upper
    assert upper("jobs/") == "jobs0"
    assert upper("a\U0010ffff") == "b"
    assert upper("\U0010ffff") is None
    assert upper("x\ud7ff") == "x\ue000"


# ---- the stream page -----------------------------------------------------------------------


def test_stream_page_lists_every_receipt_in_order_with_hashes(admin_client):
    receipts = store.append(
        "ops/chain",
        [{"type": "job.enqueued", "n": 1}, {"type": "job.leased"}, {"type": "job.completed"}],
        context={"actor": "alice"},
        event_id="cmd-1",
    )
    response = admin_client.get(stream_url("ops/chain"))
    assert response.status_code == 200
    page = text(response)
    assert f'id="rcpt-head">{receipts[-1].hash}<' in page
    assert '<dd id="rcpt-count">3</dd>' in page
    for i, r in enumerate(receipts, start=1):
        row = row_html(page, i)
        assert f'title="{r.hash}"' in row and r.id in row and f">{r.type}<" in row
        assert (f'title="{r.prev}"' in row) if r.prev else "—" in row
        assert '"actor": "alice"' in row and f'"eventId": "cmd-1#{i - 1}"' in row
    assert '"n": 1' in row_html(page, 1)
    assert badges(response) == {1: True, 2: True, 3: True}
    assert page.index('id="r1"') < page.index('id="r2"') < page.index('id="r3"')
    assert "state after this receipt" not in page  # no reducer for ops/


def test_stream_page_pages_by_stream_seq_keyset(admin_client):
    store.append("ops/long", [{"type": "tick", "i": i} for i in range(205)])
    first = admin_client.get(stream_url("ops/long"))
    assert [line.receipt.stream_seq for line in first.context["lines"]] == list(range(1, 201))
    assert first.context["older_after"] is None
    assert 'href="?after=200" class="rcpt-newer"' in first.content.decode()
    second = admin_client.get(stream_url("ops/long"), {"after": 200})
    assert [line.receipt.stream_seq for line in second.context["lines"]] == list(range(201, 206))
    assert 'href="?after=0" class="rcpt-older"' in second.content.decode()
    assert second.context["newer_after"] is None
    assert all(badges(second).values())


def test_unknown_stream_is_404(admin_client):
    assert admin_client.get(stream_url("ops/missing")).status_code == 404


def test_verify_on_a_sound_chain_shows_ok_with_count_and_head(admin_client):
    receipts = store.append("ops/sound", [{"type": "a"}, {"type": "b"}])
    response = admin_client.post(stream_url("ops/sound"), {"action": "verify"})
    assert response.status_code == 200
    assert response.context["verification"].ok
    block = re.search(
        r'<div id="rcpt-verification" class="([^"]*)">(.*?)</div>', text(response), re.S
    )
    assert "rcpt-ok" in block.group(1)
    assert "ok: 2 receipts" in block.group(2) and receipts[-1].hash in block.group(2)


def test_tampered_body_shows_hash_mismatch_and_crosses_from_the_break(admin_client):
    store.append("ops/forged", [{"type": "a"}, {"type": "b"}, {"type": "c"}])
    tamper_body("ops/forged", 2)

    shown = admin_client.get(stream_url("ops/forged"))
    assert badges(shown) == {1: True, 2: False, 3: False}  # ✗ at and after the break

    response = admin_client.post(stream_url("ops/forged"), {"action": "verify"})
    page = text(response)
    assert "hash mismatch at index 1" in page
    assert "rcpt-bad" in re.search(r'<div id="rcpt-verification" class="([^"]*)"', page).group(1)
    assert "rcpt-row-broken" in row_html(page, 2)
    assert "rcpt-row-broken" not in row_html(page, 1) + row_html(page, 3)
    assert "✓" in row_html(page, 1) and "✗" in row_html(page, 2) and "✗" in row_html(page, 3)


def test_relinked_prev_shows_broken_prev(admin_client):
    store.append("ops/relinked", [{"type": "a"}, {"type": "b"}, {"type": "c"}])
    ReceiptRow.objects.filter(stream="ops/relinked", stream_seq=3).update(prev="0" * 64)
    response = admin_client.post(stream_url("ops/relinked"), {"action": "verify"})
    assert "broken prev at index 2" in text(response)
    assert badges(response) == {1: True, 2: True, 3: False}


def test_badges_on_a_later_page_see_a_break_on_an_earlier_page(admin_client):
    store.append("ops/deep", [{"type": "tick", "i": i} for i in range(203)])
    tamper_body("ops/deep", 5)
    response = admin_client.get(stream_url("ops/deep"), {"after": 200})
    assert badges(response) == {201: False, 202: False, 203: False}


def test_badges_deep_in_a_long_stream_walk_from_the_page_start(admin_client, monkeypatch):
    monkeypatch.setattr(receipts_admin, "BADGE_WALK_LIMIT", 2)
    monkeypatch.setattr(receipts_admin, "PAGE_SIZE", 2)
    store.append("ops/far", [{"type": "tick", "i": i} for i in range(6)])
    tamper_body("ops/far", 1)  # before the walk's anchor: only "Verify chain" sees it
    tamper_body("ops/far", 6)
    response = admin_client.get(stream_url("ops/far"), {"after": 3})
    assert badges(response) == {4: True, 5: True}
    assert "Badges are checked from receipt 3 onward" in words(response)
    assert badges(admin_client.get(stream_url("ops/far"), {"after": 4})) == {5: True, 6: False}
    assert "hash mismatch at index 0" in words(
        admin_client.post(stream_url("ops/far") + "?after=3", {"action": "verify"})
    )


def test_state_panel_shows_the_fold_after_n_receipts(admin_client, family):
    store.append(f"{FAMILY}s", [{"type": "a"}, {"type": "b"}, {"type": "c"}])
    latest = admin_client.get(stream_url(f"{FAMILY}s"))
    assert latest.context["state"]["at"] == 3
    assert '"seen": 3' in text(latest) and '"types": [\n    "a",\n    "b",\n    "c"\n  ]' in text(
        latest
    )

    response = admin_client.get(stream_url(f"{FAMILY}s"), {"at": 2})
    state = re.search(
        r'<pre class="rcpt-json" id="rcpt-state-json">(.*?)</pre>', text(response), re.S
    )
    assert state.group(1) == '{\n  "n": 2,\n  "seen": 2,\n  "types": [\n    "a",\n    "b"\n  ]\n}'
    assert "State at receipt 2 of 3" in text(response)
    for i in (1, 2, 3):
        assert f'href="?after=0&at={i}#state">state after this receipt' in row_html(
            text(response), i
        )

    assert admin_client.get(stream_url(f"{FAMILY}s"), {"at": 0}).context["state"]["json"] == "null"
    assert admin_client.get(stream_url(f"{FAMILY}s"), {"at": 99}).context["state"]["at"] == 3


def test_state_panel_reports_a_failing_reducer(admin_client):
    def strict(state, receipt):
        if receipt.type == "bad":
            raise ValueError("no job for bad")
        return (state or 0) + 1

    registry.register(registry.StreamFamily("test-strict/", "strict", reducer=strict))
    try:
        store.append("test-strict/x", [{"type": "ok"}, {"type": "bad"}])
        response = admin_client.get(stream_url("test-strict/x"))
        assert response.status_code == 200
        assert "The reducer failed: ValueError: no job for bad" in text(response)
        assert (
            admin_client.get(stream_url("test-strict/x"), {"at": 1}).context["state"]["json"] == "1"
        )
    finally:
        registry.unregister("test-strict/")


def test_replay_shows_the_drift_and_rewrites_the_read_model(admin_client, family):
    store.append(f"{FAMILY}r", [{"type": "a"}, {"type": "b"}])
    family.rows[f"{FAMILY}r"] = {"n": 7, "types": ["a", "b"]}  # drifted read model

    dry = admin_client.post(stream_url(f"{FAMILY}r"), {"action": "replay", "dry_run": "1"})
    assert "Replay dry run" in text(dry) and "(nothing written)" in text(dry)
    assert family.rows[f"{FAMILY}r"]["n"] == 7

    response = admin_client.post(stream_url(f"{FAMILY}r"), {"action": "replay", "dry_run": "0"})
    [drift] = response.context["replay"]["drift"]
    assert [(f["name"], f["before"], f["after"]) for f in drift["fields"]] == [("n", "7", "2")]
    assert "Read model rebuilt" in text(response) and "1 with drift" in text(response)
    assert family.rows[f"{FAMILY}r"] == {"n": 2, "types": ["a", "b"]}

    again = admin_client.post(stream_url(f"{FAMILY}r"), {"action": "replay", "dry_run": "0"})
    assert again.context["replay"]["drift"] == [] and "no drift" in text(again)


def test_replay_of_a_tampered_chain_is_refused(admin_client, family):
    store.append(f"{FAMILY}bad", [{"type": "a"}, {"type": "b"}])
    tamper_body(f"{FAMILY}bad", 1)
    family.rows[f"{FAMILY}bad"] = {"n": 99, "types": []}
    response = admin_client.post(stream_url(f"{FAMILY}bad"), {"action": "replay", "dry_run": "0"})
    assert (
        f"Replay refused. refused to replay invalid chain for stream '{FAMILY}bad': "
        "hash mismatch at index 0"
    ) in words(response)
    assert family.rows[f"{FAMILY}bad"]["n"] == 99  # nothing projected from a corrupt chain


def test_replay_is_not_offered_for_a_stream_without_a_projector(admin_client):
    store.append("ops/plain", {"type": "a"})
    assert "Replay" not in text(admin_client.get(stream_url("ops/plain")))
    response = admin_client.post(stream_url("ops/plain"), {"action": "replay", "dry_run": "1"})
    assert response.status_code == 403


def test_unknown_action_is_a_bad_request(admin_client):
    store.append("ops/act", {"type": "a"})
    assert admin_client.post(stream_url("ops/act"), {"action": "delete"}).status_code == 400


# ---- permissions (U-7, S-3) ----------------------------------------------------------------


def test_staff_without_action_permissions_sees_the_page_but_cannot_verify_or_replay(
    client, staff, family
):
    store.append(f"{FAMILY}p", {"type": "a"})
    client.force_login(staff)
    page = text(client.get(stream_url(f"{FAMILY}p")))
    assert f"{FAMILY}p" in page and "Verify chain" not in page and "Replay" not in page
    assert client.post(stream_url(f"{FAMILY}p"), {"action": "verify"}).status_code == 403
    assert client.post(stream_url(f"{FAMILY}p"), {"action": "replay"}).status_code == 403


def test_verify_and_replay_follow_their_permissions(client, staff, family):
    store.append(f"{FAMILY}q", {"type": "a"})
    grant(staff, "verify_stream")
    grant(staff, "replay_stream")
    client.force_login(staff)
    assert client.post(stream_url(f"{FAMILY}q"), {"action": "verify"}).context["verification"].ok
    response = client.post(stream_url(f"{FAMILY}q"), {"action": "replay", "dry_run": "1"})
    assert response.status_code == 200 and response.context["replay"]["checked"] == 1


def test_staff_without_view_permission_is_forbidden(client, django_user_model):
    store.append("ops/hidden", {"type": "a"})
    user = django_user_model.objects.create_user("nobody", password="x", is_staff=True)
    client.force_login(user)
    assert client.get(stream_url("ops/hidden")).status_code == 403
    assert client.get(STREAMS).status_code == 403


@pytest.mark.parametrize("url", [STREAMS, RECEIPTS, "stream"])
def test_non_staff_users_are_sent_to_the_login_page(client, django_user_model, url):
    store.append("ops/private", {"type": "a"})
    url = stream_url("ops/private") if url == "stream" else url
    anonymous = client.get(url)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")
    client.force_login(django_user_model.objects.create_user("member", password="x"))
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert client.post(url, {"action": "verify"}).status_code == 302


def test_csrf_is_enforced_on_stream_actions(django_user_model):
    store.append("ops/csrf", {"type": "a"})
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_superuser("root2", password="x"))
    assert client.post(stream_url("ops/csrf"), {"action": "verify"}).status_code == 403
    page = client.get(stream_url("ops/csrf"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    ok = client.post(stream_url("ops/csrf"), {"action": "verify", "csrfmiddlewaretoken": token})
    assert ok.status_code == 200 and ok.context["verification"].ok


def test_receipts_and_streams_cannot_be_added_changed_or_deleted(admin_client):
    [r] = store.append("ops/locked", {"type": "a", "v": 1})
    for model in ("receipt", "stream"):
        assert admin_client.get(reverse(f"admin:receipts_{model}_add")).status_code == 403
    assert (
        admin_client.get(reverse("admin:receipts_receipt_delete", args=(r.seq,))).status_code == 403
    )
    assert (
        admin_client.post(
            reverse("admin:receipts_receipt_delete", args=(r.seq,)), {"post": "yes"}
        ).status_code
        == 403
    )
    assert (
        admin_client.get(
            reverse("admin:receipts_stream_delete", args=(quote("ops/locked"),))
        ).status_code
        == 403
    )
    change = reverse("admin:receipts_receipt_change", args=(r.seq,))
    assert admin_client.post(change, {"body": '{"type": "x"}'}).status_code == 403
    for url in (STREAMS, RECEIPTS):
        page = admin_client.get(url).content.decode()
        assert "delete_selected" not in page and 'name="action"' not in page
        assert reverse("admin:receipts_receipt_add") not in page
        assert reverse("admin:receipts_stream_add") not in page
    assert ReceiptRow.objects.get(seq=r.seq).body == {"type": "a", "v": 1}
    assert store.verify("ops/locked").ok


# ---- Receipts changelist and detail --------------------------------------------------------


def test_receipt_changelist_is_newest_first_and_searches_by_stream_prefix(admin_client):
    a = store.append("rc/a", [{"type": "one"}, {"type": "two"}])
    b = store.append("rc/b", {"type": "three"})
    store.append("zz/rc/c", {"type": "four"})
    store.append("RC/d", {"type": "five"})
    response = admin_client.get(RECEIPTS, {"q": "rc/"})
    seqs = [row.seq for row in response.context["cl"].result_list]
    assert seqs == [b[0].seq, a[1].seq, a[0].seq]
    page = response.content.decode()
    assert f'<a href="{stream_url("rc/a")}?after=0#r2">rc/a</a>' in page
    assert '<span class="rcpt-type">two</span>' in page
    everything = [row.seq for row in admin_client.get(RECEIPTS).context["cl"].result_list]
    assert everything == sorted(everything, reverse=True) and len(everything) == 5


def test_receipt_detail_is_read_only_and_shows_the_whole_receipt(admin_client):
    [first, r] = store.append(
        "rc/detail", [{"type": "a"}, {"type": "b", "x": [1, 2]}], context={"actor": "bob"}
    )
    response = admin_client.get(reverse("admin:receipts_receipt_change", args=(r.seq,)))
    assert response.status_code == 200
    page = text(response)
    assert r.hash in page and first.hash in page and r.id in page
    assert '"x": [\n    1,\n    2\n  ]' in page and '"actor": "bob"' in page
    assert "<textarea" not in page and 'name="_save"' not in page
    assert f'href="{stream_url("rc/detail")}?after=0#r2"' in response.content.decode()
