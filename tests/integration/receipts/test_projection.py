"""The shared row projector (receipts.projection) on the branches the service tests do
not reach: a fold that leaves no state, a rebuild of a missing row, a stray stream."""

from __future__ import annotations

import pytest

from jobs.models import Job
from jobs.projector import CACHE_KEY
from jobs.projector import PROJECTOR as JOBS
from objectives.projector import PROJECTOR as OBJECTIVES
from receipts import store
from tests.integration.jobs.helpers import assert_read_model_matches_receipts, payload

pytestmark = pytest.mark.django_db
T0 = 1_800_000_000_000


def enqueued(job_id):
    return {"type": "job.enqueued", "jobId": job_id, "agentId": "factory", "payload": payload()}


def test_a_fold_without_state_writes_no_row_and_a_later_one_inserts_it():
    """J-3: a late failure of a job that never existed leaves no row (and no state)."""
    with store.open_stream("jobs/ghost") as handle:
        handle.append({"type": "job.failed", "jobId": "ghost"}, now_ms=T0)
        assert handle.cache[CACHE_KEY] is None
    assert not Job.objects.filter(pk="ghost").exists()
    store.append("jobs/ghost", enqueued("ghost"), now_ms=T0 + 1)
    assert Job.objects.get(pk="ghost").status == "queued"


def test_a_rebuild_inserts_a_missing_row_and_deletes_a_stray_one():
    store.append("jobs/job-1", enqueued("job-1"), now_ms=T0)
    store.append("jobs/ghost", {"type": "job.failed", "jobId": "ghost"}, now_ms=T0)
    Job.objects.create(**{**Job.objects.filter(pk="job-1").values().get(), "id": "ghost"})
    Job.objects.filter(pk="job-1").delete()
    report = store.replay("jobs/")
    assert sorted(d.stream for d in report.drift) == ["jobs/ghost", "jobs/job-1"]
    assert not Job.objects.filter(pk="ghost").exists()
    assert_read_model_matches_receipts("job-1")


@pytest.mark.parametrize(("projector", "noun"), [(JOBS, "a job"), (OBJECTIVES, "an objective")])
def test_a_stream_that_names_no_row_is_refused(projector, noun):
    with pytest.raises(ValueError, match=f"does not name {noun}"):
        projector.snapshot("other/1")
