"""D-8 with real runworkers: a receiver that hangs holds no worker, and every callback
is still delivered once it answers.

The receiver takes every post and answers none until the test lets it: jobs settle
meanwhile (the attempt's path posts nothing), and once it answers, each job's
`dispatched` and `completed` are delivered by the runworkers' senders."""

from __future__ import annotations

import dataclasses

import pytest

from jobs.models import Callback
from tests.conftest import wait_for
from tests.integration.jobs.callback_receiver import Receiver
from tests.runtime.helpers import enqueue, wait_status

pytestmark = [pytest.mark.runtime, pytest.mark.django_db(transaction=True)]
JOBS = 6


@pytest.fixture
def hung():
    receiver = Receiver().start()
    receiver.answering.clear()
    yield receiver
    receiver.answering.set()
    receiver.stop()


def test_jobs_settle_while_the_receiver_hangs_and_every_callback_is_delivered(
    stack, hung, settings
):
    settings.RECEIPT = dataclasses.replace(
        settings.RECEIPT, resonate_callback_url=None, event_callback_url=hung.url
    )
    stack.env["RECEIPT_EVENT_CALLBACK_URL"] = hung.url
    stack.start("driver")
    stack.start("chat")
    ids = [enqueue("test-echo", message=n).job_id for n in range(JOBS)]
    for job_id in ids:
        wait_status(job_id, "completed")
    assert not Callback.objects.filter(state="delivered").exists()  # nobody has answered
    hung.answering.set()
    wait_for(
        lambda: Callback.objects.filter(state="delivered").count() == 2 * JOBS,
        timeout=60,
        message="every callback delivered",
    )
    assert set(hung.bodies()) == {
        (job_id, event) for job_id in ids for event in ("dispatched", "completed")
    }
