"""`manage.py objectives create|list|show|react|cancel`, `--json` for scripts.

The developer's way to launch and follow objectives from a checkout. Every action goes
through the same services as the API and the admin (`objectives.services`), signed `by`
the operator (`--by`, default `cli:<OS user>`).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from objectives import presenters, selectors, services
from objectives.core import dag
from objectives.core.vocabulary import DEFAULT_MODE, MODES
from objectives.errors import ObjectivesError
from receipts.audit import cli_actor


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(f"{what} is not valid JSON: {error}") from None


def _tasks_file(path: str) -> Any:
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror}") from None
    return _json(text, path)


class Command(BaseCommand):
    help = "Create, list, show, react to and cancel objectives."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="file a new objective")
        create.add_argument("--title")
        create.add_argument("--prompt")
        create.add_argument("--mode", choices=MODES, default=DEFAULT_MODE)
        create.add_argument("--severity", type=int, choices=range(1, 6), metavar="1..5")
        create.add_argument(
            "--task",
            action="append",
            default=[],
            metavar="JSON",
            help='one task, e.g. \'{"id": "fix", "command": "make fix"}\' (repeat for more)',
        )
        create.add_argument(
            "--tasks-file",
            metavar="PATH",
            help="a JSON list of tasks, or a JSON object with the whole "
            "objective (title, prompt, tasks, checks, policy, ...)",
        )
        create.add_argument("--id", help="the objective id (default: a new one)")
        create.add_argument("--org", default="default", help="organization (default: default)")
        create.add_argument("--user", help="user id (default: the operator)")
        listing = sub.add_parser("list", help="the board: active objectives first")
        listing.add_argument("--org", help="only this organization's objectives")
        listing.add_argument("--limit", type=int, default=50, help="per section (default 50)")
        show = sub.add_parser("show", help="one objective with its task graph")
        show.add_argument("objective_id")
        react = sub.add_parser("react", help="wake control; unblocks a blocked objective")
        react.add_argument("objective_id")
        react.add_argument("--message")
        react.add_argument(
            "--tasks-file",
            metavar="PATH",
            help="a JSON list of tasks for an objective that has no plan yet",
        )
        cancel = sub.add_parser("cancel", help="stop its jobs and cancel the objective")
        cancel.add_argument("objective_id")
        cancel.add_argument("--reason")
        for sp in sub.choices.values():
            sp.add_argument("--json", action="store_true", help="machine-readable output")
            sp.add_argument("--by", default=None, help="who is acting (default: cli:<OS user>)")

    def handle(self, *args, action: str, **options):
        by = options.get("by") or cli_actor()
        try:
            data = getattr(self, "_" + action)(options, by)
        except ObjectivesError as error:
            raise CommandError(f"{error.code}: {error}") from None
        if options["json"]:
            self.stdout.write(json.dumps(data, ensure_ascii=False))
        elif action == "list":
            self._print_board(data)
        else:
            self._print_objective(data)

    # ---- actions --------------------------------------------------------------------------

    def _create(self, o: dict[str, Any], by: str) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if o["tasks_file"]:
            loaded = _tasks_file(o["tasks_file"])
            spec = dict(loaded) if isinstance(loaded, dict) else {"tasks": loaded}
        tasks = [_json(text, "--task") for text in o["task"]]
        if tasks:
            spec["tasks"] = [*spec.get("tasks", []), *tasks]
        for key in ("title", "prompt", "severity"):
            if o[key] is not None:
                spec[key] = o[key]
        spec.setdefault("mode", o["mode"])
        if not spec.get("title") and not spec.get("prompt"):
            raise CommandError("an objective needs --title or --prompt")
        objective_id = o["id"] or f"obj-{secrets.token_hex(8)}"
        auth = {"userId": o["user"] or by, "organizationId": o["org"]}
        state, created = services.create(objective_id, spec, auth_context=auth, by=by)
        return {"ok": True, "created": created, **self._detail(state.objective_id)}

    def _list(self, o: dict[str, Any], by: str) -> dict[str, Any]:
        if o["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        sections = selectors.board(organization_id=o["org"], limit=o["limit"])
        return {"board": presenters.board_json(sections)}

    def _show(self, o: dict[str, Any], by: str) -> dict[str, Any]:
        return self._detail(o["objective_id"])

    def _react(self, o: dict[str, Any], by: str) -> dict[str, Any]:
        tasks = _tasks_file(o["tasks_file"]) if o["tasks_file"] else None
        services.react(o["objective_id"], by=by, message=o["message"], tasks=tasks)
        return {"ok": True, **self._detail(o["objective_id"])}

    def _cancel(self, o: dict[str, Any], by: str) -> dict[str, Any]:
        options = {"reason": o["reason"]} if o["reason"] else {}
        services.cancel(o["objective_id"], by=by, **options)
        return {"ok": True, **self._detail(o["objective_id"])}

    @staticmethod
    def _detail(objective_id: str) -> dict[str, Any]:
        state = selectors.visible(objective_id)
        return presenters.detail_json(state, selectors.objective_jobs(state.objective_id))

    # ---- text output ----------------------------------------------------------------------

    def _print_board(self, data: dict[str, Any]) -> None:
        for section in data["board"]:
            if not section["objectives"]:
                continue
            self.stdout.write(f"{section['title']}:")
            for item in section["objectives"]:
                counts = ", ".join(
                    f"{n} {status}" for status, n in sorted((item["taskCounts"] or {}).items()) if n
                )
                self.stdout.write(
                    f"  {item['id']:<24} {item['status']:<12} {item['phase']:<10} "
                    f"{item['title'][:48]}" + (f"  [{counts}]" if counts else "")
                )

    def _print_objective(self, data: dict[str, Any]) -> None:
        objective = data["objective"]
        self.stdout.write(f"{objective['id']}  {objective['title']}")
        self.stdout.write(
            f"  status {objective['status']}, phase {objective['phase']}, "
            f"mode {objective['mode']}, severity {objective['severity']}"
        )
        if objective.get("blockedReason"):
            self.stdout.write(f"  blocked: {objective['blockedReason']}")
        tasks = data["tasks"] or planned_tasks(objective.get("inputTasks"))
        if not tasks:
            self.stdout.write("  no tasks yet (the planner makes them)")
            return
        heading = "tasks" if data["tasks"] else "tasks given, not planned yet"
        self.stdout.write(f"  {heading} (indented under what they wait for):")
        for line in task_graph_lines(tasks):
            self.stdout.write(f"    {line}")


def planned_tasks(given: Any) -> list[dict[str, Any]]:
    """The tasks an objective was filed with, shaped like planned ones, before planning."""
    if not isinstance(given, list) or not all(isinstance(t, dict) for t in given):
        return []
    tasks: list[dict[str, Any]] = [
        {
            "id": str(t.get("id") or f"t{i}"),
            "title": str(t.get("title") or t.get("prompt") or t.get("command") or ""),
            "dependsOn": [str(d) for d in t.get("dependsOn") or []],
            "shownStatus": "given",
        }
        for i, t in enumerate(given, start=1)
    ]
    try:
        depth = dag.depths({t["id"]: t["dependsOn"] for t in tasks})
    except ValueError:  # a cycle or an unknown id: planning will say so; show them flat
        depth = {}
    return [{**t, "depth": depth.get(t["id"], 0)} for t in tasks]


def task_graph_lines(tasks: list[dict[str, Any]]) -> list[str]:
    """The task graph as text: by depth, each task under the tasks it depends on."""
    width = max(len(t["id"]) + 2 * t["depth"] for t in tasks)
    lines = []
    for task in sorted(tasks, key=lambda t: (t["depth"], t["id"])):
        name = "  " * task["depth"] + task["id"]
        after = f"  (after {', '.join(task['dependsOn'])})" if task.get("dependsOn") else ""
        lines.append(f"{name:<{width}}  {task['shownStatus']:<10} {task['title']}{after}")
    return lines
