"""A job's report applies only while its objective still waits for that job (O-9, O-10,
O-13): a superseded job's late verdict is inert."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from objectives.core import reports
from objectives.core.reports import CommandRun
from objectives.core.state import Audit, Integration

from .helpers import Chain, created

RUN = CommandRun(
    name="lint", command="make lint", exit_code=2, timed_out=False, duration_ms=5, output_tail="x"
)


def _state(status: str, **integration: Any):
    state = Chain().append(created())
    return replace(state, integration=Integration(status=status, **integration))


@pytest.mark.parametrize(
    "body, status, applies",
    [
        (reports.validating("v1", ["lint"]), "requested", True),
        (reports.validating("v1", ["lint"]), "validating", False),  # started already
        (reports.validating("v0", ["lint"]), "requested", False),  # a superseded round
        (reports.validated("v1", []), "validating", True),
        (reports.validation_failed("v1", RUN, []), "requested", True),
        (reports.validation_failed("v1", RUN, []), "validated", False),
        (reports.publish_verdict("v1", None), "publish_requested", False),  # not this job
        (reports.publish_verdict("p1", RUN), "publish_requested", True),
        (reports.publish_verdict("p1", RUN), "promoted", False),
    ],
)
def test_an_integration_verdict_applies_only_to_the_awaited_job(body, status, applies):
    state = _state(status, validate_job_id="v1", publish_job_id="p1")
    assert reports.applies(state, body) is applies


def test_nothing_but_a_superseded_audit_applies_to_a_terminal_objective():
    state = replace(_state("requested", validate_job_id="v1"), status="canceled")
    audit = replace(state, audit=Audit(job_id="a1", status="requested"))
    assert not reports.applies(state, reports.validating("v1", []))
    assert reports.applies(audit, reports.audit_superseded("a1"))
    assert not reports.applies(audit, reports.audit_superseded("a0"))


def test_a_failed_check_says_why_with_its_output():
    body = reports.validation_failed("v1", replace(RUN, timed_out=True), [])
    assert body["reason"] == "check lint failed (timed out): x"
    assert reports.publish_verdict("p1", RUN)["reason"] == "publish command failed (exit 2): x"


@pytest.mark.parametrize(
    "exit_code, kind", [(0, "integration.promoted"), (1, "integration.publish.failed")]
)
def test_a_publish_command_promotes_only_when_it_exits_0(exit_code, kind):
    assert reports.publish_verdict("p1", replace(RUN, exit_code=exit_code))["type"] == kind
    assert reports.publish_verdict("p1", None)["type"] == "integration.promoted"  # no command
