"""Private temporary folders (the shards of a big `check FILE`, a version's pinned copy, filter's
spilled rows), named `prefdata-KIND-PID-XXXX` in the temporary folder.

Each is removed when its work ends, when the process exits (SIGTERM included: the CLI turns it into
an orderly exit), and, when the process was killed outright (SIGKILL, a crash), by the next prefdata
process that makes one: a folder whose pid is no live process is a dead run's leftovers.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_NAME = re.compile(r"prefdata-[a-z]+-(\d+)-")


def scratch_dir(kind: str) -> Path:
    """A new folder only this user can read (0700), removed at exit; dead runs' folders go first."""
    sweep()
    path = Path(tempfile.mkdtemp(prefix=f"prefdata-{kind}-{os.getpid()}-"))
    atexit.register(shutil.rmtree, path, True)
    return path


@contextmanager
def scratch(kind: str) -> Iterator[Path]:
    """scratch_dir, removed as soon as the block ends."""
    path = scratch_dir(kind)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep() -> list[Path]:
    """Remove the scratch folders of processes that are gone; returns them."""
    removed = []
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return removed
    for entry in entries:
        found = _NAME.match(entry.name)
        if not found or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue  # another user's: theirs to remove
        except OSError:
            continue
        if not alive(int(found[1])):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def alive(pid: int) -> bool:
    """Whether `pid` is a live process here (a zombie is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    try:  # a killed process its parent has not reaped yet is a zombie: dead for our purpose
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True
