"""The store-wide log's part of `manage.py receipts` (issue 36): `checkpoint`, `prove`,
`consistency` and `verify --against`. Proofs and checkpoints print as the JSON files
`python -m receipts.verify_offline` checks, so `> file.json` is all a client needs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from receipts import checkpoints, log, log_verify, proofs, signing
from receipts.clock import now_ms as wall_clock_ms
from receipts.core.checkpoint import Checkpoint, CheckpointError, checkpoint_hash, from_wire


def add_arguments(sub: Any) -> None:
    checkpoint = sub.add_parser(
        "checkpoint", help="print the latest checkpoint of the log (or --number N) as JSON"
    )
    checkpoint.add_argument("--number", default="latest", help="a checkpoint number or hash")
    checkpoint.add_argument(
        "--make",
        action="store_true",
        help="extend the log and make a checkpoint now, if it has grown since the last one",
    )
    checkpoint.add_argument(
        "--public-key", action="store_true", help="print the signing key's public half (PEM)"
    )
    prove = sub.add_parser("prove", help="print an inclusion proof of a receipt as JSON")
    prove.add_argument("receipt", help="a receipt hash, <stream>#<n> or a receipt id")
    prove.add_argument("--checkpoint", default="latest", help="a checkpoint number or hash")
    consistency = sub.add_parser(
        "consistency", help="print a consistency proof between two checkpoints as JSON"
    )
    consistency.add_argument("old", help="a checkpoint number, hash or JSON file")
    consistency.add_argument(
        "new", nargs="?", default="latest", help="a checkpoint number, hash or JSON file"
    )


def add_verify_arguments(verify: Any) -> None:
    verify.add_argument(
        "--against",
        type=Path,
        help="a checkpoint (JSON) kept elsewhere: prove the store still holds every receipt "
        "it commits to, in order (exits non-zero on any difference)",
    )
    verify.add_argument(
        "--key",
        type=Path,
        action="append",
        default=[],
        help="a public key (PEM) to check the checkpoint's signature with (again per key)",
    )


def _json(value: Any) -> str:
    return json.dumps(value, indent=2)


def checkpoint(options: dict[str, Any]) -> str:
    if options["public_key"]:
        pem = checkpoints.public_key_pem()
        if pem is None:
            raise CommandError("no signing key is configured: checkpoints are unsigned")
        return pem.decode().rstrip("\n")
    if options["make"]:
        now = wall_clock_ms()
        log.extend(now_ms=now, wait_s=2.0, blocking=True)
        checkpoints.make(now_ms=now, force=True)
    return _json(checkpoints.resolve(options["number"], field="--number").to_wire())


def prove(options: dict[str, Any]) -> str:
    return _json(proofs.inclusion_for(options["receipt"], options["checkpoint"]).to_wire())


def _checkpoint_ref(ref: str, field: str) -> checkpoints.Stored:
    path = Path(ref)
    if ref not in ("latest",) and not ref.isdigit() and path.is_file():
        cp = read_checkpoint(path)
        return checkpoints.by_hash(checkpoint_hash(cp))
    return checkpoints.resolve(ref, field=field)


def consistency(options: dict[str, Any]) -> str:
    old = _checkpoint_ref(options["old"], "old")
    new = _checkpoint_ref(options["new"], "new")
    return _json(proofs.consistency(old, new).to_wire())


def read_checkpoint(path: Path) -> Checkpoint:
    try:
        return from_wire(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise CommandError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, CheckpointError):
            raise CommandError(f"{path}: not a checkpoint: {exc}") from None
        raise CommandError(f"{path}: not JSON: {exc}") from None


def against(path: Path, key_paths: list[Path]) -> log_verify.Against:
    cp = read_checkpoint(path)
    keys = []
    for key_path in key_paths:
        try:
            keys.append(signing.load_public_key(key_path.read_bytes()))
        except OSError as exc:
            raise CommandError(f"{key_path}: cannot read: {exc.strerror or exc}") from None
        except signing.SigningKeyError as exc:
            raise CommandError(f"{key_path}: {exc}") from None
    return log_verify.against(cp, keys=keys)


def describe(result: log_verify.Against) -> list[str]:
    lines = [f"LOG {f.where}: {f.reason}" for f in result.findings]
    if result.more:
        lines.append(f"LOG ... and {result.more} more")
    cp = result.checkpoint
    what = f"checkpoint {checkpoint_hash(cp)[:16]} ({cp.tree_size} leaves, {result.signature})"
    if result.ok:
        lines.append(
            f"the store extends {what}: {result.leaves} leaves recomputed from their "
            f"receipts, {result.pruned} removed by retention"
        )
    else:
        lines.append(f"the store does NOT extend {what}: {len(result.findings)} finding(s)")
    return lines
