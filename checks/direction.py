"""Checklist item 8: chosen beats rejected by an independent scorer.

The scorer runs elsewhere (prefdata.gate.scoring: a reward model, a policy's log-probabilities, an LLM
judge, or verdicts a judge already gave); this check only reads its verdicts, so it stays pure.
"""

from __future__ import annotations

import polars as pl

from prefdata.checks.base import CheckResult, default, skip
from prefdata.checks.frames import has_text, text_chars

CHECK_ID = "label_direction"
# Seed checklist item 8; 0.6 is the same floor the seed uses for agreement (item 4).
DEFAULT_MIN_AGREEMENT = default("label_direction", "min_agreement")  # set in checks/checklist.yaml
VERDICTS = ("chosen", "rejected", "tie")


def longer_wins(pairs: pl.DataFrame) -> float | None:
    """How often simply picking the longer response matches the label: the share of pairs whose
    chosen side is longer (in characters), among pairs whose sides differ in length. The baseline a
    scorer's agreement should beat (RewardBench users compute it by hand); None when no pair has
    sides of different lengths."""
    if pairs.height == 0 or not (has_text(pairs, "chosen") and has_text(pairs, "rejected")):
        return None
    c, r = text_chars(pairs, "chosen").fill_null(0), text_chars(pairs, "rejected").fill_null(0)
    counts = pairs.select(longer=(c > r).sum(), shorter=(c < r).sum()).row(0)
    return counts[0] / (counts[0] + counts[1]) if counts[0] + counts[1] else None


def check_label_direction(
    pairs: pl.DataFrame, verdicts: pl.DataFrame | None, min_agreement: float = DEFAULT_MIN_AGREEMENT
) -> CheckResult:
    """verdicts: `id`, `preferred` in chosen|rejected|tie (null = the scorer could not decide).

    Agreement = share of decided verdicts (not tie, not null) that prefer the chosen response.
    """
    if verdicts is None:
        return skip(CHECK_ID, "no independent scorer: pass --scorer rm:PATH, lm:PATH, llm:MODEL@URL, llm:PATH, "
                              "rule:NAME or verdicts:FILE",
                    min_agreement)
    scored = pairs.select("id").join(verdicts.select("id", "preferred"), on="id", how="inner")
    decided = scored.filter(pl.col("preferred").is_in(["chosen", "rejected"]))
    if decided.height == 0:
        return skip(CHECK_ID, f"the scorer decided none of the {scored.height} pairs it saw", min_agreement)
    agreement = float((decided["preferred"] == "chosen").mean())
    against = decided.filter(pl.col("preferred") == "rejected")["id"].to_list()
    # over the same decided pairs as the agreement, so the two figures compare
    baseline = longer_wins(pairs.join(decided.select("id"), on="id", how="semi"))
    details = {
        "longer_wins": baseline,
        "n_scored": scored.height,
        "n_decided": decided.height,
        "n_ties": int((scored["preferred"] == "tie").sum()),
        "n_undecided": int(scored["preferred"].is_null().sum()),
        "n_offending": len(against),
    }
    if agreement >= min_agreement:
        message = f"the scorer prefers chosen in {agreement:.1%} of {decided.height} decided pairs"
    elif agreement <= 1 - min_agreement:
        message = (f"labels look flipped: the scorer prefers the rejected response in {1 - agreement:.1%} "
                   f"of {decided.height} decided pairs")
    else:
        message = f"the scorer prefers chosen in only {agreement:.1%} of {decided.height} decided pairs"
    if baseline is not None:
        message += f"; picking the longer response would match the labels in {baseline:.1%}"
    status = "pass" if agreement >= min_agreement else "fail"
    return CheckResult(CHECK_ID, status, agreement, min_agreement, tuple(against), message, details)
