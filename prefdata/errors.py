"""Errors a user can act on. The CLI prints them as one line and exits with their code.

Exit codes across prefdata: 0 success, 1 a gate failed (checks, verify), 2 unusable input,
3 an internal error (a bug: rerun with --verbose and report the traceback), 4 a disk is full.
"""

from __future__ import annotations


class PrefdataError(Exception):
    """Something the user can fix; printed without a traceback."""

    exit_code = 2


class UnusableInput(PrefdataError):
    """A file, format, column or name that cannot be used at all."""

    exit_code = 2


class GateFailed(PrefdataError):
    """A check, verification or policy refused the data."""

    exit_code = 1


class NoSpace(PrefdataError):
    """A disk (or quota) filled up while prefdata wrote to it; nothing half-written is left."""

    exit_code = 4
