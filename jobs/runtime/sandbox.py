"""Where a task command runs (Q-5): under bubblewrap by default, on the host only by choice.

`launch` turns one shell command into the argv, working directory and environment that
`objectives.processes.run` starts under its reaper (`jobs.runtime.lifeline`), so the
no-orphans guarantees hold whatever runs inside. With RECEIPT_COMMAND_SANDBOX=bwrap (the
default) the command gets:

- its workspace, bound writable at /workspace, and a private /tmp; the system (/usr and
  the /bin, /lib... links, a few files of /etc) read-only; nothing else of the host: no
  data directory, configuration, secret files, home directories or database socket;
- a network namespace of its own (loopback only, so not 127.0.0.1:5432 either) unless
  the objective's policy grants the network;
- its own pid, IPC and UTS namespaces, dying with its reaper (--die-with-parent);
- limits on CPU seconds, writable memory, processes and file size (`prlimit`);
- never root: a root worker drops the command to RECEIPT_COMMAND_USER (`setpriv`, real
  uid and gid, no groups, no capabilities, no new privileges) and hands it the workspace.

Where bubblewrap (or util-linux's prlimit / setpriv) is missing, `launch` raises
`Unavailable` naming both fixes; it never falls back to the host. RECEIPT_COMMAND_SANDBOX=
host runs commands as before (the worker's user, the host's view), logged at startup.
This module decides how a command is started; it never starts one.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings

WORKSPACE = "/workspace"  # where the command sees its workspace
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
PRLIMIT = "/usr/bin/prlimit"
SETPRIV = "/usr/bin/setpriv"
SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # links into /usr, or dirs
# /etc is not bound whole: it holds the host's configuration (and may hold secrets). The
# dynamic loader, Debian's alternatives, user names and time zones are what tools need.
ETC_FILES = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "timezone",
    "mime.types",
    "os-release",
)
ETC_NETWORK_FILES = (
    "resolv.conf",
    "hosts",
    "host.conf",
    "gai.conf",
    "services",
    "protocols",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
)
NO_SANDBOX = "commands disabled: no sandbox"
HOST_WARNING = (
    "commands run on the host without a sandbox (RECEIPT_COMMAND_SANDBOX=host): as this "
    "process's user, seeing what it sees"
)
MB = 1 << 20


class Unavailable(Exception):
    """Commands cannot run here: the sandbox is missing and the host was not chosen."""


@dataclass(frozen=True)
class Jail:
    """What one command may use: `workspace` (a host directory, seen at /workspace, in a
    directory only the worker writes) and the network if the objective's policy grants it.
    The worker itself touches files in a workspace only through
    `objectives.workspace_files` (the command may have put links there)."""

    workspace: Path
    network: bool = False


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    cwd: Path
    env: dict[str, str]


def mode(config: Any = None) -> str:
    return str((config or settings.RECEIPT).command_sandbox)


def problem(config: Any = None) -> str | None:
    """Why commands cannot run in this process, naming both fixes; None when they can.
    Task commands are Factory's: without the `objectives` app nothing needs the sandbox."""
    config = config or settings.RECEIPT
    if mode(config) == "host" or not apps.is_installed("objectives"):
        return None
    missing = [path for path in (config.bwrap_path, PRLIMIT, SETPRIV) if not _runnable(path)]
    if not missing:
        return None
    return (
        f"{NO_SANDBOX}: {', '.join(missing)} not found. Install bubblewrap (Debian: "
        "apt-get install bubblewrap; RECEIPT_BWRAP_PATH names another path), or set "
        "RECEIPT_COMMAND_SANDBOX=host to run commands on the host without a sandbox"
    )


def warning(config: Any = None) -> str | None:
    """The line health, the dashboard and startup show, or None when commands are sandboxed."""
    config = config or settings.RECEIPT
    if mode(config) == "host":
        return HOST_WARNING
    return NO_SANDBOX if problem(config) else None


def status(config: Any = None) -> dict[str, Any]:
    """{sandbox, enabled, warning, detail} for health and the dashboard."""
    config = config or settings.RECEIPT
    why = problem(config)
    return {
        "sandbox": mode(config),
        "enabled": why is None,
        "warning": warning(config),
        "detail": why,
    }


def launch(
    command: str, *, cwd: Path, env: Mapping[str, str], jail: Jail | None, config: Any = None
) -> Launch:
    """How to start `command`: unconfined when `jail` is None (the runtime's own tests and
    callers that run nothing a payload chose), else as RECEIPT_COMMAND_SANDBOX says."""
    shell = ["/bin/sh", "-c", command]
    config = config or settings.RECEIPT
    if jail is None or mode(config) == "host":
        return Launch(shell, cwd, dict(env))
    why = problem(config)
    if why is not None:
        raise Unavailable(why)
    # Lexical paths: resolving would follow links the command made. Inside, bubblewrap
    # resolves --chdir in the sandbox's own view, where a link cannot leave /workspace.
    workspace = Path(os.path.abspath(jail.workspace))
    inside = Path(WORKSPACE) / Path(os.path.abspath(cwd)).relative_to(workspace)
    user = command_user(config)
    if user is not None:
        _hand_over(workspace, user)
    argv = [
        *_bwrap(config, workspace, inside, network=jail.network),
        *_drop_privileges(user),
        *_limits(config),
        *shell,
    ]
    sandbox_env = {**env, "PATH": SANDBOX_PATH, "HOME": "/tmp", "TMPDIR": "/tmp"}
    return Launch(argv, workspace, sandbox_env)


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _bwrap(config: Any, workspace: Path, inside: Path, *, network: bool) -> list[str]:
    argv = [config.bwrap_path, "--die-with-parent", "--new-session"]
    argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not network:
        argv.append("--unshare-net")
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += ["--perms", "0755", "--dir", "/etc"]  # bwrap would make it 0700 (root's)
    for name in ETC_FILES + (ETC_NETWORK_FILES if network else ()):
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    argv += ["--bind", str(workspace), WORKSPACE, "--chdir", str(inside)]
    return argv


def command_user(config: Any = None) -> tuple[int, int] | None:
    """(uid, gid) the sandbox runs commands as when this process is root; None when it
    does not change user (a worker that is not root, or RECEIPT_COMMAND_SANDBOX=host)."""
    config = config or settings.RECEIPT
    if mode(config) == "host" or os.geteuid() != 0:
        return None  # bubblewrap maps the command to this (unprivileged) user
    name = str(config.command_user)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise Unavailable(
            f"{NO_SANDBOX}: RECEIPT_COMMAND_USER {name!r} is not a user on this host; "
            "commands never run as root"
        ) from None
    if entry.pw_uid == 0:
        raise Unavailable(f"{NO_SANDBOX}: RECEIPT_COMMAND_USER {name!r} is root")
    return entry.pw_uid, entry.pw_gid


def _hand_over(workspace: Path, user: tuple[int, int]) -> None:
    """Make the workspace directory the command user's. Its parent is the worker's alone,
    so the entry cannot be swapped for a link; lchown never follows one anyway."""
    info = workspace.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise Unavailable(f"workspace {workspace.name} is not a directory")
    if (info.st_uid, info.st_gid) != user:
        os.lchown(workspace, *user)


def _drop_privileges(user: tuple[int, int] | None) -> list[str]:
    if user is None:
        return ["--"]
    uid, gid = user
    # bubblewrap runs as root here (no user namespace: one made by root would map the
    # command back to root outside), so it lends setpriv just what changing user takes.
    return [
        *("--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"),
        "--",
        SETPRIV,
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]


def _limits(config: Any) -> list[str]:
    # --data bounds writable private memory (what a hog allocates) without refusing the
    # large address-space reservations some runtimes make up front; --nproc counts the
    # command user's processes and threads.
    return [
        PRLIMIT,
        f"--cpu={config.command_cpu_s}",
        f"--data={config.command_memory_mb * MB}",
        f"--nproc={config.command_processes}",
        f"--fsize={config.command_file_mb * MB}",
        "--",
    ]
