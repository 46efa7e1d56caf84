"""Tampering as an attacker with write access to the database would (issue 36 item 6):
each case is done behind the store's back after a checkpoint was exported, and
`manage.py receipts verify --against <that checkpoint>` must fail naming the receipt and
what happened to it, even where the chains and stream rows were made to agree again."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from jobs import queue
from jobs.models import Job
from receipts import checkpoints, log, store
from receipts.core.chain import seal
from receipts.core.log_tiles import TILE_WIDTH
from receipts.models import LogTile
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("undispatched")]

NOW = 1_900_000_000_000
AUTH = {"userId": "u-1", "organizationId": "org-1"}


def active_job(now: int) -> str:
    """An enqueued, leased and started job: three receipts on jobs/<id>."""
    job = queue.enqueue("factory", {"kind": "factory.run", "authContext": AUTH}, now_ms=now)
    job_id = job.job.job_id
    assert queue.lease(job_id, worker_id="chat:h:1", now_ms=now + 1, start=True).applied
    return job_id


def verify_against(kept: Path) -> tuple[int, list[str]]:
    out = StringIO()
    code = 0
    try:
        call_command("receipts", "verify", "--against", str(kept), stdout=out)
    except CommandError as error:
        code = error.returncode
    return code, out.getvalue().splitlines()


def log_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("LOG ")]


def row(stream: str, n: int) -> ReceiptRow:
    return ReceiptRow.objects.get(stream=stream, stream_seq=n)


def reseal(target: ReceiptRow, *, prev: str | None, body: dict | None = None) -> str:
    """Seal `target` again (after `prev`, with `body`): a rewrite that verifies."""
    new = seal(
        stream=target.stream,
        prev=prev,
        body=body if body is not None else dict(target.body),
        ts=target.ts,
        random_hex16=secrets.token_hex(8),
        context=target.context,
    )
    ReceiptRow.objects.filter(seq=target.seq).update(
        receipt_id=new.id, prev=prev, hash=new.hash, body=new.body, sealed=new.sealed
    )
    return new.hash


@pytest.fixture
def world(tmp_path: Path) -> dict:
    """Three live jobs and a checkpoint of them kept in a file; then one more job after
    the checkpoint (what follows it is not the checkpoint's business)."""
    jobs = [active_job(NOW + i * 10) for i in range(3)]
    log.extend(now_ms=NOW + 100)
    made = checkpoints.make(now_ms=NOW + 100)
    assert made is not None
    kept = tmp_path / "checkpoint.json"
    kept.write_text(json.dumps(made.to_wire()))
    active_job(NOW + 200)
    log.extend(now_ms=NOW + 300)
    streams = [f"jobs/{j}" for j in jobs]
    return {"kept": kept, "jobs": jobs, "streams": streams}


def test_an_untouched_store_extends_its_checkpoint(world):
    code, lines = verify_against(world["kept"])
    assert code == 0, lines
    assert log_lines(lines) == []
    assert lines[-1].startswith("the store extends checkpoint ")
    assert "9 leaves recomputed from their receipts" in lines[-1]


def _edit_body(w: dict) -> str:
    target = row(w["streams"][0], 2)
    ReceiptRow.objects.filter(seq=target.seq).update(body={**target.body, "workerId": "evil"})
    return rf"LOG {w['streams'][0]}#2: leaf \d+: its body is not what its hash seals: edited"


def _edit_sealed(w: dict) -> str:
    target = row(w["streams"][0], 2)
    sealed = target.sealed.replace('"chat:h:1"', '"evil:h:1"')
    ReceiptRow.objects.filter(seq=target.seq).update(sealed=sealed)
    return rf"LOG {w['streams'][0]}#2: leaf \d+: its sealed text no longer hashes to its hash"


def _delete_middle(w: dict) -> str:
    target = row(w["streams"][1], 2)
    target.delete()
    return rf"LOG {w['streams'][1]}#2: leaf \d+ \(seq \d+\): receipt {target.hash[:16]} is gone"


def _delete_newest(w: dict) -> str:
    stream = w["streams"][1]
    target = row(stream, 3)
    target.delete()
    return rf"LOG {stream}#3: leaf \d+ \(seq \d+\): receipt {target.hash[:16]} is gone"


def _empty_stream(w: dict) -> str:
    stream = w["streams"][2]
    newest = row(stream, 3).hash
    ReceiptRow.objects.filter(stream=stream).delete()  # the stream row and job row stay
    return rf"LOG {stream}#3: .*receipt {newest[:16]} is gone from the store: deleted"


def _delete_stream_and_job(w: dict) -> str:
    stream = w["streams"][2]
    first = row(stream, 1).hash
    with transaction.atomic():
        ReceiptRow.objects.filter(stream=stream).delete()
        StreamRow.objects.filter(name=stream).delete()
        Job.objects.filter(id=w["jobs"][2]).delete()
    return rf"LOG receipt {first[:16]}: leaf \d+ \(seq \d+\): receipt {first[:16]} is gone"


def _reorder_positions(w: dict) -> str:
    stream = w["streams"][0]
    with transaction.atomic():
        rows = ReceiptRow.objects.filter(stream=stream)
        rows.filter(stream_seq=2).update(stream_seq=-1)
        rows.filter(stream_seq=3).update(stream_seq=2)
        rows.filter(stream_seq=-1).update(stream_seq=3)
    return rf"LOG {stream}#2: leaf \d+: comes after {stream}#3 in the log: reordered"


def _reorder_commit_order(w: dict) -> str:
    stream = w["streams"][0]
    a, b = row(stream, 2), row(stream, 3)
    with transaction.atomic():
        ReceiptRow.objects.filter(seq=a.seq).update(seq=-a.seq)
        ReceiptRow.objects.filter(seq=b.seq).update(seq=a.seq)
        ReceiptRow.objects.filter(seq=-a.seq).update(seq=b.seq)
    return rf"LOG {stream}#2: leaf \d+: the log has it at seq {a.seq}, the store at seq {b.seq}: reordered"


def _move_between_streams(w: dict) -> str:
    source, target = w["streams"][0], w["streams"][1]
    ReceiptRow.objects.filter(stream=source, stream_seq=3).update(stream=target, stream_seq=4)
    return rf"LOG {target}#4: leaf \d+: sealed on another stream: moved here"


def _rewrite_chain_and_stream_row(w: dict) -> str:
    """Remove the middle receipt, seal the newest again after the first, and make the
    stream row agree: every chain verifies, so only the log can tell."""
    stream = w["streams"][1]
    first, middle, newest = row(stream, 1), row(stream, 2), row(stream, 3)
    with transaction.atomic():
        middle.delete()
        ReceiptRow.objects.filter(seq=newest.seq).update(stream_seq=2)
        head = reseal(row(stream, 2), prev=first.hash)
        StreamRow.objects.filter(name=stream).update(head=head, receipt_count=2)
    assert store.verify(stream).ok  # the chain and its stream row agree again
    return rf"LOG {stream}#2: leaf \d+: the log holds receipt {newest.hash[:16]}, this row is {head[:16]}: rewritten"


def _rewrite_rows_and_leaves(w: dict) -> str:
    """Seal the newest receipt again with another body and write its new hash into the
    log's tile as well: rows and leaves agree, the checkpoint does not."""
    stream = w["streams"][2]
    newest = row(stream, 3)
    with transaction.atomic():
        head = reseal(newest, prev=newest.prev, body={**newest.body, "workerId": "evil"})
        StreamRow.objects.filter(name=stream).update(head=head)
        index = log.leaf_index(newest.seq)
        assert index is not None
        tile = LogTile.objects.get(level=0, number=index // TILE_WIDTH)
        hashes = bytearray(tile.hashes)
        at = (index % TILE_WIDTH) * 32
        hashes[at : at + 32] = bytes.fromhex(head)
        LogTile.objects.filter(level=0, number=tile.number).update(hashes=bytes(hashes))
    assert store.verify(stream).ok
    return r"LOG the log: its stored leaves do not give the checkpoint's root: rewritten"


def _remove_leaves(w: dict) -> str:
    """Truncate the log itself behind the checkpoint."""
    LogTile.objects.filter(level=0).delete()
    return r"LOG leaves 0\.\.\d+: are missing from the log: removed"


TAMPERING: dict[str, Callable[[dict], str]] = {
    "edit a body": _edit_body,
    "edit the sealed text": _edit_sealed,
    "delete a middle receipt": _delete_middle,
    "delete the newest": _delete_newest,
    "empty a stream": _empty_stream,
    "delete a whole stream with its job row": _delete_stream_and_job,
    "reorder two receipts (positions)": _reorder_positions,
    "reorder two receipts (commit order)": _reorder_commit_order,
    "move a receipt between streams": _move_between_streams,
    "rewrite a chain and its stream row": _rewrite_chain_and_stream_row,
    "rewrite receipts and the log's leaves": _rewrite_rows_and_leaves,
    "remove the log's leaves": _remove_leaves,
}


@pytest.mark.parametrize("case", list(TAMPERING))
def test_every_tampering_before_a_kept_checkpoint_is_found_and_named(world, case):
    expected = TAMPERING[case](world)
    code, lines = verify_against(world["kept"])
    assert code == 1, lines
    found = log_lines(lines)
    assert any(re.match(expected, line) for line in found), (expected, found)
    assert lines[-1] != "" and any("does NOT extend" in line for line in lines)


def test_a_checkpoint_signed_by_another_key_or_altered_is_refused(world, tmp_path):
    kept = json.loads(world["kept"].read_text())
    kept["rootHash"] = "0" * 64
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(kept))
    code, lines = verify_against(altered)
    assert code == 1
    assert any("the store's checkpoint of this size is another one" in line for line in lines)


def test_a_file_that_is_not_a_checkpoint_is_refused_by_name(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "receipt.inclusion.v1"}))
    with pytest.raises(CommandError, match=r"bad\.json: not a checkpoint: format is"):
        call_command("receipts", "verify", "--against", str(bad), stdout=StringIO())
