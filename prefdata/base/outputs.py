"""Where a command writes its results (--json, --out, --report-dir, --output-dir), checked before the
command does any work: a path that cannot be written is the user's to fix (exit 2), never an
internal error (exit 3) after minutes of work, or after a version was already written."""

from __future__ import annotations

import os
from pathlib import Path

from prefdata.base.errors import UnusableInput


def writable_file(path: Path | None, option: str) -> None:
    """An output file the command writes at its end, refused before any work (exit 2) when it cannot
    be written there: a folder in its place, a file where its folder should be, a folder not writable."""
    if path is None:
        return
    if path.is_dir():
        raise UnusableInput(f"{option} {path}: is a folder; name a file")
    _writable_folder(path.parent, f"{option} {path}")


def writable_dir(path: Path | None, option: str) -> None:
    """An output folder, refused before any work (exit 2) when it is a file or cannot be made or written."""
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise UnusableInput(f"{option} {path}: is a file, not a folder")
    _writable_folder(path, f"{option} {path}")


def _writable_folder(folder: Path, what: str) -> None:
    probe = folder.absolute()
    while not probe.exists():  # the first folder that exists is where the missing ones would be made
        probe = probe.parent
    if not probe.is_dir():
        raise UnusableInput(f"{what}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UnusableInput(f"{what}: {probe} is not writable by this user")
