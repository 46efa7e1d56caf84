"""`receipts verify` holds each chain against its stream row (issue 31 item 8): rows
removed, moved or reordered behind the store's back are reported as `BROKEN <stream>:
<reason>` with a non-zero exit under --strict, on both databases. The admin's verify and
retention's check before a prune use the same comparison."""

from __future__ import annotations

import html
import json
import re
import threading
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.urls import reverse

from jobs import queue, retention
from jobs.core.retention import Windows
from jobs.core.state import Fence
from jobs.models import Job
from receipts import append, store
from receipts.core.retention import DAY_MS
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow
from receipts.models import Tombstone
from tests.conftest import run_in_threads

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]

NOW = 1_900_000_000_000
AUTH = {"userId": "u-1", "organizationId": "org-1"}


def active_job(now: int = NOW) -> str:
    """An enqueued, leased and started job: its stream is live (3 receipts)."""
    job_id = queue.enqueue("factory", {"kind": "factory.run", "authContext": AUTH}, now_ms=now)
    job = job_id.job.job_id
    assert queue.lease(job, worker_id="chat:h:1", now_ms=now + 1, start=True).applied
    return job


def verify(*args: str) -> tuple[int, str]:
    """`receipts verify --strict <args>`: its exit code (0, or CommandError's) and output."""
    out = StringIO()
    try:
        call_command("receipts", "verify", "--strict", *args, stdout=out)
    except CommandError as error:
        return error.returncode, out.getvalue()
    return 0, out.getvalue()


def broken_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("BROKEN ")]


def swap(stream: str, first: int, second: int) -> None:
    """Swap the positions of two receipts (through a free position: the pair is unique)."""
    with transaction.atomic():
        rows = ReceiptRow.objects.filter(stream=stream)
        rows.filter(stream_seq=first).update(stream_seq=-1)
        rows.filter(stream_seq=second).update(stream_seq=first)
        rows.filter(stream_seq=-1).update(stream_seq=second)


# ---- what was missed: the two cases ---------------------------------------------------


def test_deleting_the_newest_receipt_of_an_active_job_is_a_truncated_stream():
    job = active_job()
    other = active_job(NOW + 10)
    stream = f"jobs/{job}"
    assert verify()[0] == 0
    count = store.stream_info(stream).count
    ReceiptRow.objects.filter(stream=stream, stream_seq=count).delete()
    code, output = verify()
    assert code == 1
    assert broken_lines(output) == [
        f"BROKEN {stream}: truncated: the chain ends after {count - 1} receipt(s) but the "
        f"stream row counts {count} (the newest 1 missing)"
    ]
    assert f"jobs/{other}" not in output
    assert re.search(r"verified \d+ stream\(s\), 1 broken", output)


def test_deleting_every_receipt_of_an_active_job_keeping_its_rows_is_an_emptied_stream():
    job = active_job()
    stream = f"jobs/{job}"
    count = store.stream_info(stream).count
    ReceiptRow.objects.filter(stream=stream).delete()
    assert StreamRow.objects.filter(name=stream).exists() and Job.objects.filter(pk=job).exists()
    code, output = verify()
    assert code == 1
    assert broken_lines(output) == [
        f"BROKEN {stream}: emptied: the stream row counts {count} receipt(s) but none are stored"
    ]
    # the same under a prefix, for the one stream, and as JSON
    assert verify("jobs/")[0] == verify(stream)[0] == 1
    code, output = verify(stream, "--json")
    report = json.loads(output)
    assert code == 1 and not report["ok"]
    assert [(b["stream"], b["reason"].split(":")[0], b["index"]) for b in report["broken"]] == [
        (stream, "emptied", None)
    ]


# ---- moved and reordered receipts, a missing stream row ---------------------------------------


def test_a_receipt_moved_to_another_stream_is_reported_in_both():
    store.append("t/from", [{"type": "a"}, {"type": "b"}, {"type": "c"}])
    store.append("t/to", [{"type": "x"}])
    ReceiptRow.objects.filter(stream="t/from", stream_seq=3).update(stream="t/to", stream_seq=2)
    code, output = verify("t/")
    assert code == 1
    assert broken_lines(output) == [
        "BROKEN t/from: truncated: the chain ends after 2 receipt(s) but the stream row "
        "counts 3 (the newest 1 missing)",
        "BROKEN t/to: moved: receipt #2 was sealed for stream 't/from' at index 1",
    ]


def test_a_receipt_moved_out_of_the_middle_leaves_a_named_gap():
    store.append("t/middle", [{"type": "a"}, {"type": "b"}, {"type": "c"}])
    store.append("t/other", [{"type": "x"}])
    ReceiptRow.objects.filter(stream="t/middle", stream_seq=2).update(
        stream="t/other", stream_seq=2
    )
    code, output = verify("t/middle")
    assert (code, broken_lines(output)) == (
        1,
        ["BROKEN t/middle: missing receipt: #2 is not stored at index 1"],
    )


def test_a_reordered_pair_is_reported_as_reordered():
    store.append("t/order", [{"type": t} for t in "abcd"])
    swap("t/order", 2, 3)
    code, output = verify("t/order")
    assert (code, broken_lines(output)) == (
        1,
        [
            "BROKEN t/order: reordered: receipts #2 and #3 are stored in each other's place "
            "at index 1"
        ],
    )


def test_receipts_whose_stream_row_is_missing_are_a_broken_stream():
    store.append("t/rowless", [{"type": "a"}, {"type": "b"}])
    store.append("t/sound", {"type": "a"})
    StreamRow.objects.filter(name="t/rowless").delete()
    expected = ["BROKEN t/rowless: stream row missing: 2 receipt(s) stored without it"]
    for target in ("", "t/", "t/rowless"):
        code, output = verify(*[target] if target else [])
        assert (code, broken_lines(output)) == (1, expected), target
    assert "verified 2 stream(s), 1 broken" in verify("t/")[1]
    assert store.verify("t/rowless").reason == expected[0].split(": ", 1)[1]


@pytest.mark.parametrize(
    ("edit", "keyword"),
    [
        ({"head": "0" * 64}, "head mismatch"),
        ({"last_ts": 1}, "last timestamp mismatch"),
        ({"receipt_count": 1}, "receipts past the stream row"),
        ({"receipt_count": 5}, "truncated"),
    ],
)
def test_a_stream_row_that_disagrees_with_its_chain_is_reported(edit, keyword):
    store.append("t/row", [{"type": "a"}, {"type": "b"}])
    StreamRow.objects.filter(name="t/row").update(**edit)
    code, output = verify("t/row")
    assert code == 1
    [line] = broken_lines(output)
    assert line.startswith(f"BROKEN t/row: {keyword}: ")


def test_an_emptied_stream_whose_row_was_zeroed_too_is_reported():
    job = active_job()
    stream = f"jobs/{job}"
    ReceiptRow.objects.filter(stream=stream).delete()
    StreamRow.objects.filter(name=stream).update(receipt_count=0, head=None, last_ts=None)
    code, output = verify("jobs/")
    assert (code, broken_lines(output)) == (
        1,
        [
            f"BROKEN {stream}: empty stream row: it counts no receipts, and the store never "
            "keeps one"
        ],
    )


def test_every_kind_of_fault_is_reported_in_one_run_with_distinct_reasons():
    store.append("m/trunc", [{"type": "a"}, {"type": "b"}])
    store.append("m/empty", [{"type": "a"}])
    store.append("m/order", [{"type": t} for t in "abc"])
    store.append("m/from", [{"type": "a"}, {"type": "b"}])
    store.append("m/to", [{"type": "a"}])
    store.append("m/sound", [{"type": "a"}])
    ReceiptRow.objects.filter(stream="m/trunc", stream_seq=2).delete()
    ReceiptRow.objects.filter(stream="m/empty").delete()
    swap("m/order", 1, 2)
    ReceiptRow.objects.filter(stream="m/from", stream_seq=2).update(stream="m/to", stream_seq=2)
    code, output = verify("m/")
    reasons = {
        line.split(": ")[0][len("BROKEN ") :]: line.split(": ")[1] for line in broken_lines(output)
    }
    assert code == 1
    assert reasons == {
        "m/trunc": "truncated",
        "m/empty": "emptied",
        "m/order": "reordered",
        "m/from": "truncated",
        "m/to": "moved",
    }
    assert "verified 6 stream(s), 5 broken" in output


# ---- what is not broken -------------------------------------------------------------------------


def test_sound_streams_and_a_pruned_stream_verify():
    settled = queue.enqueue(
        "factory", {"kind": "factory.run", "authContext": AUTH}, now_ms=NOW - 40 * DAY_MS
    ).job.job_id
    queue.lease(settled, worker_id="w", now_ms=NOW - 40 * DAY_MS)
    queue.complete(settled, {"ok": True}, fence=Fence("w", 1), now_ms=NOW - 40 * DAY_MS)
    active_job()
    retention.prune(now_ms=NOW, windows=Windows(default_days=30, watchdog_days=2, control_days=7))
    assert Tombstone.objects.filter(stream=f"jobs/{settled}").exists()
    code, output = verify()
    assert (code, broken_lines(output)) == (0, [])
    assert ", 0 broken" in output and "RETENTION" not in output


def test_a_receipt_appended_between_the_walk_and_the_row_read_is_no_fault(monkeypatch):
    """The store reads the row after the receipts: an append in between is counted by the
    row, and the walk reads on to it."""
    store.append("t/live", [{"type": "a"}, {"type": "b"}])
    read_row = store.stream_info

    def append_first(name: str) -> Any:
        store.append(name, {"type": "c"})
        return read_row(name)

    monkeypatch.setattr(append, "stream_info", append_first)
    result = store.verify("t/live")
    assert (result.ok, result.count) == (True, 3)


@pytest.mark.django_db(transaction=True)
def test_verify_beside_a_live_writer_never_reports_a_fault(monkeypatch):
    """Real interleavings: one thread appends while two verify the stream over and over
    (pages of 4, so a walk spans several reads). Every answer is ok."""
    monkeypatch.setattr(append, "VERIFY_PAGE", 4)
    store.append("race/verify", {"type": "start"})
    done = threading.Event()
    answers: list[list[Any]] = [[], [], []]

    def work(i: int) -> None:
        if i == 0:
            try:
                for j in range(60):
                    store.append("race/verify", {"type": "tick", "j": j})
            finally:
                done.set()
            return
        while not done.is_set() or not answers[i]:
            answers[i].append(store.verify("race/verify"))

    run_in_threads(3, work)
    seen = answers[1] + answers[2]
    assert seen and [r.describe() for r in seen if not r.ok] == []
    assert store.verify("race/verify").count == 61


def test_a_stream_pruned_between_the_walk_and_the_row_read_is_no_fault(monkeypatch):
    store.append("t/going", [{"type": "a"}, {"type": "b"}])
    read_row = store.stream_info

    def remove_first(name: str) -> Any:
        ReceiptRow.objects.filter(stream=name).delete()
        StreamRow.objects.filter(name=name).delete()
        return read_row(name)

    monkeypatch.setattr(append, "stream_info", remove_first)
    assert store.verify("t/going").ok


def test_verify_walks_the_streams_page_by_page(monkeypatch):
    monkeypatch.setattr(append, "VERIFY_PAGE", 2)
    for name in ("p/a", "p/b", "p/c", "p/d", "p/e"):
        store.append(name, {"type": "a"})
    ReceiptRow.objects.filter(stream="p/d").delete()
    assert list(store.stream_names("p/")) == ["p/a", "p/b", "p/c", "p/d", "p/e"]
    code, output = verify("p/")
    assert code == 1 and "verified 5 stream(s), 1 broken" in output
    assert [line.split(":")[0] for line in broken_lines(output)] == ["BROKEN p/d"]


# ---- the same comparison in the admin and before a prune --------------------------------------


def page_words(response: Any) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html.unescape(response.content.decode())).split())


def test_the_admin_verify_of_a_job_and_of_a_stream_reports_a_truncated_chain(admin_client):
    job = active_job()
    stream = f"jobs/{job}"
    count = store.stream_info(stream).count
    ReceiptRow.objects.filter(stream=stream, stream_seq=count).delete()
    expected = (
        f"Chain broken: truncated: the chain ends after {count - 1} receipt(s) but the stream "
        f"row counts {count} (the newest 1 missing)"
    )
    job_page = admin_client.post(
        reverse("admin:jobs_job_change", args=(quote(job),)), {"action": "verify"}
    )
    assert job_page.status_code == 200 and expected in page_words(job_page)
    assert "rcpt-row-broken" not in job_page.content.decode()  # no stored receipt is to blame
    stream_page = admin_client.post(
        reverse("admin:receipts_stream_change", args=(quote(stream),)), {"action": "verify"}
    )
    assert expected in page_words(stream_page)
    assert "at index" not in page_words(stream_page)


def test_the_prune_refuses_a_settled_stream_that_disagrees_with_its_row():
    at = NOW - 40 * DAY_MS
    jobs = []
    for _ in range(2):
        job = queue.enqueue(
            "factory", {"kind": "factory.run", "authContext": AUTH}, now_ms=at
        ).job.job_id
        queue.lease(job, worker_id="w", now_ms=at)
        queue.complete(job, {"ok": True}, fence=Fence("w", 1), now_ms=at)
        jobs.append(job)
    edited = f"jobs/{jobs[0]}"
    StreamRow.objects.filter(name=edited).update(last_ts=1)
    report = retention.prune(
        now_ms=NOW, windows=Windows(default_days=30, watchdog_days=2, control_days=7)
    )
    assert report.acted == 1 and report.skipped == 1
    assert report.errors == [
        f"{edited}: not pruned, its chain does not verify (last timestamp mismatch: the newest "
        f"receipt has ts {at} but the stream row says 1)"
    ]
    assert store.stream_info(edited) is not None  # the evidence stays
    assert not Tombstone.objects.filter(stream=edited).exists()


def test_replay_refuses_a_truncated_stream_rather_than_rebuild_it():
    job = active_job()
    stream = f"jobs/{job}"
    count = store.stream_info(stream).count
    before = Job.objects.get(pk=job).status
    ReceiptRow.objects.filter(stream=stream, stream_seq=count).delete()
    with pytest.raises(CommandError, match=f"'{stream}': truncated: .*missing\\)$"):
        call_command("receipts", "replay", stream, stdout=StringIO())
    assert Job.objects.get(pk=job).status == before  # the read model still shows it
