"""Replacing a file in one step: every file ggmlpy saves is written through `atomic_write`."""
from __future__ import annotations

import contextlib
import os
import tempfile

from ..errors import GGMLError


def _file_mode(path: str) -> int:
    """The mode the replaced file had, or what a new file gets under the current umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike):
    """Yield a temporary path beside `path`; when the block succeeds, its file (flushed to disk)
    replaces `path` in one rename. A failure, a full disk or a killed process leaves the old
    file as it was, and a failure (not a kill) leaves no temporary file behind. An OSError
    becomes a GGMLError naming the file."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    except OSError as e:
        raise GGMLError(f"could not write {path}: {e}") from e
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode(path))  # mkstemp made it private
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise GGMLError(f"could not write {path}: {e}; the previous file, if any, is unchanged") from e
        raise
    with contextlib.suppress(OSError):  # the rename itself, on disk (not possible everywhere)
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
