"""The one rule that turns a pair of scores into a verdict, wherever two responses are scored: a
verifier's (`rule:NAME`: collect's RuleJudge and `check --scorer`), a reward model's (collect's
RewardModelJudge and `--scorer rm:PATH`), a policy's mean log-probabilities (`--scorer lm:PATH`, the
trainers' held-out preference and pairwise accuracy).

    decide(score_a, score_b)    a Decision: "a" or "b" (the higher score), or undecided with its reason
    attempt(scorer, *args)      the scorer's value, or the exception it raised (decide reads it as an error)

A backend (prefdata.base.specs) that turns scores into verdicts decides by this rule too: prefdata's own
(prefdata/gate/backends.py) all do, through the judges and scorers above.

The rule, the same on every path:

    one score higher                    label "a" | "b", the caller's reason ("verifier", "margin")
    equal (|a - b| <= tie_margin)       undecided: "both_pass" / "both_fail" when both are booleans,
                                        else "equal_scores"
    a scorer that raised, or gave NaN,  undecided: "error", with what went wrong and on which side;
    an infinity, or not a number        never a preference (`nan > x` is False: a NaN would make the
                                        other side win) and never a tie

Why equal scores are undecided, not a tie. A tie is a judgement that both responses are equally good (a
human's vote, an LLM judge's [[tie]]) and enters the data as a label. Equal scores are no judgement at
all: a verifier that passes (or fails) both says nothing about which answer is better, and a model that
scores both the same has no preference to report. Undecided sends such a pair on, to the next judge of a
cascade and to human annotators, who can prefer one (the chat demo's both-fail pairs go there); the
label-direction check leaves ties and undecided pairs out of its agreement alike, so its figure is the
same either way.

What a path does with an error verdict is its own policy, stated where it applies: collect's judges never
crash a batch (the pair stays undecided, reason "error", routed to humans and counted in the judge's
report); `check --scorer` refuses the run in one line naming the row (prefdata.gate.scoring), since its
figure would otherwise be over a sample other than the one it reports; the trainers' accuracies count an
undecided pair as not ranked right.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

UNDECIDED_REASONS = ("both_pass", "both_fail", "equal_scores", "error")


@dataclass(frozen=True)
class Decision:
    label: str | None                  # "a" | "b"; None: undecided (never "tie": see the module's doc)
    reason: str                        # decided: the caller's reason; else one of UNDECIDED_REASONS
    confidence: float | None           # of the label: 1.0, or sigmoid(|margin|) (Bradley-Terry); None: undecided
    scores: tuple = ()                 # (score_a, score_b) as finite floats; () on an error
    error: str | None = None           # on an error: what went wrong, in one line
    side: str | None = None            # on an error: the side whose score failed, "a" or "b"

    @property
    def undecided(self) -> bool:
        return self.label is None


def attempt(scorer: Callable[..., Any], *args: Any) -> Any:
    """`scorer(*args)`, or the exception it raised: a scorer's failure is a value `decide` reads as an
    error, so it is decided by the same rule as every other score."""
    try:
        return scorer(*args)
    except Exception as error:  # noqa: BLE001 - the scorer's own error, whatever its type: the user's code
        return error


def _one_line(text: Any, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy's too, without importing it


def _score(value: Any) -> tuple[float | None, str | None]:
    """(the finite score, None) or (None, what is wrong with the value)."""
    if isinstance(value, BaseException):
        return None, f"{type(value).__name__}: {_one_line(value)}"
    try:
        score = float(value)
    except (TypeError, ValueError, OverflowError):
        return None, f"it returned {_one_line(repr(value), 80)}, not True/False or a number"
    if not math.isfinite(score):
        return None, f"it returned {score}, not a finite number"
    return score, None


def decide(score_a: Any, score_b: Any, tie_margin: float = 0.0, reason: str = "higher",
           bradley_terry: bool = False) -> Decision:
    """The verdict of two scores (see the module's doc). A score is a bool, a number, or an exception
    (from `attempt`). `reason` names a decided verdict's source; `bradley_terry`: the scores are a
    reward model's logits, so the confidence is sigmoid(|margin|), the modelled probability that the
    higher-scored side wins (else 1.0: a rule is not uncertain)."""
    scores = []
    for side, value in (("a", score_a), ("b", score_b)):
        score, error = _score(value)
        if error is not None:
            return Decision(None, "error", None, (), error, side)
        scores.append(score)
    a, b = scores
    margin = a - b
    if abs(margin) <= tie_margin:
        both_bool = _is_bool(score_a) and _is_bool(score_b)
        return Decision(None, ("both_pass" if a else "both_fail") if both_bool else "equal_scores", None, (a, b))
    confidence = 1 / (1 + math.exp(-abs(margin))) if bradley_terry else 1.0
    return Decision("a" if margin > 0 else "b", reason, confidence, (a, b))
