"""What the admin job page shows of Factory (U-2, U-5, W-3), registered into
`jobs.page_sections` by `ObjectivesConfig.ready` (jobs never imports objectives).

Links: the objective a job belongs to, and the objective a `factory.dispatch` job
created. Section: the job's durable-ledger rows, for kinds whose contract
names a durable workflow or activity. Reads only.
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.utils import quote
from django.urls import NoReverseMatch, reverse

from jobs import page_sections
from jobs.core.contracts import contract_for
from jobs.core.state import JobState
from objectives import ledger
from objectives.core.vocabulary import KIND_DISPATCH
from objectives.handlers.dispatch import objective_id_for
from objectives.models import ObjectiveSummary
from receipts.admin import pretty_json, utc


def objective_url(objective_id: str) -> str:
    try:
        return reverse("admin:objectives_objectivesummary_change", args=(quote(objective_id),))
    except NoReverseMatch:  # the objectives admin is not installed: the same path by hand
        return f"/admin/objectives/objectivesummary/{quote(objective_id)}/change/"


def created_objective(job: JobState) -> str | None:
    """The objective a `factory.dispatch` create made (O-11), once it exists. Any other
    action names its objective in the payload, which is the job's objective already."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    if (payload.get("action") or "create") != "create":
        return None
    result = job.result if isinstance(job.result, dict) else {}
    if isinstance(result.get("objectiveId"), str):
        return str(result["objectiveId"])
    # Not settled yet: the objective exists once the first attempt has created it.
    named = payload.get("objectiveId")
    candidate = named if isinstance(named, str) and named else objective_id_for(job.job_id)
    return candidate if ObjectiveSummary.objects.filter(pk=candidate).exists() else None


def links(job: JobState) -> tuple[page_sections.Link, ...]:
    found: dict[str, str] = {}  # objective id -> label
    created = created_objective(job) if job.kind == KIND_DISPATCH else None
    if created:
        found[created] = "created objective"
    if job.objective_id and job.objective_id not in found:
        found[job.objective_id] = "objective"
    return tuple(page_sections.Link(label, oid, objective_url(oid)) for oid, label in found.items())


def _times(row: dict[str, Any], *names: str) -> dict[str, Any]:
    """A ledger row with `<name>_utc` beside each ms timestamp."""
    return {**row, **{f"{name}_utc": utc(row.get(name)) for name in names}}


def ledger_section(job: JobState) -> page_sections.Section | None:
    contract = contract_for(job.kind)
    if contract is None or not (contract.durable_workflow or contract.durable_activity):
        return None
    rows = ledger.rows_for_job(job)
    workflow, activity = rows["workflow"], rows["activity"]
    return page_sections.Section(
        id="rcpt-ledger",
        title="Durable ledger",
        template="admin/objectives/job_ledger.html",
        context={
            "workflow": workflow and _times(workflow, "updated_at", "completed_at"),
            "signals": [
                {**_times(s, "created_at"), "payload_json": pretty_json(s["payload"])}
                for s in rows["signals"]
            ],
            "activity": activity and _times(activity, "last_heartbeat", "updated_at"),
            "checkpoint_json": activity and pretty_json(activity["checkpoint_output"]),
            "attempts": [_times(a, "started_at", "ended_at") for a in rows["attempts"]],
            "durable_workflow": contract.durable_workflow,
            "durable_activity": contract.durable_activity,
        },
    )


def contribute(job: JobState) -> page_sections.Contribution:
    section = ledger_section(job)
    return page_sections.Contribution(links=links(job), sections=(section,) if section else ())


def register() -> None:
    page_sections.register(contribute)
