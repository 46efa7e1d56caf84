"""Worker groups: the three built in and the ones a deployment declares (its own queues).

This module owns group names, a declared group's settings and the two ways to write a
declaration (JSON, or the compact `name[:concurrency]` list); it must not read the
environment or settings: `receipt_site.config` hands it the text or the mapping, and
wraps a `GroupsError` into an error naming its variable.

Decided where the spec is silent:

- A name is lowercase letters, digits, `-` and `_`, starting with a letter, at most
  MAX_GROUP_NAME characters. `driver`, `api` and the built-in groups are reserved (the
  built-ins keep their own settings); so is a `worker-` prefix, which names a cluster.
- Every setting is optional; absent, it comes from the global one (`jobs.core.timing`).
- A declaration keeps its order: the dashboard and runstack list groups as declared.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from jobs.core import flat_wire
from jobs.core.state import is_int

BUILTIN_GROUPS: Final[tuple[str, ...]] = ("chat", "control", "codex")
RESERVED_NAMES: Final = frozenset({*BUILTIN_GROUPS, "driver", "api"})
MAX_GROUP_NAME: Final = 32
GROUP_NAME_PATTERN: Final = re.compile(r"^[a-z][a-z0-9_-]*$")
CLUSTER_PREFIX: Final = "worker-"  # `jobs.core.names.WORKER_CLUSTER_PREFIX`
# Where a deployment declares its groups, as messages name it: a host project's settings
# key, or the standalone site's variable.
DECLARED_IN: Final = "RECEIPT['worker_groups'] (or the RECEIPT_WORKER_GROUPS environment variable)"
TO_DECLARE: Final = f"to add a group, declare it in {DECLARED_IN}"
# setting -> (lowest, highest), the bounds of the matching global variables
BOUNDS: Final[dict[str, tuple[int, int]]] = {
    "concurrency": (1, 256),
    "lease_ms": (1000, 10**9),
    "execution_timeout_ms": (1000, 10**9),
}


class GroupsError(ValueError):
    """A declaration that cannot be used; the message names the group and the setting."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSettings:
    """One declared group; None means "the global setting"."""

    name: str
    concurrency: int | None = None
    lease_ms: int | None = None
    execution_timeout_ms: int | None = None  # lowers the lease-derived timeout, never raises

    def to_wire(self) -> dict[str, Any]:
        return flat_wire.to_wire(self)


SETTING_NAMES: Final = tuple(f.name for f in fields(GroupSettings) if f.name != "name")


def check_name(name: object) -> str:
    """`name` if a deployment may declare a group by it, else GroupsError saying why."""
    if (
        not isinstance(name, str)
        or len(name) > MAX_GROUP_NAME
        or not GROUP_NAME_PATTERN.match(name)
    ):
        raise GroupsError(
            f"group name {name!r} must be lowercase letters, digits, '-' and '_', starting "
            f"with a letter, at most {MAX_GROUP_NAME} characters"
        )
    if name in BUILTIN_GROUPS:
        raise GroupsError(
            f"group name {name!r} is built in: chat, control and codex keep their own settings"
        )
    if name in RESERVED_NAMES or name.startswith(CLUSTER_PREFIX):
        raise GroupsError(
            f"group name {name!r} is reserved ({', '.join(sorted(RESERVED_NAMES))} and "
            f"names starting with {CLUSTER_PREFIX!r})"
        )
    return name


def is_group_name(name: object) -> bool:
    """A built-in group or a name a deployment may declare (declared or not)."""
    if name in BUILTIN_GROUPS:
        return True
    try:
        check_name(name)
    except GroupsError:
        return False
    return True


def from_mapping(declared: Mapping[str, Any]) -> tuple[GroupSettings, ...]:
    """Groups from `{name: settings}`; settings are a mapping of SETTING_NAMES, a bare
    concurrency, None/{} for all defaults, or a GroupSettings."""
    if not isinstance(declared, Mapping):
        raise GroupsError(f"must map group names to their settings, got {type(declared).__name__}")
    return tuple(_one(name, value) for name, value in declared.items())


def _one(name: object, value: Any) -> GroupSettings:
    name = check_name(name)
    if isinstance(value, GroupSettings):
        value = {setting: getattr(value, setting) for setting in SETTING_NAMES}
    elif value is None:
        value = {}
    elif is_int(value):
        value = {"concurrency": value}
    if not isinstance(value, Mapping):
        raise GroupsError(
            f"group {name!r}: settings must be an object of {', '.join(SETTING_NAMES)}, "
            f"got {value!r}"
        )
    unknown = sorted(str(key) for key in value if key not in SETTING_NAMES)
    if unknown:
        raise GroupsError(
            f"group {name!r}: unknown setting {', '.join(unknown)}; "
            f"expected {', '.join(SETTING_NAMES)}"
        )
    checked: dict[str, int | None] = {}
    for setting, raw in value.items():
        if raw is None:
            continue
        low, high = BOUNDS[setting]
        if not is_int(raw) or not low <= raw <= high:
            raise GroupsError(
                f"group {name!r}: {setting} must be an integer from {low} to {high}, got {raw!r}"
            )
        checked[setting] = raw
    return GroupSettings(name=name, **checked)


def parse(text: str) -> tuple[GroupSettings, ...]:
    """A declaration as written in one variable: a JSON object (`{"emails":
    {"concurrency": 4, "lease_ms": 60000}}`) or the compact list `emails:4,reports`
    (name, optionally its concurrency). Blank declares none."""
    text = text.strip()
    if not text:
        return ()
    if text.startswith("{"):
        try:
            declared = json.loads(text, object_pairs_hook=_no_repeats)
        except ValueError as error:  # JSONDecodeError, or a repeated name
            raise GroupsError(f"is not a valid JSON object: {error}") from None
        return from_mapping(declared)
    compact: dict[str, Any] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, concurrency = (piece.strip() for piece in item.partition(":"))
        if name in compact:
            raise GroupsError(f"declares group {name!r} twice")
        if sep and not concurrency.isdigit():
            raise GroupsError(
                f"group {name!r}: concurrency must be an integer, got {concurrency!r} "
                "(write name:concurrency, or a JSON object for leases and timeouts)"
            )
        compact[name] = int(concurrency) if sep else None
    return from_mapping(compact)


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"{key!r} appears twice")
        out[key] = value
    return out


def shown(groups: Iterable[GroupSettings]) -> str:
    """A declaration for people (the dashboard's configuration table), one group after
    another: `emails(concurrency=4, lease_ms=60000), reports`."""
    parts = []
    for group in groups:
        set_ = [f"{s}={getattr(group, s)}" for s in SETTING_NAMES if getattr(group, s) is not None]
        parts.append(f"{group.name}({', '.join(set_)})" if set_ else group.name)
    return ", ".join(parts)
