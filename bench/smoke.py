"""The `--smoke` flag every bench script has: a handful of jobs in seconds, the figures
printed the usual way, so that tests/bench/test_smoke.py can run each script and see that it
still works. A smoke run's figures mean nothing, and nothing asserts on them.

Each script hands its smoke values to `parse`; an option given on the command line still
wins over them, as `--quick` does in prune_load.py and run_delivery.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any


def parse(
    parser: argparse.ArgumentParser,
    smoke: Mapping[str, Any],
    argv: Sequence[str] | None = None,
) -> argparse.Namespace:
    """`parser`'s arguments plus --smoke, under which `smoke` (dest -> value) are the
    defaults."""
    shown = " ".join(_option(dest, value) for dest, value in smoke.items())
    parser.add_argument(
        "--smoke", action="store_true", help=f"a few jobs in seconds, for the tests: {shown}"
    )
    known, _ = parser.parse_known_args(argv)
    if known.smoke:
        parser.set_defaults(**smoke)
    return parser.parse_args(argv)


def _option(dest: str, value: Any) -> str:
    flag = "--" + dest.replace("_", "-")
    return flag if value is True else f"{flag} {value}"
