"""Opening a file that must be a regular file, and reading no more of it than a bound.

A path a user or a store hands over can name a FIFO (whose open blocks until a writer comes), a
device (/dev/zero never ends), a socket or a folder. Each is told apart by its mode *before* it is
opened, and the open file is checked again (fstat), so one swapped in between is refused as well;
what is read stops at a bound, so a file that grows while it is read cannot fill memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from prefdata.base.errors import UnusableInput

# A card, a checklist or a trainer config is a few KB; 16 MiB is far past any real one and still
# small enough to hold, decode and parse without a thought.
MAX_SIDE_FILE_BYTES = 16 << 20


class NotRegularFile(Exception):
    """A path that is not a regular file; `kind` says what it is ("a FIFO (named pipe)", ...)."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path, self.kind = path, kind


def kind_of(mode: int) -> str | None:
    """What a file's mode says it is, when that is not a regular file; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return ("a symlink" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode)
            else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def open_regular(path: str | os.PathLike, follow_symlinks: bool = False) -> BinaryIO:
    """`path` opened for reading, only if it is a regular file. Without `follow_symlinks` a symlink is
    refused too (lstat, then O_NOFOLLOW). Raises NotRegularFile, or OSError (missing, no permission)."""
    path = os.fspath(path)
    mode = (os.stat if follow_symlinks else os.lstat)(path).st_mode
    if kind_of(mode):  # never opened: opening a FIFO blocks, opening a device may do anything
        raise NotRegularFile(path, kind_of(mode))
    # O_NONBLOCK: a FIFO swapped in after the stat opens at once (and is refused below) instead of blocking
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if kind_of(mode):
            raise NotRegularFile(path, kind_of(mode))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_at_most(handle: BinaryIO, limit: int, block: int = 1 << 20) -> bytes:
    """Up to `limit` + 1 bytes of a stream: one more than allowed shows it was longer, without reading on."""
    chunks, left = [], limit + 1
    while left > 0:
        chunk = handle.read(min(block, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def open_named(path: str | os.PathLike, where: str, fix: str, missing: str = "no such file") -> BinaryIO:
    """A file a user named (symlinks followed) opened when it is a regular file; else UnusableInput, one
    line: `where` (e.g. "--card /dev/zero"), what the path is or why it cannot be read, and `fix`."""
    try:
        return open_regular(path, follow_symlinks=True)
    except NotRegularFile as exc:
        raise UnusableInput(f"{where} is {exc.kind}, not a regular file{fix} (save a stream to a file first)") from None
    except FileNotFoundError:
        raise UnusableInput(f"{where}: {missing}") from None
    except OSError as exc:
        raise UnusableInput(f"{where}: cannot read it ({exc.strerror})") from None


def read_side_file(path: str | os.PathLike, what: str, limit: int = MAX_SIDE_FILE_BYTES) -> str:
    """A side input a user names (a card, a checklist or trainer config, reference prompts) as UTF-8
    text: a regular file, or a symlink to one, of at most `limit` bytes. Anything else is one line,
    UnusableInput (exit 2), naming the option (`what`, e.g. "--card") and its file, what is wrong
    and what to pass instead."""
    path = Path(path)
    with open_named(path, f"{what} {path}", ": pass the path of a regular file") as handle:
        size = os.fstat(handle.fileno()).st_size
        data = b"" if size > limit else read_at_most(handle, limit)
    if size > limit or len(data) > limit:
        raise UnusableInput(f"{what} {path} is larger than {limit / (1 << 20):g} MiB, more than prefdata reads for "
                            "it: pass a smaller file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnusableInput(f"{what} {path} is not UTF-8 text ({exc})") from None
