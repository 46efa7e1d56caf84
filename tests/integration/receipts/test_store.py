"""S-3 to S-9 on a real database (both backends)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from receipts import registry, store
from receipts.core.chain import fold
from receipts.errors import ExpectedPrevMismatch, InvalidEvent, ReplayRefused
from receipts.models import Receipt as ReceiptRow
from receipts.models import Stream as StreamRow
from tests.conftest import run_in_threads
from tests.support import present

pytestmark = pytest.mark.django_db


def counter(state, receipt):
    state = dict(state or {"n": 0, "types": []})
    return {"n": state["n"] + 1, "types": [*state["types"], receipt.type]}


class MemoryProjector:
    """A read model kept in a dict; records whether it ran inside the append transaction."""

    name = "memory"

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.saw_transaction: list[bool] = []

    def apply(self, handle, receipts):
        self.saw_transaction.append(connection.in_atomic_block)
        for r in receipts:
            if r.body.get("explode"):
                raise RuntimeError("projector failed")
        self.rows[handle.name] = self.compute(handle.name, store.read(handle.name))

    def snapshot(self, stream):
        return self.rows.get(stream)

    def compute(self, stream, receipts):
        return fold(receipts, counter) if receipts else None

    def write(self, stream, row):
        self.rows[stream] = row


@pytest.fixture
def memory_family():
    projector = MemoryProjector()
    registry.register(registry.StreamFamily("test/", "test", reducer=counter, projector=projector))
    yield projector
    registry.unregister("test/")


def test_append_writes_chained_receipts_and_moves_the_head():
    first = store.append("s/a", {"type": "one"}, now_ms=1000)
    second = store.append("s/a", [{"type": "two"}, {"type": "three"}], now_ms=2000)
    assert first[0].prev is None
    assert second[0].prev == first[0].hash and second[1].prev == second[0].hash
    assert [r.stream_seq for r in [*first, *second]] == [1, 2, 3]
    info = store.stream_info("s/a")
    assert info.head == second[1].hash and info.count == 3 and info.last_ts == 2000
    assert [r.type for r in store.read("s/a")] == ["one", "two", "three"]
    assert store.read("s/a") == [*first, *second]
    assert store.verify("s/a").ok


def test_expected_prev_mismatch_names_both_hashes_and_writes_nothing():
    [r] = store.append("s/b", {"type": "one"})
    with pytest.raises(ExpectedPrevMismatch) as caught:
        store.append("s/b", {"type": "two"}, expected_prev="f" * 64)
    assert str(caught.value) == f"Expected prev hash {'f' * 64} but head is {r.hash}"
    assert store.stream_info("s/b").count == 1
    store.append("s/b", {"type": "two"}, expected_prev=r.hash)
    assert store.stream_info("s/b").count == 2


def test_expected_prev_none_means_the_stream_must_be_new():
    store.append("s/new", {"type": "one"}, expected_prev=None)
    with pytest.raises(ExpectedPrevMismatch):
        store.append("s/new", {"type": "again"}, expected_prev=None)


def test_event_id_makes_an_append_idempotent():
    first = store.append("s/c", {"type": "cmd"}, event_id="evt-1")
    again = store.append("s/c", {"type": "cmd", "different": True}, event_id="evt-1")
    assert again == first
    assert first[0].hints == {"eventId": "evt-1"}
    assert store.stream_info("s/c").count == 1


def test_event_ids_of_several_events_are_suffixed_and_the_whole_command_is_skipped():
    first = store.append("s/d", [{"type": "a"}, {"type": "b"}], event_id="cmd-9")
    assert [present(r.hints)["eventId"] for r in first] == ["cmd-9#0", "cmd-9#1"]
    assert store.append("s/d", [{"type": "a"}, {"type": "b"}], event_id="cmd-9") == first
    assert store.stream_info("s/d").count == 2


def test_idempotent_retry_wins_over_a_moved_head():
    [r] = store.append("s/e", {"type": "a"}, event_id="x", expected_prev=None)
    store.append("s/e", {"type": "b"})
    assert store.append("s/e", {"type": "a"}, event_id="x", expected_prev=None) == [r]


@pytest.mark.parametrize(
    ("events", "message"),
    [
        ({"no_type": 1}, "string 'type'"),
        ({"type": "x", "n": float("nan")}, r"non-finite number nan is not JSON at \$\.body\.n"),
        ([], "at least one event"),
        (
            [{"type": "ok"}, {"type": "x", "when": {1, 2}}],
            r"type set is not JSON at \$\.body\.when",
        ),
    ],
)
def test_bad_events_are_refused_and_nothing_is_written(events, message):
    with pytest.raises(InvalidEvent, match=message):
        store.append("s/bad", events)
    assert store.stream_info("s/bad") is None
    assert not ReceiptRow.objects.filter(stream="s/bad").exists()


def test_bad_stream_names_are_refused():
    for name in ["", "has space", "x" * 256, "tab\there"]:
        with pytest.raises(InvalidEvent):
            store.append(name, {"type": "x"})


def test_append_inside_a_rolled_back_transaction_leaves_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        store.append("s/rb", {"type": "a"})
        raise RuntimeError("caller failed")
    assert store.stream_info("s/rb") is None


def test_projector_runs_inside_the_append_transaction(memory_family):
    store.append("test/1", [{"type": "a"}, {"type": "b"}])
    assert memory_family.saw_transaction == [True]
    assert memory_family.rows["test/1"] == {"n": 2, "types": ["a", "b"]}


def test_projector_failure_rolls_the_append_back(memory_family):
    store.append("test/2", {"type": "a"})
    with pytest.raises(RuntimeError, match="projector failed"):
        store.append("test/2", {"type": "b", "explode": True})
    assert store.stream_info("test/2").count == 1
    assert [r.type for r in store.read("test/2")] == ["a"]


def test_fold_and_state_at_use_the_registered_reducer(memory_family):
    store.append("test/3", [{"type": "a"}, {"type": "b"}, {"type": "c"}])
    assert store.fold("test/3") == {"n": 3, "types": ["a", "b", "c"]}
    assert store.state_at("test/3", 2) == {"n": 2, "types": ["a", "b"]}
    assert store.state_at("test/3", 0) is None
    with pytest.raises(LookupError, match="no reducer registered"):
        store.fold("other/1")


def tamper(stream: str, stream_seq: int, body: dict) -> None:
    # Application code never updates receipts; a test stands in for an attacker or bad disk.
    ReceiptRow.objects.filter(stream=stream, stream_seq=stream_seq).update(body=body)


def test_tampered_body_is_reported_at_its_index_and_replay_refuses(memory_family):
    store.append("test/4", [{"type": "a"}, {"type": "b", "amount": 1}, {"type": "c"}])
    tamper("test/4", 2, {"type": "b", "amount": 1000})
    result = store.verify("test/4")
    assert not result.ok and result.index == 1 and result.reason == "hash mismatch"
    with pytest.raises(ReplayRefused) as caught:
        store.replay("test/4")
    assert str(caught.value) == (
        "refused to replay invalid chain for stream 'test/4': hash mismatch at index 1"
    )


def test_rebuild_reports_drift_and_repairs_the_row(memory_family):
    store.append("test/5", [{"type": "a"}, {"type": "b"}])
    memory_family.rows["test/5"] = {"n": 7, "types": ["a", "b"]}
    report = store.replay("test/5")
    assert [d.stream for d in report.drift] == ["test/5"]
    assert report.drift[0].fields == ["n"]
    assert report.drift[0].to_wire()["before"] == {"n": 7}
    assert memory_family.rows["test/5"] == {"n": 2, "types": ["a", "b"]}
    assert store.replay("test/5").drift == []


def test_replay_of_a_prefix_lists_refused_streams(memory_family):
    store.append("test/p/1", {"type": "a"})
    store.append("test/p/2", {"type": "a"})
    tamper("test/p/2", 1, {"type": "z"})
    report = store.replay("test/p/")
    assert report.checked == 1
    assert [v.stream for v in report.refused] == ["test/p/2"]


def test_list_streams_pages_by_name():
    for i in range(5):
        store.append(f"page/{i}", {"type": "x"})
    first = store.list_streams("page/", limit=2)
    rest = store.list_streams("page/", after=first[-1].name, limit=10)
    assert [s.name for s in first + rest] == [f"page/{i}" for i in range(5)]


def test_read_global_follows_the_global_sequence():
    store.append("g/1", {"type": "a"})
    store.append("g/2", {"type": "b"})
    store.append("g/1", {"type": "c"})
    everything = store.read_global(after_seq=0)
    assert [r.type for r in everything][-3:] == ["a", "b", "c"]
    seqs = [present(r.seq) for r in everything]
    assert seqs == sorted(seqs)
    assert [r.type for r in store.read_global(after_seq=seqs[-3], prefix="g/1")] == ["c"]


def test_no_application_path_updates_stream_rows_without_receipts():
    store.append("s/z", {"type": "a"})
    with store.open_stream("s/never"):
        pass  # opened, nothing appended: no empty stream is left behind
    assert StreamRow.objects.filter(name="s/never").count() == 0


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3), min_size=1, max_size=6
    ),
    n=st.integers(0, 20),
)
def test_any_sequence_of_appends_verifies_and_state_at_matches_fold(memory_family, batches, n):
    stream = f"test/prop/{id(batches)}-{n}"
    for batch in batches:
        store.append(stream, [{"type": t} for t in batch])
    receipts = store.read(stream)
    assert store.verify(stream).ok
    assert store.state_at(stream, n) == fold(receipts[:n], counter)
    assert memory_family.rows[stream] == fold(receipts, counter)


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_to_one_stream_never_fork_or_lose_a_receipt():
    def work(i):
        for j in range(10):
            store.append("race/1", {"type": "tick", "thread": i, "j": j})

    run_in_threads(4, work)
    receipts = store.read("race/1")
    assert len(receipts) == 40
    assert store.verify("race/1").ok
    assert store.stream_info("race/1").count == 40
    assert {(r.body["thread"], r.body["j"]) for r in receipts} == {
        (i, j) for i in range(4) for j in range(10)
    }


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_with_one_event_id_write_once():
    results = run_in_threads(
        4, lambda i: store.append("race/2", {"type": "cmd", "i": i}, event_id="same")
    )
    assert store.stream_info("race/2").count == 1
    assert len({r[0].hash for r in results}) == 1


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_append_notifies_listeners_on_postgres(receipt_listener):
    listener = receipt_listener
    [r] = store.append("notify/1", {"type": "ping"})
    payloads = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert payloads == [f"{r.seq} notify/1 ping"]


def test_a_second_receipt_with_an_existing_hash_is_refused():
    """S-3: the hash is unique, and a receipt is found by its hash."""
    first = store.append("unique/a", [{"type": "t"}])[0]
    row = ReceiptRow.objects.get(hash=first.hash)
    assert (row.stream, row.stream_seq) == ("unique/a", 1)
    twin = {
        f.attname: getattr(row, f.attname)
        for f in ReceiptRow._meta.concrete_fields
        if f.attname != "seq"
    }
    twin.update(stream="unique/b", receipt_id="r-twin")
    with pytest.raises(IntegrityError), transaction.atomic():
        ReceiptRow.objects.create(**twin)
    assert ReceiptRow.objects.filter(hash=first.hash).count() == 1
