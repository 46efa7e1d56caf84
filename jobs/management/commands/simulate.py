"""`manage.py simulate --seed N --steps M [--jobs K] [--json] [--keep]` (C-2, P-4).

Runs `jobs.simulation.run.simulate` in one transaction, rolled back unless `--keep`, and
prints a summary (or the report as JSON). On a violated invariant it prints the replay
command line and exits 1.

An empty database (a fresh data directory: no migration applied yet) is migrated first:
that only creates the schema every command needs, and the run itself stays rolled back.
A database with some migrations applied and others pending is the operator's to migrate,
so the command names the recipe instead of guessing.
"""

from __future__ import annotations

import argparse
import json

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from jobs.simulation.run import DEFAULT_JOBS, Report, SimulationRefused, simulate


def _at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


class Command(BaseCommand):
    help = (
        "Deterministic simulation of the delivery runtime: seeded interleavings and "
        "faults on a virtual clock, invariants checked after every step."
    )

    def add_arguments(self, parser):
        parser.add_argument("--seed", type=int, required=True, help="the run's random seed")
        parser.add_argument(
            "--steps",
            type=_at_least(0),
            required=True,
            help="number of seeded actions before the liveness phase",
        )
        parser.add_argument(
            "--jobs",
            type=_at_least(1),
            default=DEFAULT_JOBS,
            help=f"at most this many active jobs at once (default {DEFAULT_JOBS})",
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument(
            "--trace",
            action="store_true",
            help="include every step (JSON) or the last 30 steps (text)",
        )
        parser.add_argument(
            "--keep",
            action="store_true",
            help="commit what the run wrote instead of rolling it back",
        )

    def handle(self, *args, seed: int, steps: int, jobs: int, **options):
        self._ready_database()
        try:
            report = simulate(seed, steps, jobs, keep=options["keep"])
        except SimulationRefused as error:
            raise CommandError(str(error)) from None
        if options["json"]:
            self.stdout.write(json.dumps(report.to_wire(trace=options["trace"]), indent=2))
        else:
            self._summary(report, trace=options["trace"])
        if report.violation is not None:
            if options["json"]:
                self.stdout.write(f"replay: {report.replay}")
            raise CommandError(
                f"invariant {report.violation.invariant} violated at step "
                f"{report.violation_step}; replay: {report.replay}",
                returncode=1,
            )

    def _ready_database(self) -> None:
        try:
            executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
            pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        except DatabaseError as error:
            raise CommandError(f"cannot read the database's migrations: {error}") from None
        if not pending:
            return
        if executor.loader.applied_migrations:
            raise CommandError(
                f"the database has {len(pending)} unapplied migration(s); run "
                "`python manage.py migrate`, then simulate again"
            )
        self.stderr.write("the database is empty: migrating it first (python manage.py migrate)")
        call_command("migrate", verbosity=0, interactive=False)

    def _summary(self, report: Report, *, trace: bool) -> None:
        write = self.stdout.write
        verdict = "ok" if report.ok else "VIOLATION"
        write(f"simulate seed={report.seed} steps={report.steps} jobs={report.jobs}: {verdict}")
        write(
            f"  {report.steps_run} steps, {report.liveness_steps} liveness steps in "
            f"{report.liveness_rounds} round(s), {report.virtual_ms} virtual ms, "
            f"{report.elapsed_s:.1f} s"
        )
        settled = ", ".join(f"{k} {v}" for k, v in sorted(report.settled.items())) or "none"
        write(f"  jobs: {report.jobs_created} created; {settled}")
        write("  actions: " + ", ".join(f"{k} {v}" for k, v in sorted(report.actions.items())))
        if trace or not report.ok:
            lines = report.trace[-30:]
            write(f"  last {len(lines)} step(s):")
            for line in lines:
                write(f"    {line}")
        if report.violation is not None:
            v = report.violation
            write(
                f"  violation: {v.invariant} at step {report.violation_step} "
                f"({report.violation_action}): {v.message}"
            )
            write(f"replay: {report.replay}")
