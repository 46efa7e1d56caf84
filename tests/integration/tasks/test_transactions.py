"""An enqueue inside the caller's transaction is rolled back with it (issue 33 item 2):
the job, its receipts and its delivery all go; committed, the job runs. Transactional
tests: the caller's `atomic()` is the outermost transaction, as in a view."""

from __future__ import annotations

from functools import partial

import pytest
from django.db import transaction

from jobs.models import DeliveryPromise, Job
from jobs.tasks.framework import TaskResultStatus
from receipts.models import Receipt as ReceiptRow
from tests.integration.tasks import defs

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


def test_an_enqueue_rolled_back_with_its_transaction_leaves_nothing(receipt_worker):
    with pytest.raises(Rollback), transaction.atomic():
        result = defs.add.enqueue(1, 2)
        assert Job.objects.filter(pk=result.id).exists()  # there, inside the transaction
        raise Rollback
    assert not Job.objects.filter(pk=result.id).exists()
    assert not ReceiptRow.objects.filter(stream=f"jobs/{result.id}").exists()
    assert not DeliveryPromise.objects.filter(job_id=result.id).exists()
    assert receipt_worker.run().attempts == 0


def test_an_enqueue_committed_with_its_transaction_runs(receipt_worker):
    with transaction.atomic():
        result = defs.add.enqueue(1, 2)
        transaction.on_commit(partial(defs.add.enqueue, 5, 6))  # Django's advice works too
        assert Job.objects.count() == 1
    drained = receipt_worker.run()
    assert sorted(job.result for job in drained.jobs) == [3, 11]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
