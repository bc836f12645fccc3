"""The terminal every command writes to: one rich Console set up once (markup off, soft wrap), and a
progress bar for long loops. Only rich, imported on use, so `prefdata --help` stays fast."""

from __future__ import annotations


def terminal(stderr: bool = False):
    from rich.console import Console

    # markup off: paths, names and messages come from users' data and may hold "[...]"
    return Console(stderr=stderr, highlight=False, soft_wrap=True, markup=False)


def track(items, description: str, total: int):
    """A progress bar for long loops; plain iteration for small ones and non-terminals."""
    if total < 20_000:
        return items
    from rich.progress import track as rich_track

    return rich_track(items, description=description, total=total, console=terminal(stderr=True), transient=True)
