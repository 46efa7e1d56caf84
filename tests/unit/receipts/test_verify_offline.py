"""The offline verifier (issue 36): `python -m receipts.verify_offline` as a client runs it,
in a subprocess, on JSON files written to a temporary directory; and what it needs to
run: the standard library, plus `cryptography` only to check signatures."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from receipts import signing
from receipts.core import log_proofs
from receipts.core.chain import Receipt, seal
from receipts.core.checkpoint import Checkpoint, checkpoint_hash, from_wire, signed_text
from receipts.core.merkle import MemoryTree, leaf_hash, receipt_leaf
from receipts.verify_offline import receipt_hash
from tests.support import generate_private_key_pem

REPO = Path(__file__).resolve().parents[3]
TS = 1_765_000_000_000
# What a client copies to run the verifier without Receipt installed (docs/integrity.md).
CLIENT_FILES = [
    "receipts/__init__.py",
    "receipts/verify_offline.py",
    "receipts/core/__init__.py",
    "receipts/core/merkle.py",
    "receipts/core/checkpoint.py",
    "receipts/core/log_proofs.py",
]


def run(*args: str | Path, cwd: Path, python: list[str] | None = None) -> tuple[int, str]:
    done = subprocess.run(
        [*(python or [sys.executable]), "-m", "receipts.verify_offline", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value, indent=2), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A small log of real receipts, two signed checkpoints, their proofs and the public
    key, as files in one directory."""
    where = tmp_path_factory.mktemp("log")
    receipts: list[Receipt] = []
    prev = None
    for i in range(11):
        r = seal(
            stream="jobs/j1",
            prev=prev,
            body={"type": "job.progress", "n": i, "share": i / 3},
            ts=TS + i,
            random_hex16=f"{i:016x}",
        )
        receipts.append(r)
        prev = r.hash
    tree = MemoryTree()
    for r in receipts:
        tree.append(leaf_hash(receipt_leaf(r.hash)))
    private = signing.load_private_key(generate_private_key_pem())
    old = signing.sign(Checkpoint(7, tree.root(7).hex(), TS + 60_000), private)
    new = signing.sign(
        Checkpoint(11, tree.root(11).hex(), TS + 120_000, checkpoint_hash(old)), private
    )
    (where / "pub.pem").write_bytes(signing.public_key_pem(private))
    write(where / "old.json", old.to_wire())
    write(where / "new.json", new.to_wire())
    write(where / "receipt.json", receipts[3].to_wire())
    write(
        where / "proof.json", log_proofs.inclusion_proof(receipts[3].hash, 3, old, tree).to_wire()
    )
    write(where / "consistency.json", log_proofs.consistency_proof(old, new, tree).to_wire())
    return {"dir": where, "old": old, "new": new, "tree": tree, "receipts": receipts}


def test_a_kept_checkpoint_and_its_signature_check(log: dict[str, Any]) -> None:
    code, out = run("checkpoint", "--key", "pub.pem", "old.json", cwd=log["dir"])
    assert (code, out.count("\n")) == (0, 0)
    assert out.startswith("ok: checkpoint ") and "(7 leaves, " in out and "signature valid" in out
    # the whole hash (issue 36 item 3): what the store's API takes as `checkpoint`
    assert out.split()[2] == checkpoint_hash(log["old"])


def test_without_a_key_the_signature_is_named_but_not_checked(log: dict[str, Any]) -> None:
    code, out = run("checkpoint", "old.json", cwd=log["dir"])
    assert code == 0 and "signature not checked (no --key)" in out


def test_an_unsigned_checkpoint_says_so_and_fails_against_a_key(
    log: dict[str, Any], tmp_path: Path
) -> None:
    shutil.copy(log["dir"] / "pub.pem", tmp_path)
    bare = Checkpoint(7, log["old"].root_hash, TS)
    write(tmp_path / "cp.json", bare.to_wire())
    code, out = run("checkpoint", "cp.json", cwd=tmp_path)
    assert code == 0 and out.endswith(", unsigned")
    assert run("checkpoint", "--key", "pub.pem", "cp.json", cwd=tmp_path) == (
        1,
        "FAILED: cp.json: the checkpoint is unsigned",
    )


def test_a_receipt_is_still_in_the_log(log: dict[str, Any]) -> None:
    code, out = run(
        "inclusion",
        "--checkpoint",
        "old.json",
        "--proof",
        "proof.json",
        "--receipt",
        "receipt.json",
        "--key",
        "pub.pem",
        cwd=log["dir"],
    )
    assert code == 0, out
    assert out.startswith(f"ok: receipt {log['receipts'][3].hash} is leaf 3 in checkpoint ")


def test_the_newer_checkpoint_extends_the_older(log: dict[str, Any]) -> None:
    code, out = run(
        "consistency",
        "--old",
        "old.json",
        "--new",
        "new.json",
        "--proof",
        "consistency.json",
        "--key",
        "pub.pem",
        cwd=log["dir"],
    )
    assert code == 0, out
    assert "(11 leaves, " in out.split("extends")[0] and "(7 leaves, " in out.split("extends")[1]


def test_checkpoints_across_a_key_rotation_check_with_both_keys(
    log: dict[str, Any], tmp_path: Path
) -> None:
    """The old checkpoint under the old key, the new one under a new key: each is checked
    with the key its keyId names."""
    for kept in log["dir"].iterdir():
        shutil.copy(kept, tmp_path)
    rotated = signing.load_private_key(generate_private_key_pem())
    (tmp_path / "new.pub.pem").write_bytes(signing.public_key_pem(rotated))
    (tmp_path / "stranger.pem").write_bytes(
        signing.public_key_pem(signing.load_private_key(generate_private_key_pem()))
    )
    new = signing.sign(log["new"], rotated)
    write(tmp_path / "new.json", new.to_wire())
    write(
        tmp_path / "consistency.json",
        log_proofs.consistency_proof(log["old"], new, log["tree"]).to_wire(),
    )
    both = [*CONSISTENCY, "--key", "new.pub.pem"]
    code, out = run(*both, cwd=tmp_path)
    assert code == 0, out
    ids = sorted([log["old"].key_id, str(new.key_id)])
    assert out.endswith(f"signature valid, key {', '.join(ids)}")
    code, out = run(*CONSISTENCY, cwd=tmp_path)
    assert code == 1 and out.startswith(f"FAILED: new.json: signed by key {new.key_id}, not by")
    code, out = run(*CONSISTENCY, "--key", "stranger.pem", cwd=tmp_path)
    assert (code, out) == (
        1,
        f"FAILED: new.json: signed by key {new.key_id}, which is none of the keys given",
    )


def tampered(log: dict[str, Any], tmp_path: Path, name: str, change: dict[str, Any]) -> Path:
    for kept in log["dir"].iterdir():
        shutil.copy(kept, tmp_path)
    value = json.loads((tmp_path / name).read_text())
    value.update(change)
    return write(tmp_path / name, value)


INCLUSION = ["inclusion", "--checkpoint", "old.json", "--proof", "proof.json", "--key", "pub.pem"]
CONSISTENCY = [
    "consistency",
    "--old",
    "old.json",
    "--new",
    "new.json",
    "--proof",
    "consistency.json",
    "--key",
    "pub.pem",
]


@pytest.mark.parametrize(
    ("args", "name", "change", "reason"),
    [
        (INCLUSION, "proof.json", {"index": 4}, "the proof does not lead to the root hash"),
        (INCLUSION, "proof.json", {"path": []}, "shorter"),
        (INCLUSION, "receipt.json", {"body": {"type": "job.progress", "n": 99}}, "does not hash"),
        (INCLUSION, "old.json", {"timestampMs": TS}, "the proof is for another checkpoint"),
        (INCLUSION, "old.json", {"signed": False}, "old.json: not a checkpoint: signed is True"),
        (CONSISTENCY, "consistency.json", {"oldSize": 6}, "sizes"),
        (CONSISTENCY, "new.json", {"treeSize": 12}, "the proof's new checkpoint is another one"),
    ],
)
def test_tampering_fails_with_a_one_line_reason(
    log: dict[str, Any],
    tmp_path: Path,
    args: list[str],
    name: str,
    change: dict[str, Any],
    reason: str,
) -> None:
    tampered(log, tmp_path, name, change)
    extra = ["--receipt", "receipt.json"] if args is INCLUSION else []
    code, out = run(*args, *extra, cwd=tmp_path)
    assert code == 1
    assert out.startswith("FAILED: ") and reason in out and "\n" not in out


def test_a_checkpoint_edited_and_its_proof_recomputed_fails_the_signature(
    log: dict[str, Any], tmp_path: Path
) -> None:
    """An operator who rewrites the log can make a proof that fits a rewritten checkpoint,
    but cannot sign it without the key: the signature check catches it."""
    tampered(log, tmp_path, "old.json", {})
    forged_tree = MemoryTree()
    for i in range(7):
        forged_tree.append(leaf_hash(receipt_leaf(log["receipts"][i].hash if i != 5 else "f" * 64)))
    forged = Checkpoint(
        7,
        forged_tree.root().hex(),
        log["old"].timestamp_ms,
        None,
        log["old"].key_id,
        log["old"].signature,
    )
    write(tmp_path / "old.json", forged.to_wire())
    write(
        tmp_path / "proof.json",
        log_proofs.inclusion_proof(log["receipts"][3].hash, 3, forged, forged_tree).to_wire(),
    )
    code, out = run(*INCLUSION, cwd=tmp_path)
    assert (code, out) == (1, "FAILED: old.json: the signature does not match the checkpoint")


def test_files_that_are_not_there_or_not_json_fail_cleanly(
    log: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    code, out = run("checkpoint", "missing.json", cwd=tmp_path)
    assert code == 1 and out.startswith("FAILED: missing.json: cannot read")
    code, out = run("checkpoint", "bad.json", cwd=tmp_path)
    assert code == 1 and out.startswith("FAILED: bad.json: not JSON")
    write(tmp_path / "wrong.json", {"format": "receipt.inclusion.v1"})
    code, out = run("checkpoint", "wrong.json", cwd=tmp_path)
    assert code == 1 and "not a checkpoint: format is" in out
    shutil.copy(log["dir"] / "old.json", tmp_path)
    (tmp_path / "pub.pem").write_text("not a key", encoding="utf-8")
    code, out = run("checkpoint", "--key", "pub.pem", "old.json", cwd=tmp_path)
    assert code == 1 and out.startswith("FAILED: pub.pem: not a PEM public key")
    assert run("inclusion", "--proof", "p.json", cwd=tmp_path)[0] == 2  # usage


def copy_client(tmp_path: Path, log: dict[str, Any]) -> Path:
    for name in CLIENT_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    for kept in log["dir"].iterdir():
        shutil.copy(kept, tmp_path)
    return tmp_path


def test_the_copied_files_verify_with_the_standard_library_alone(
    log: dict[str, Any], tmp_path: Path
) -> None:
    """Without site-packages (`-S`): no Django, no orjson, no cryptography."""
    where = copy_client(tmp_path, log)
    bare = [sys.executable, "-S"]
    code, out = run(
        "inclusion", "--checkpoint", "old.json", "--proof", "proof.json",
        "--receipt", "receipt.json", cwd=where, python=bare,
    )  # fmt: skip
    assert code == 0, out
    code, out = run(
        "consistency", "--old", "old.json", "--new", "new.json", "--proof", "consistency.json",
        cwd=where, python=bare,
    )  # fmt: skip
    assert code == 0, out
    code, out = run("checkpoint", "--key", "pub.pem", "old.json", cwd=where, python=bare)
    assert (code, out) == (1, "FAILED: checking a signature needs the cryptography package")


def test_with_a_key_it_imports_cryptography_and_nothing_else_of_site_packages(
    log: dict[str, Any], tmp_path: Path
) -> None:
    where = copy_client(tmp_path, log)
    probe = (
        "import sys; before = set(sys.modules); from receipts import verify_offline as v; "
        "v.main(['checkpoint', '--key', 'pub.pem', 'old.json']); "
        "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} "
        "- set(sys.stdlib_module_names)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=where, capture_output=True, text=True, timeout=60
    )
    first, imported = done.stdout.strip().splitlines()
    assert first.startswith("ok: ")
    assert set(ast.literal_eval(imported)) <= {
        "receipts",
        "cryptography",
        "_cffi_backend",
        "_openssl",
    }


# text a receipt can hold: no lone surrogates (they have no UTF-8 to hash)
texts = st.text(st.characters(blacklist_categories=["Cs"]))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=100, deadline=None)
@given(extra=st.dictionaries(texts, json_values, max_size=4), context=st.booleans())
def test_the_verifier_recomputes_a_receipts_hash_as_the_store_seals_it(
    extra: dict[str, Any], context: bool
) -> None:
    r = seal(
        stream="jobs/x",
        prev=None,
        body={**extra, "type": "job.progress"},
        ts=TS,
        random_hex16="0123456789abcdef",
        context={"traceId": "t"} if context else None,
    )
    wire = json.loads(json.dumps(r.to_wire()))  # as a client reads it from the API
    assert receipt_hash(wire) == r.hash


def test_the_examples_in_docs_integrity_hold() -> None:
    """The documented checkpoint, its signed text and the inclusion proof against it."""
    doc = (REPO / "docs" / "integrity.md").read_text(encoding="utf-8")
    blocks = [part.split("```", 1)[0] for part in doc.split("```json\n")[1:]]
    checkpoint, inclusion, consistency = (json.loads(block) for block in blocks)
    cp = from_wire(checkpoint)
    assert f"```\n{signed_text(cp)}\n```" in doc
    assert log_proofs.inclusion_fault(log_proofs.inclusion_from_wire(inclusion), cp) is None
    assert log_proofs.consistency_from_wire(consistency).old == checkpoint_hash(cp)
