"""Receipt as a user installs it: the wheel built from this tree, installed into a
directory of its own, and the environment that runs the base interpreter with that
directory first and the dependencies after it (the checkout's editable install, a .pth
file of the venv, is never read). Shared by the packaging and host-project tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_and_install(tmp: Path) -> Path:
    """Build the wheel from a copy of this tree and install it under `tmp / "site"`."""
    source = tmp / "src"  # a copy: setuptools builds in the source tree (build/, egg-info)
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".*", "bench", "build", "tests", "docs", "*.egg-info", "__pycache__"
        ),
    )
    pip = [sys.executable, "-m", "pip"]
    quiet = ["-q", "--no-deps", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", *quiet, "-w", str(tmp / "dist"), str(source)],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    wheel = next((tmp / "dist").glob("receipt-*.whl"))
    subprocess.run(
        [*pip, "install", *quiet, "--target", str(tmp / "site"), str(wheel)],
        check=True,
        capture_output=True,
    )
    return tmp


def environment(installed: Path, **extra: str) -> dict[str, str]:
    """This process's environment without Receipt's, Django's or pytest's variables, the
    installed wheel first on the path."""
    dependencies = sysconfig.get_paths()["purelib"]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RECEIPT_", "DATABASE_", "DJANGO_", "PYTEST", "JOB_", "Q_CLUSTER"))
    }
    env.update(
        PYTHONPATH=f"{installed / 'site'}{os.pathsep}{dependencies}",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def python() -> list[str]:
    """The base interpreter, without user site-packages."""
    return [getattr(sys, "_base_executable", sys.executable), "-s"]
