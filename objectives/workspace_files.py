"""Files the worker reads and writes inside a workspace, where commands write too (Q-5).

A command may replace any directory it can write with a symlink, at any moment (another
task of the same objective runs beside it). A root worker that followed such a link would
write, read or chown whatever the link names. So every path in a workspace is walked
here from the workspace's own directory, one component at a time, with O_NOFOLLOW: a
symlink anywhere on the way is an error, never followed. Files are created with O_EXCL
(after removing what was there) and read only when they are a regular file with one link.
The workspace directory itself sits in RECEIPT_WORKSPACE_DIR, which only the worker
writes, so it is opened by path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_READ = 1 << 20  # a result file is small; more is refused


class UnsafePath(Exception):
    """A path in the workspace is not what the worker made: a symlink, a hard link."""


@contextlib.contextmanager
def directory(
    workspace: Path, parts: Sequence[str], *, owner: tuple[int, int] | None = None
) -> Iterator[int]:
    """An fd of `workspace/parts...`, each directory made if missing and, with `owner`,
    made that user's (the command's, so it can write there). Closed on exit."""
    fd = os.open(workspace, DIR_FLAGS)
    try:
        for part in parts:
            if part in ("", ".", "..") or "/" in part:
                raise UnsafePath(f"{part!r} is not a plain name")
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as error:  # ELOOP, ENOTDIR: a link or a file put in its place
                raise UnsafePath(f"{part!r} in {workspace} is not a directory") from error
            os.close(fd)
            fd = child
            if owner is not None:
                os.fchown(fd, *owner)
        yield fd
    finally:
        os.close(fd)


def write(dir_fd: int, name: str, data: bytes) -> None:
    """Create `name` afresh in the directory `dir_fd` with `data`."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o644,
        dir_fd=dir_fd,
    )
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def remove(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def read(dir_fd: int, name: str) -> bytes | None:
    """The content of regular file `name`, None when there is none; UnsafePath when it is
    a link, is linked elsewhere too, or is larger than MAX_READ."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UnsafePath(f"{name} is not a regular file") from error
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise UnsafePath(f"{name} is not a regular file of its own")
        data = handle.read(MAX_READ + 1)
    if len(data) > MAX_READ:
        raise UnsafePath(f"{name} is larger than {MAX_READ} bytes")
    return data


def exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
