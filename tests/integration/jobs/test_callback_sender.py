"""D-8: a slow callback receiver holds no worker, and no loop either.

The runworker's `Sender` posts claimed rows on daemon threads that do HTTP only; `pump`
(the `callbacks` loop) writes the answers it has and claims only what the sender has
room for. A hung receiver costs the sender's threads, never a pass; a row the sender
has no room for stays due, and every callback is still delivered."""

from __future__ import annotations

import dataclasses

import pytest

from jobs import queue
from jobs.models import Callback
from jobs.runtime import callbacks
from tests.conftest import wait_for
from tests.integration.jobs.callback_receiver import Receiver
from tests.integration.jobs.helpers import payload

pytestmark = pytest.mark.django_db(transaction=True)  # the sender's threads post meanwhile
T = 1_800_000_000_000


@pytest.fixture
def hung(settings):
    """A receiver that takes every post and answers none until `answering` is set."""
    receiver = Receiver().start()
    receiver.answering.clear()
    settings.RECEIPT = dataclasses.replace(
        settings.RECEIPT, resonate_callback_url=None, event_callback_url=receiver.url
    )
    yield receiver
    receiver.answering.set()
    receiver.stop()


def canceled(job_id: str) -> str:
    """A queued job aborted: its `canceled` callback recorded."""
    queue.enqueue("factory", payload(), job_id=job_id, now_ms=T)
    queue.command(job_id, "abort", now_ms=T)
    return job_id


def rows() -> list[tuple[str, str, int]]:
    return list(Callback.objects.order_by("id").values_list("job_id", "state", "attempts"))


def test_a_pump_pass_returns_while_the_receiver_hangs_and_writes_the_answer_later(hung):
    job_id = canceled("cb-hung")
    sender = callbacks.Sender(threads=2, capacity=4)
    assert callbacks.pump(now_ms=T, sender=sender).examined == 1
    wait_for(lambda: hung.posts, message="the post to reach the receiver")
    assert rows() == [(job_id, "pending", 1)]  # claimed, no answer yet: the pass returned
    again = callbacks.pump(now_ms=T + 1, sender=sender)
    assert (again.examined, again.acted) == (0, 0)  # claimed rows are not posted twice
    hung.answering.set()
    wait_for(
        lambda: callbacks.pump(now_ms=T + 2, sender=sender).acted == 1,
        message="the answer to be written",
    )
    assert rows() == [(job_id, "delivered", 1)] and len(hung.posts) == 1


def test_a_full_sender_leaves_the_rest_due_and_every_callback_is_still_delivered(hung):
    ids = [canceled(f"cb-full-{n}") for n in range(3)]
    sender = callbacks.Sender(threads=1, capacity=1)
    assert callbacks.pump(now_ms=T, sender=sender).examined == 1
    assert callbacks.pump(now_ms=T, sender=sender).examined == 0  # no room: nothing claimed
    assert sorted(attempts for _, _, attempts in rows()) == [0, 0, 1]
    due = Callback.objects.filter(state="pending", attempts=0, next_at__lte=T)
    assert due.count() == 2  # left to the next pass, or to any other process's loop
    hung.answering.set()

    def all_delivered() -> bool:
        callbacks.pump(now_ms=T + 1, sender=sender)
        return rows() == [(job_id, "delivered", 1) for job_id in ids]

    wait_for(all_delivered, message="every callback delivered")
    assert sorted(p.body["jobId"] for p in hung.posts) == ids


def test_the_sender_claims_no_more_than_it_can_post_within_a_claim():
    """A claimed row waits for at most capacity / threads posts of TIMEOUT_S each: less
    than CLAIM_MS, or a replica would post it while it waits."""
    sender = callbacks.Sender()
    assert sender.capacity / sender.threads * callbacks.TIMEOUT_S * 1000 < callbacks.CLAIM_MS
    assert sender.room() == sender.capacity


def test_a_pump_pass_keeps_a_quick_receiver_fed_beyond_one_sender_load(settings):
    receiver = Receiver().start()
    settings.RECEIPT = dataclasses.replace(
        settings.RECEIPT, resonate_callback_url=None, event_callback_url=receiver.url
    )
    try:
        ids = [canceled(f"cb-quick-{n}") for n in range(12)]
        sender = callbacks.Sender(threads=2, capacity=4)
        report = callbacks.pump(now_ms=T, sender=sender, budget_s=30, answer_wait_s=10)
        assert report.examined == 12  # three sender-loads in one pass
        callbacks.pump(now_ms=T, sender=sender)  # writes what the last wait left
        assert rows() == [(job_id, "delivered", 1) for job_id in ids]
    finally:
        receiver.stop()
