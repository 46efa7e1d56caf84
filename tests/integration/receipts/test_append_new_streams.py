"""store.append_new_streams: many new streams, each with its first receipt, set-based;
exactly what single appends with expected_prev=None write, and refused like them
(S-3 to S-9, T-1; both backends)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from receipts import append as single
from receipts import new_streams as opening
from receipts import registry, store, writer
from receipts.errors import ExpectedPrevMismatch, InvalidEvent
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow
from receipts.store import NewStream
from tests.conftest import run_in_threads
from tests.integration.receipts.test_store import MemoryProjector, counter
from tests.support import present

pytestmark = pytest.mark.django_db
T0 = 1_800_000_000_000


class Randomness:
    """Stands in for `secrets` in the store's modules: the same hex stream however it is asked
    for (16 chars per receipt one at a time, or all of a batch at once)."""

    def __init__(self) -> None:
        self.drawn = 0

    def token_hex(self, nbytes: int) -> str:
        out = "".join(f"{(self.drawn + i) % 256:02x}" for i in range(nbytes))
        self.drawn += nbytes
        return out


def same_randomness(monkeypatch: pytest.MonkeyPatch) -> None:
    """One `Randomness` for both modules of the store that draw receipt ids."""
    randomness = Randomness()
    monkeypatch.setattr(single, "secrets", randomness)
    monkeypatch.setattr(opening, "secrets", randomness)


def new_streams(prefix: str, n: int) -> list[NewStream]:
    return [
        NewStream(
            f"{prefix}{i}",
            {"type": "opened", "i": i, "text": "é ü"},
            {"who": "t"} if i % 2 else None,
        )
        for i in range(n)
    ]


def stored(names: list[str]) -> dict[str, object]:
    """Everything the store and the read model hold for `names`, raw JSON text included."""
    columns = (
        "stream, stream_seq, receipt_id, ts, prev, hash, event_type, body, context, hints, event_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM receipt_receipt WHERE stream IN "
            f"({', '.join(['%s'] * len(names))}) ORDER BY seq",
            names,
        )
        receipts = cursor.fetchall()
    streams = list(
        StreamRow.objects.filter(name__in=names)
        .order_by("name")
        .values_list("name", "head", "receipt_count", "last_ts", "updated_at")
    )
    return {"receipts": receipts, "streams": streams}


def both_ways(monkeypatch, new: list[NewStream]) -> tuple[dict, dict]:
    """What single appends store, then (rolled back first) what one batch stores."""
    names = [s.name for s in new]

    class Undo(Exception):
        pass

    same_randomness(monkeypatch)
    single: dict = {}
    with pytest.raises(Undo), transaction.atomic():
        for s in new:
            store.append(s.name, s.body, expected_prev=None, context=s.context, now_ms=T0)
        single = stored(names)
        raise Undo
    same_randomness(monkeypatch)
    with transaction.atomic():
        store.append_new_streams(new, now_ms=T0)
    return single, stored(names)


@pytest.fixture
def memory_family():
    projector = MemoryProjector()
    registry.register(registry.StreamFamily("test/", "test", reducer=counter, projector=projector))
    yield projector
    registry.unregister("test/")


class BulkProjector(MemoryProjector):
    """A projector with `apply_many`: records each call's streams."""

    def __init__(self):
        super().__init__()
        self.batches: list[list[str]] = []

    def apply_many(self, batch):
        self.batches.append([handle.name for handle, _ in batch])
        for handle, receipts in batch:
            assert [r.stream_seq for r in receipts] == [1] and receipts[0].seq is not None
            handle.cache["seen"] = receipts[0].hash
            self.rows[handle.name] = self.compute(handle.name, receipts)


@pytest.fixture
def bulk_family():
    projector = BulkProjector()
    registry.register(registry.StreamFamily("bulk/", "bulk", reducer=counter, projector=projector))
    yield projector
    registry.unregister("bulk/")


def test_a_batch_stores_byte_for_byte_what_single_appends_store(monkeypatch):
    single, batch = both_ways(monkeypatch, new_streams("same/", 7))
    assert len(batch["receipts"]) == 7 and len(batch["streams"]) == 7
    assert batch == single


def test_chunk_boundaries_change_nothing(monkeypatch):
    monkeypatch.setattr(opening, "_CHUNK", 3)
    monkeypatch.setattr(writer, "MAX_PARAMS", 23)  # SQLite: 4 stream rows, 2 receipts a statement
    single, batch = both_ways(monkeypatch, new_streams("chunks/", 11))
    assert len(batch["receipts"]) == 11
    assert batch == single


def test_handles_hold_the_positioned_receipts_in_order_and_chains_verify():
    handles = store.append_new_streams(new_streams("order/", 5), now_ms=T0)
    assert [h.name for h in handles] == [f"order/{i}" for i in range(5)]
    seqs = [present(h.appended[0].seq) for h in handles]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5  # global order = request order
    for h in handles:
        [receipt] = h.appended
        assert (receipt.stream_seq, receipt.prev, receipt.ts) == (1, None, T0)
        assert (h.head, h.count, h.existed) == (receipt.hash, 1, False)
        assert store.read(h.name) == [receipt]
        assert store.verify(h.name).ok
        info = store.stream_info(h.name)
        assert (info.head, info.count, info.last_ts) == (receipt.hash, 1, T0)


def test_the_streams_take_further_single_appends():
    [handle] = store.append_new_streams([NewStream("more/1", {"type": "a"})])
    [second] = store.append("more/1", {"type": "b"}, expected_prev=handle.head)
    assert second.prev == handle.head and second.stream_seq == 2
    assert store.verify("more/1").ok


def test_a_projector_without_apply_many_runs_apply_per_stream(memory_family):
    store.append_new_streams(new_streams("test/", 3), now_ms=T0)
    assert memory_family.saw_transaction == [True, True, True]
    assert memory_family.rows == {f"test/{i}": {"n": 1, "types": ["opened"]} for i in range(3)}


def test_a_projector_with_apply_many_gets_the_whole_batch_once(bulk_family, memory_family):
    new = [*new_streams("bulk/", 3), *new_streams("test/", 2), NewStream("plain/1", {"type": "x"})]
    handles = store.append_new_streams(new, now_ms=T0)
    assert bulk_family.batches == [["bulk/0", "bulk/1", "bulk/2"]]
    assert [h.cache.get("seen") for h in handles[:3]] == [h.head for h in handles[:3]]
    assert set(memory_family.rows) == {"test/0", "test/1"}


@pytest.mark.parametrize(("chunk", "taken"), [(250, 2), (2, 0), (2, 2), (3, 6)])
def test_a_stream_that_has_receipts_is_refused_and_nothing_of_the_batch_stays(
    monkeypatch, chunk, taken
):
    monkeypatch.setattr(opening, "_CHUNK", chunk)  # taken: in the first, a middle, the last chunk
    [existing] = store.append(f"taken/{taken}", {"type": "first"})
    with pytest.raises(ExpectedPrevMismatch) as caught:
        store.append_new_streams(new_streams("taken/", 7))
    assert (caught.value.expected, caught.value.head) == (None, existing.hash)
    assert str(caught.value) == f"Expected prev hash None but head is {existing.hash}"
    assert ReceiptRow.objects.filter(stream__startswith="taken/").count() == 1
    assert StreamRow.objects.filter(name__startswith="taken/").count() == 1
    assert store.stream_info(f"taken/{taken}").head == existing.hash


def test_a_refusal_inside_the_callers_transaction_leaves_it_usable():
    store.append("keep/0", {"type": "first"})
    with transaction.atomic():
        with pytest.raises(ExpectedPrevMismatch):
            store.append_new_streams(new_streams("keep/", 3))
        store.append("keep/after", {"type": "still works"})
    assert store.stream_info("keep/after").count == 1
    assert store.stream_info("keep/1") is None


def test_a_name_twice_in_one_batch_is_refused_like_a_second_append():
    new = [
        NewStream("twice/a", {"type": "x"}),
        NewStream("twice/b", {"type": "x"}),
        NewStream("twice/a", {"type": "y"}),
    ]
    with pytest.raises(ExpectedPrevMismatch):
        store.append_new_streams(new)
    assert not StreamRow.objects.filter(name__startswith="twice/").exists()
    assert not ReceiptRow.objects.filter(stream__startswith="twice/").exists()


def test_an_empty_stream_row_held_in_this_transaction_is_appended_to_as_a_single_append_would():
    with transaction.atomic(), store.open_stream("held/1") as held:
        assert not held.existed
        handles = store.append_new_streams(new_streams("held/", 3), now_ms=T0)
    assert [h.name for h in handles] == ["held/0", "held/1", "held/2"]
    for h in handles:
        assert store.read(h.name) == h.appended and store.verify(h.name).ok
        assert store.stream_info(h.name).head == h.head


@pytest.mark.parametrize(
    ("new", "message"),
    [
        ([NewStream("bad/1", {"type": "ok"}), NewStream("bad/2", {"no_type": 1})], "string 'type'"),
        ([NewStream("bad/1", {"type": "x", "n": float("nan")})], r"non-finite number nan"),
        ([NewStream("bad/1", {"type": "x" * 101})], "longer than 100"),
        (
            [NewStream("bad/1", {"type": "ok"}), NewStream("has space", {"type": "ok"})],
            "whitespace",
        ),
        ([NewStream("", {"type": "ok"})], "1..255 characters"),
    ],
)
def test_bad_events_and_names_are_refused_and_nothing_is_written(new, message):
    with pytest.raises(InvalidEvent, match=message):
        store.append_new_streams(new)
    assert not StreamRow.objects.filter(name__startswith="bad/").exists()
    assert not ReceiptRow.objects.filter(stream__startswith="bad/").exists()


def test_a_projector_failure_rolls_the_batch_back(memory_family):
    with pytest.raises(RuntimeError, match="projector failed"):
        store.append_new_streams(
            [
                NewStream("test/ok", {"type": "a"}),
                NewStream("test/boom", {"type": "a", "explode": True}),
            ]
        )
    assert not StreamRow.objects.filter(name__startswith="test/").exists()


def test_an_empty_batch_writes_nothing():
    assert store.append_new_streams([]) == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_over_one_name_let_exactly_one_win():
    def work(i):
        try:
            store.append_new_streams(
                [
                    NewStream(f"race/own-{i}", {"type": "a"}),
                    NewStream("race/shared", {"type": "a", "by": i}),
                ]
            )
            return "won"
        except ExpectedPrevMismatch:
            return "refused"

    assert sorted(run_in_threads(2, work)) == ["refused", "won"]
    assert store.stream_info("race/shared").count == 1 and store.verify("race/shared").ok
    assert StreamRow.objects.filter(name__startswith="race/own-").count() == 1


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_each_new_receipt_is_notified_on_postgres(receipt_listener):
    listener = receipt_listener
    handles = store.append_new_streams(
        [NewStream(f"notify/{i}", {"type": "ping"}) for i in range(3)]
    )
    payloads = [n.payload for n in listener.notifies(timeout=5, stop_after=3)]
    assert sorted(payloads) == sorted(f"{h.appended[0].seq} {h.name} ping" for h in handles)


def test_send_new_streams_declines_where_it_cannot_send_ahead(memory_family):
    """Outside a pipelined transaction, on SQLite, or for a read model that cannot join
    the receipts' statement (no `insert_new`), nothing is sent and the caller is told to
    append (None)."""
    from receipts.db import pipelined_transaction

    assert store.send_new_streams(new_streams("ahead/", 2)) is None  # no transaction
    with pipelined_transaction():
        assert store.send_new_streams(new_streams("test/", 2)) is None  # apply only
        assert store.send_new_streams([]) == []
    assert StreamRow.objects.filter(name__startswith="ahead/").count() == 0
    assert StreamRow.objects.filter(name__startswith="test/").count() == 0
    assert memory_family.rows == {}


def test_chunk_bounds_cover_a_run_once_in_order():
    bounds = store.chunk_bounds(601)
    assert [i for start, end in bounds for i in range(start, end)] == list(range(601))
    if connection.vendor == "postgresql":  # a small first chunk, so the server starts soon
        assert bounds[0] == (0, opening._FIRST_CHUNK) and len(bounds) > 1
    else:
        assert bounds == [(0, 601)]
    assert store.chunk_bounds(0) == []


@pytest.mark.postgres_only
def test_send_new_streams_refuses_more_than_a_statement_holds(monkeypatch):
    from receipts.db import pipelined_transaction

    monkeypatch.setattr(opening, "_CHUNK", 2)
    new = [NewStream(f"jobs/too-many-{i}", {"type": "job.enqueued"}) for i in range(3)]
    with pytest.raises(ValueError, match="chunk_bounds"), pipelined_transaction():
        store.send_new_streams(new)
    assert not StreamRow.objects.filter(name__startswith="jobs/too-many-").exists()
