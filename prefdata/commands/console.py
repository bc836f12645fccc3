"""The terminal every command writes to: one rich Console set up once (markup off, soft wrap), a
progress bar for long loops, and Prefect's console lines without the tracebacks of failures the
command reports itself. Only rich (and Prefect, for the last), imported on use, so `prefdata --help`
stays fast."""

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


def _not_reported_by_the_command(record) -> bool:
    """False for a log record carrying a PrefdataError (prefdata.base.errors): bad input or a gate
    saying no, which the command prints as its one line with its exit code."""
    from prefdata.base.errors import PrefdataError

    return not (record.exc_info and isinstance(record.exc_info[1], PrefdataError))


def quiet_reported_failures() -> None:
    """Prefect logs a flow or task that raises, traceback and all, to the console before the command
    can print its one line; for the failures the command reports (a PrefdataError) that is noise
    that looks like a crash. Its console handler drops those records; any other exception keeps its
    traceback, and the records still reach Prefect's API (the UI shows them)."""
    import logging

    from prefect.logging.configuration import setup_logging
    from prefect.logging.handlers import PrefectConsoleHandler

    setup_logging()  # now, not at the first flow run: the handler to filter exists from here on
    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler) and _not_reported_by_the_command not in handler.filters:
            handler.addFilter(_not_reported_by_the_command)
