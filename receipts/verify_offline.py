"""Check the store-wide log's checkpoints and proofs from JSON files alone (issue 36):

    python -m receipts.verify_offline checkpoint [--key pub.pem] cp.json
    python -m receipts.verify_offline inclusion --checkpoint cp.json --proof proof.json
        [--receipt receipt.json] [--key pub.pem]
    python -m receipts.verify_offline consistency --old a.json --new b.json --proof p.json
        [--key pub.pem]

Exit 0 and one line starting `ok:`, or exit 1 and one line starting `FAILED:` with the
reason (2: the command line itself is wrong). docs/integrity.md shows the formats.

It trusts nothing of Receipt's: no Django, no database, no settings. It needs the
standard library, and the `cryptography` package only to check a signature (--key).
A test keeps it that way.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from receipts.core import log_proofs
from receipts.core.checkpoint import Checkpoint, CheckpointError, checkpoint_hash, from_wire


class Failed(Exception):
    """The one-line reason a check failed."""


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise Failed(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise Failed(f"{path}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise Failed(f"{path}: not JSON: {exc}") from None


def _checkpoint(path: Path) -> Checkpoint:
    try:
        return from_wire(_read_json(path))
    except CheckpointError as exc:
        raise Failed(f"{path}: not a checkpoint: {exc}") from None


def _check_signatures(
    key_paths: Sequence[Path] | None, *checkpoints: tuple[Path, Checkpoint]
) -> str:
    """Check each checkpoint's signature with the given key of its keyId (several keys:
    checkpoints from before and after a key rotation); says what was checked. Without a
    key, nothing is checked."""
    if not key_paths:
        ids = sorted({cp.key_id for _, cp in checkpoints if cp.signed and cp.key_id})
        if not ids:
            return "unsigned"
        return f"signed by key {', '.join(ids)}, signature not checked (no --key)"
    try:  # only here: without --key the standard library is enough
        from receipts import signing
    except ImportError:
        raise Failed("checking a signature needs the cryptography package") from None
    keys = {}
    for key_path in key_paths:
        try:
            with key_path.open("rb") as handle:
                key = signing.load_public_key(handle.read())
        except OSError as exc:
            raise Failed(f"{key_path}: cannot read: {exc.strerror or exc}") from None
        except signing.SigningKeyError as exc:
            raise Failed(f"{key_path}: {exc}") from None
        keys[signing.key_id(key)] = key
    for path, cp in checkpoints:
        # one key given: check with it, so that a wrong key is named as such
        if not cp.signed:
            raise Failed(f"{path}: the checkpoint is unsigned")
        signer = keys.get(cp.key_id or "")
        if signer is None and len(keys) == 1:
            signer = next(iter(keys.values()))
        if signer is None:
            raise Failed(f"{path}: signed by key {cp.key_id}, which is none of the keys given")
        found = signing.signature_fault(cp, signer)
        if found:
            raise Failed(f"{path}: {found}")
    used = sorted({cp.key_id or "" for _, cp in checkpoints})
    return f"signature valid, key {', '.join(used)}"


def _when(cp: Checkpoint) -> str:
    moment = dt.datetime.fromtimestamp(cp.timestamp_ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _describe(cp: Checkpoint) -> str:
    return f"checkpoint {checkpoint_hash(cp)[:16]} ({cp.tree_size} leaves, {_when(cp)})"


def receipt_hash(receipt: Any) -> str:
    """A receipt's hash recomputed from its JSON as the API gives it: SHA-256 over the
    canonical JSON of {id, ts, stream, prev, body, context?} (Receipt's contract; hints
    and storage positions are not hashed). The standard library's json with these
    options writes exactly the canonical text."""
    if not isinstance(receipt, dict):
        raise Failed("a receipt is a JSON object")
    names = ["id", "ts", "stream", "prev", "body"] + (["context"] if "context" in receipt else [])
    missing = [name for name in names if name not in receipt]
    if missing:
        raise Failed(f"the receipt has no {missing[0]!r}")
    material = {name: receipt[name] for name in names}
    try:
        text = json.dumps(
            material, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    except ValueError:  # NaN, or a lone surrogate (not UTF-8): never in a receipt
        raise Failed("the receipt holds a value no receipt can hold") from None


def check_checkpoint(args: argparse.Namespace) -> str:
    """Names the checkpoint by its whole hash: what the store's API takes to find it."""
    cp = _checkpoint(args.checkpoint)
    described = f"checkpoint {checkpoint_hash(cp)} ({cp.tree_size} leaves, {_when(cp)})"
    return f"{described}, {_check_signatures(args.key, (args.checkpoint, cp))}"


def check_inclusion(args: argparse.Namespace) -> str:
    cp = _checkpoint(args.checkpoint)
    try:
        proof = log_proofs.inclusion_from_wire(_read_json(args.proof))
    except log_proofs.ProofFormatError as exc:
        raise Failed(f"{args.proof}: not an inclusion proof: {exc}") from None
    if args.receipt is not None:
        receipt = _read_json(args.receipt)
        computed = receipt_hash(receipt)
        if computed != receipt.get("hash"):
            raise Failed(f"{args.receipt}: its content does not hash to its hash")
        if computed != proof.leaf:
            raise Failed(f"{args.proof}: the proof is for another receipt")
    found = log_proofs.inclusion_fault(proof, cp)
    if found:
        raise Failed(found)
    signatures = _check_signatures(args.key, (args.checkpoint, cp))
    return f"receipt {proof.leaf} is leaf {proof.index} in {_describe(cp)}, {signatures}"


def check_consistency(args: argparse.Namespace) -> str:
    old, new = _checkpoint(args.old), _checkpoint(args.new)
    try:
        proof = log_proofs.consistency_from_wire(_read_json(args.proof))
    except log_proofs.ProofFormatError as exc:
        raise Failed(f"{args.proof}: not a consistency proof: {exc}") from None
    found = log_proofs.consistency_fault(proof, old, new)
    if found:
        raise Failed(found)
    signatures = _check_signatures(args.key, (args.old, old), (args.new, new))
    return f"the log at {_describe(new)} extends the log at {_describe(old)}, {signatures}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m receipts.verify_offline",
        description="Check checkpoints and proofs of a Receipt store's log from JSON files.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    key_help = (
        "the log's public key (PEM): also check the signatures; "
        "give it again for each key of a rotation"
    )

    one = commands.add_parser("checkpoint", help="check a checkpoint and its signature")
    one.add_argument("checkpoint", type=Path, help="the checkpoint (JSON)")
    one.add_argument("--key", type=Path, action="append", help=key_help)
    one.set_defaults(check=check_checkpoint)

    inclusion = commands.add_parser("inclusion", help="check that a receipt is in the log")
    inclusion.add_argument("--checkpoint", type=Path, required=True, help="the checkpoint")
    inclusion.add_argument("--proof", type=Path, required=True, help="its inclusion proof")
    inclusion.add_argument(
        "--receipt", type=Path, help="the receipt (JSON, as the API gives it): check it too"
    )
    inclusion.add_argument("--key", type=Path, action="append", help=key_help)
    inclusion.set_defaults(check=check_inclusion)

    consistency = commands.add_parser(
        "consistency", help="check that a later checkpoint's log extends an earlier one's"
    )
    consistency.add_argument("--old", type=Path, required=True, help="the earlier checkpoint")
    consistency.add_argument("--new", type=Path, required=True, help="the later checkpoint")
    consistency.add_argument("--proof", type=Path, required=True, help="the consistency proof")
    consistency.add_argument("--key", type=Path, action="append", help=key_help)
    consistency.set_defaults(check=check_consistency)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    check: Callable[[argparse.Namespace], str] = args.check
    try:
        message = check(args)
    except Failed as exc:
        print(f"FAILED: {exc}")
        return 1
    print(f"ok: {message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
