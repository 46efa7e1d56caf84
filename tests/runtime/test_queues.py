"""A deployment's own worker group (issue 33 item 5), end to end: declared in the
environment, served by `runworker --role <group>` as a real process, and reached by a
kind's contract and by an enqueue's `queue`; the receipts name the group's worker."""

from __future__ import annotations

import dataclasses

from django.conf import settings

from jobs import queue
from jobs.core import contracts
from receipts import store
from tests.runtime.helpers import wait_status

MAIL_GROUP = "mail-out"  # as tests.runtime.queue_handlers registers it (not imported here:
DECLARED = f"{MAIL_GROUP}:2"  # its kinds would stay registered in this process)


def test_a_declared_group_runs_its_kinds_and_its_queue_on_its_own_runworker(stack, monkeypatch):
    monkeypatch.setattr(
        settings, "RECEIPT", dataclasses.replace(settings.RECEIPT, worker_groups=DECLARED)
    )
    contracts.register_kind("test.mail", worker_group=MAIL_GROUP, auth_context_required=False)
    contracts.register_kind("test.note", auth_context_required=False)
    try:
        env = {
            "RECEIPT_WORKER_GROUPS": DECLARED,
            "RECEIPT_HANDLER_MODULES": "tests.runtime.handlers,tests.runtime.queue_handlers",
        }
        stack.start("driver", **env)
        stack.start(MAIL_GROUP, **env)
        by_kind = queue.enqueue("test-report", {"kind": "test.mail"}).job
        by_queue = queue.enqueue("test-report", {"kind": "test.note"}, queue=MAIL_GROUP).job
        for job in (by_kind, by_queue):
            done = wait_status(job.job_id, "completed")
            assert done.result["group"] == MAIL_GROUP
            leases = [r.body for r in store.read(job.stream) if r.type == "job.leased"]
            assert [lease["workerId"].split(":")[0] for lease in leases] == [MAIL_GROUP]
    finally:
        contracts.unregister_kind("test.mail")
        contracts.unregister_kind("test.note")
