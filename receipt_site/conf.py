"""Receipt's settings in either door: the standalone site (environment variables, read by
receipt_site/settings.py) or a host project (its `RECEIPT = {...}` settings block).

After start-up `settings.RECEIPT` is the typed `Config` in both, with its directories
resolved to absolute paths; everything reads it there. A host project writes neither
Q_CLUSTER nor any other Receipt setting: `configure` derives them when Django creates the
`receipt_site` app, which must come before `django_q` in INSTALLED_APPS because django-q2
reads Q_CLUSTER once, when it is imported (docs/decisions.md, "Receipt in a host project").
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from jobs.core.timing import TimingSettings
from jobs.runtime.roles import ROLE_CLUSTERS, cluster_config
from receipt_site import config as _config

# Which door the running config came through: "environment" (the standalone site),
# "settings" (a host's RECEIPT block) or "defaults" (a host project without one).
source = "environment"


def q_cluster(config: _config.Config) -> dict[str, Any]:
    """The Q_CLUSTER setting for `config`: one django-q2 cluster per role (roles.py)."""
    cluster = cluster_config(
        timing=TimingSettings.from_config(config),
        broker_url=None if config.broker == "orm" else config.broker,
        poll_s=config.broker_poll_ms / 1000,
    )
    if config.broker == "orm":
        cluster["broker_class"] = "jobs.runtime.promisebroker.PromiseBroker"  # promise = task
    return cluster


def is_receipt_cluster(cluster: Any) -> bool:
    """Whether a Q_CLUSTER setting is one Receipt can run on (its name and every role)."""
    if not isinstance(cluster, dict) or cluster.get("name") != "receipt":
        return False
    alt = cluster.get("ALT_CLUSTERS")
    return isinstance(alt, dict) and all(name in alt for name in ROLE_CLUSTERS.values())


def with_directories(config: _config.Config, *, base: Path, names: tuple[str, str]) -> Any:
    """`config` with data_dir and workspace_dir absolute (relative ones under `base`).

    Task workspaces (Q-5) live outside the data directory, whatever the executor: a
    command in its workspace must find no database, secret key or token file next to it.
    `names` are the two settings as the door spells them, for the error."""
    data = (base / config.data_dir).resolve()
    workspace = (base / config.workspace_dir).resolve() if config.workspace_dir else None
    workspace = workspace or Path(f"{data}-workspaces")
    if workspace == data or data in workspace.parents or workspace in data.parents:
        raise _config.ConfigError(
            names[1],
            f"must be a directory outside {names[0]} ({data}) that does not contain it, "
            f"got {workspace}",
        )
    return dataclasses.replace(config, data_dir=str(data), workspace_dir=str(workspace))


def configure(settings: Any) -> None:
    """A host project's settings made whole, once, before django_q is imported: the
    RECEIPT block becomes the typed config, and Q_CLUSTER is derived from it. The
    standalone site's settings module has done both already (nothing to do)."""
    global source
    raw = getattr(settings, "RECEIPT", None)
    if isinstance(raw, _config.Config):
        return
    try:
        config = _config.from_settings({} if raw is None else raw)
        base = Path(getattr(settings, "BASE_DIR", None) or Path.cwd())
        names = ("RECEIPT['data_dir']", "RECEIPT['workspace_dir']")
        config = with_directories(config, base=base, names=names)
    except _config.ConfigError as error:  # startup stops with the key named (SPEC 13)
        raise ImproperlyConfigured(str(error)) from None
    if not hasattr(settings, "Q_CLUSTER"):
        if "django_q.conf" in sys.modules:
            raise ImproperlyConfigured(
                "django_q was loaded before receipt_site, so it runs without Receipt's "
                "queues: list 'receipt_site' above 'django_q' in INSTALLED_APPS"
            )
        settings.Q_CLUSTER = q_cluster(config)
    Path(config.data_dir).mkdir(parents=True, exist_ok=True)
    settings.RECEIPT = config
    source = "defaults" if raw is None else "settings"
