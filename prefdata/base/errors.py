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


# Checks whose failures name rows that `prefdata filter --drop` can remove (prefdata/gate/filtering.py's list).
FILTERABLE = ("exact_duplicates", "near_duplicates", "length_ratio", "degenerate_pairs", "answer_leakage", "safety",
              "split_isolation", "decontamination", "label_audit")


def ways_out(ref: str, failing: list[str]) -> str:
    """Every way past a checklist refusal, for its message: filter the rows the failing row checks name,
    waive a check with a reason, or bring more or other data; then publish again."""
    name = ref.partition("@")[0]
    rows = [c for c in failing if c in FILTERABLE]
    others = [c for c in failing if c not in FILTERABLE]
    steps = []
    if rows:
        benchmark = " --benchmark FILE" if "decontamination" in rows else ""  # the benchmarks it was checked against
        steps.append(f"`prefdata filter {ref} --drop {','.join(rows)}{benchmark}` quarantines the rows they name, and "
                     "the child version can be published")
    example = (others or failing or ["CHECK"])[0]
    example = "gx" if example.startswith("gx.") else example  # GX's expectations are waived together, as `gx`
    steps.append(f"a check that does not apply can be waived with its reason in a --config file "
                 f"(checks: {{{example}: {{waive: \"why\"}}}}), recorded in the signed report")
    steps.append(f"or import or collect more data as a new version of {name}")
    return "; ".join(steps)
