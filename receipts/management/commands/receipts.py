"""`manage.py receipts verify [prefix] [--strict] [--json] [--against cp.json [--key pub.pem]]`,
`manage.py receipts replay <stream|prefix> [--dry-run] [--json]` (S-8),
`manage.py receipts prune [--dry-run] [--json] [--older-than-days N] [--pause-ms N]` (retention: the
service the retention loop runs; verify also checks what retention removed and, when the
prefix covers `checkpoints/log`, reads back the store's own checkpoints), and the
store-wide log's `checkpoint`, `prove` and `consistency` (receipts.log_cli).

Each run is put on record (U-3) with `by` (`--by`, default `cli:<OS user>`): on the
stream's audit stream for one stream, on `audit/<prefix>*` for a prefix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from receipts import audit, checkpoints, log_cli, log_verify, retention, store
from receipts.clock import now_ms as wall_clock_ms
from receipts.errors import ReceiptsError, ReplayRefused


class Command(BaseCommand):
    help = "Verify hash chains or replay (rebuild) read models from receipts."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        verify = sub.add_parser("verify", help="verify every chain under a prefix (default: all)")
        verify.add_argument("prefix", nargs="?", default="")
        verify.add_argument(
            "--strict",
            action="store_true",
            help="exit non-zero on a broken chain, or when the prefix matches no stream",
        )
        verify.add_argument("--json", action="store_true")
        log_cli.add_verify_arguments(verify)
        replay = sub.add_parser("replay", help="rebuild read models of a stream or a prefix")
        replay.add_argument("target")
        replay.add_argument("--dry-run", action="store_true", help="report drift, change nothing")
        replay.add_argument("--json", action="store_true")
        prune = sub.add_parser("prune", help="remove settled streams past their retention")
        prune.add_argument("--dry-run", action="store_true", help="count, remove nothing")
        prune.add_argument("--json", action="store_true")
        prune.add_argument(
            "--older-than-days",
            type=int,
            default=None,
            help="one window for every family instead of the configured ones",
        )
        prune.add_argument(
            "--pause-ms",
            type=int,
            default=0,
            help="pause between batches, so a large prune leaves the database to other work",
        )
        log_cli.add_arguments(sub)
        for command in (verify, replay, prune):
            command.add_argument(
                "--by", default=None, help="who is acting (default: cli:<OS user>)"
            )

    def handle(self, *args, action, **options):
        if action in ("checkpoint", "prove", "consistency"):
            try:
                self.stdout.write(getattr(log_cli, action)(options))
            except ReceiptsError as error:  # a reference the store cannot resolve
                raise CommandError(str(error), returncode=1) from None
            return
        getattr(self, "_" + action)(options, by=options["by"] or audit.cli_actor())

    def _verify(self, o: dict[str, Any], *, by: str) -> None:
        prefix, strict = o["prefix"], o["strict"]
        # the kept checkpoint first: a file that is not one stops before anything is written
        log_check = log_cli.against(o["against"], o["key"]) if o["against"] else None
        single = store.stream_info(prefix) is not None if prefix else False
        checked, broken, last = 0, [], None
        for name in self._to_verify(prefix, single=single):
            last = store.verify(name)
            checked += 1
            if not last.ok:
                broken.append(last)
        issues = retention.verify(prefix)  # removed streams: tombstones, batches, gaps
        # the store's own checkpoints, read back and linked, when the prefix covers them
        own = log_verify.own_checkpoints() if checkpoints.STREAM.startswith(prefix) else None
        faults = own.findings if own else []
        if single and last is not None:
            audit.record_verify(prefix, last, by=by)
        else:
            audit.record(
                audit.target_of(prefix, single=False),
                audit.VERIFIED,
                by=by,
                ok=not broken and not faults,
                streams=checked,
                broken=[r.stream for r in broken][:50],
                **({"checkpoints": own.checked, "checkpointFaults": len(faults)} if own else {}),
            )
        if o["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "ok": not broken and not issues and not faults,
                        "checked": checked,
                        "broken": [r.to_wire() for r in broken],
                        "retention": [i.to_wire() for i in issues],
                        **({"checkpoints": own.to_wire()} if own else {}),
                        **({"against": log_check.to_wire()} if log_check else {}),
                    }
                )
            )
        else:
            for result in broken:
                self.stdout.write(f"BROKEN {result.stream}: {result.describe()}")
            for issue in issues:
                self.stdout.write(f"RETENTION {issue.stream}: {issue.reason}")
            for fault in faults:
                self.stdout.write(f"CHECKPOINT {fault.where}: {fault.reason}")
            self.stdout.write(
                f"verified {checked} stream(s), {len(broken)} broken"
                + (f", {len(issues)} retention issue(s)" if issues else "")
                + (f", {own.checked} checkpoint(s), {len(faults)} faulty" if own else "")
            )
            for line in log_cli.describe(log_check) if log_check else []:
                self.stdout.write(line)
        if log_check and not log_check.ok:
            # a kept checkpoint the store no longer extends fails with or without --strict
            raise CommandError(f"{len(log_check.findings)} log finding(s)", returncode=1)
        if log_check and (broken or issues or faults):
            strict = True
        if strict and broken:
            raise CommandError(f"{len(broken)} broken chain(s)", returncode=1)
        if strict and issues:
            raise CommandError(f"{len(issues)} retention issue(s)", returncode=1)
        if strict and faults:
            raise CommandError(f"{len(faults)} checkpoint finding(s)", returncode=1)
        if strict and prefix and not checked:
            # a typo in the prefix must not pass as "nothing is broken"
            raise CommandError(f"no stream matches {prefix!r}: nothing was verified", returncode=1)

    @staticmethod
    def _to_verify(prefix: str, *, single: bool) -> Iterator[str]:
        """`prefix` itself when it names a stream row; else every stream row under it, then
        every stream under it with receipts but no row, one stream at a time."""
        if single:
            yield prefix
            return
        yield from store.stream_names(prefix)
        yield from store.rowless_streams(prefix)

    def _replay(self, o: dict[str, Any], *, by: str) -> None:
        target, dry_run = o["target"], o["dry_run"]
        on_record = audit.target_of(target, single=store.stream_info(target) is not None)
        try:
            report = store.replay(target, dry_run=dry_run)
        except ReplayRefused as error:
            audit.record_replay(on_record, by=by, dry_run=dry_run, drift=0, refused=str(error))
            raise CommandError(str(error), returncode=1) from None
        audit.record_replay(
            on_record,
            by=by,
            dry_run=dry_run,
            drift=len(report.drift),
            refused=", ".join(v.stream for v in report.refused[:20]) or None,
        )
        if o["json"]:
            self.stdout.write(
                json.dumps({"ok": not report.refused, "dryRun": dry_run, **report.to_wire()})
            )
        else:
            for drift in report.drift:
                self.stdout.write(f"DRIFT {drift.stream}: {', '.join(drift.fields)}")
            for refused in report.refused:
                self.stdout.write(f"REFUSED {refused.stream}: {refused.describe()}")
            verb = "would repair" if dry_run else "repaired"
            self.stdout.write(
                f"replayed {report.checked} stream(s), {verb} {len(report.drift)}, "
                f"refused {len(report.refused)}"
            )
        if report.refused:
            raise CommandError(f"{len(report.refused)} chain(s) refused", returncode=1)

    def _prune(self, o: dict[str, Any], *, by: str) -> None:
        dry_run, older_than_days, pause_ms = o["dry_run"], o["older_than_days"], o["pause_ms"]
        if older_than_days is not None and older_than_days < 0:
            raise CommandError("--older-than-days must be >= 0")
        if pause_ms < 0:
            raise CommandError("--pause-ms must be >= 0")
        now = wall_clock_ms()
        reports = [
            prune(
                now_ms=now,
                dry_run=dry_run,
                older_than_days=older_than_days,
                by=by,
                pause_s=pause_ms / 1000,
            )
            for prune in retention.pruners.values()
        ]
        errors = [error for report in reports for error in report.errors]
        if o["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "ok": not errors,
                        "dryRun": dry_run,
                        "families": [r.to_wire() for r in reports],
                    }
                )
            )
        else:
            for error in errors:
                self.stdout.write(f"ERROR {error}")
            for report in reports:
                self.stdout.write(report.describe())
        if errors:
            raise CommandError(f"{len(errors)} error(s) while pruning", returncode=1)
