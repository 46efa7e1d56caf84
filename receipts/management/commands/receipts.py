"""`manage.py receipts verify [prefix] [--strict] [--json]` and
`manage.py receipts replay <stream|prefix> [--dry-run] [--json]` (S-8)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from receipts import store
from receipts.errors import ReplayRefused


class Command(BaseCommand):
    help = "Verify hash chains or replay (rebuild) read models from receipts."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        verify = sub.add_parser("verify", help="verify every chain under a prefix (default: all)")
        verify.add_argument("prefix", nargs="?", default="")
        verify.add_argument("--strict", action="store_true", help="exit non-zero on any issue")
        verify.add_argument("--json", action="store_true")
        replay = sub.add_parser("replay", help="rebuild read models of a stream or a prefix")
        replay.add_argument("target")
        replay.add_argument("--dry-run", action="store_true", help="report drift, change nothing")
        replay.add_argument("--json", action="store_true")

    def handle(self, *args, action, **options):
        if action == "verify":
            return self._verify(options["prefix"], strict=options["strict"], as_json=options["json"])
        return self._replay(options["target"], dry_run=options["dry_run"], as_json=options["json"])

    def _verify(self, prefix: str, *, strict: bool, as_json: bool) -> None:
        streams = store.matching_streams(prefix) if prefix else store.matching_streams("")
        results = [store.verify(name) for name in streams]
        broken = [r for r in results if not r.ok]
        if as_json:
            self.stdout.write(json.dumps({
                "ok": not broken, "checked": len(results),
                "broken": [r.to_wire() for r in broken],
            }))
        else:
            for result in broken:
                self.stdout.write(f"BROKEN {result.stream}: {result.describe()}")
            self.stdout.write(f"verified {len(results)} stream(s), {len(broken)} broken")
        if strict and broken:
            raise CommandError(f"{len(broken)} broken chain(s)", returncode=1)

    def _replay(self, target: str, *, dry_run: bool, as_json: bool) -> None:
        try:
            report = store.replay(target, dry_run=dry_run)
        except ReplayRefused as error:
            raise CommandError(str(error), returncode=1) from None
        if as_json:
            self.stdout.write(json.dumps({"ok": not report.refused, "dryRun": dry_run,
                                          **report.to_wire()}))
        else:
            for drift in report.drift:
                self.stdout.write(f"DRIFT {drift.stream}: {', '.join(drift.fields)}")
            for refused in report.refused:
                self.stdout.write(f"REFUSED {refused.stream}: {refused.describe()}")
            verb = "would repair" if dry_run else "repaired"
            self.stdout.write(f"replayed {report.checked} stream(s), {verb} {len(report.drift)}, "
                              f"refused {len(report.refused)}")
        if report.refused:
            raise CommandError(f"{len(report.refused)} chain(s) refused", returncode=1)
