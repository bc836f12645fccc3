"""One rule from a pair of scores to a verdict (prefdata.base.verdicts), the same on every path: collect's
judges (RuleJudge, RewardModelJudge), `check --scorer` (rule:, rm:, lm:) and the trainers' accuracies.
Equal scores are undecided (never a tie); NaN, an infinity, what is not a number and a scorer's error
are an error, never a preference."""

from __future__ import annotations

import math

import polars as pl
import pytest

from prefdata.base.errors import UnusableInput
from prefdata.base.verdicts import attempt, decide


@pytest.mark.parametrize(("a", "b", "label", "reason"), [
    (1.0, 0.0, "a", "higher"),
    (0.0, 1.0, "b", "higher"),
    (True, False, "a", "higher"),
    (True, True, None, "both_pass"),
    (False, False, None, "both_fail"),
    (0.5, 0.5, None, "equal_scores"),
    (1, True, None, "equal_scores"),  # equal, but not both booleans
    (math.nan, 1.0, None, "error"),
    (1.0, math.inf, None, "error"),
    (-math.inf, -math.inf, None, "error"),  # equal infinities are no tie either
    ("yes", 1.0, None, "error"),
    (None, 1.0, None, "error"),
    (ValueError("no"), 1.0, None, "error"),
])
def test_the_rule(a, b, label, reason):
    decision = decide(a, b)
    assert (decision.label, decision.reason) == (label, reason)
    assert (decision.confidence is None) == (label is None)
    assert (decision.error is None) == (reason != "error")


def test_an_error_names_its_side_and_what_went_wrong():
    assert (decide(1.0, math.nan).side, decide(1.0, math.nan).error) == ("b", "it returned nan, not a finite number")
    assert decide("yes", 1.0).error == "it returned 'yes', not True/False or a number"

    def raises(prompt, completion):
        raise KeyError(f"no answer for\n{prompt}")

    failed = decide(attempt(raises, "p", "c"), 0.0)
    assert (failed.side, failed.error) == ("a", "KeyError: 'no answer for\\np'")
    assert failed.scores == () and decide(0.5, 0.5).scores == (0.5, 0.5)


def test_margin_and_confidence():
    assert decide(1.0, 0.9, tie_margin=0.2).reason == "equal_scores"
    assert decide(1.0, 0.5, tie_margin=0.2).label == "a"
    assert decide(2.0, 0.0, reason="verifier").confidence == 1.0
    assert decide(2.0, 0.0, bradley_terry=True).confidence == pytest.approx(1 / (1 + math.exp(-2.0)))


# -- the same spec decides alike in collect and in check --scorer -------------------------------------

RULES = '''
import math

def score(prompt, completion):
    if prompt == "unscorable":
        raise ValueError("cannot score this prompt")
    if completion == "nan":
        return math.nan
    return {"good": 1.0, "fine": 0.5, "also fine": 0.5}.get(completion, 0.0)
'''
# (id, prompt, response_a = chosen, response_b = rejected)
ROWS = [("p1", "q1", "good", "bad"), ("p2", "q2", "bad", "good"), ("p3", "q3", "fine", "also fine"),
        ("p4", "q4", "nan", "good"), ("p5", "unscorable", "good", "bad")]


@pytest.fixture()
def scored(tmp_path, monkeypatch, register):
    (tmp_path / "one_rule.py").write_text(RULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    register(verifiers={"scored": "one_rule:score"})


def collect_verdicts(spec: str, rows):
    """The collect path: the judge the collect flow builds for `--judge SPEC` (commands.collect.judge_params,
    the flow's Judge, then flows.collect.make_judge: the rule backend's RuleJudge)."""
    from prefdata.collect.judging import PairToJudge, RuleJudge
    from prefdata.commands.collect import judge_params
    from prefdata.flows.collect import make_judge
    from prefdata.flows.params import Judge

    judge = make_judge(Judge(**judge_params(spec)).identity(), {"base_url": None})
    assert isinstance(judge, RuleJudge)
    return judge.judge([PairToJudge(p, a, b, pair_id=i) for i, p, a, b in rows])


def check_verdicts(spec: str, rows):
    """The check --scorer path (gate.scoring.verdicts_for, what the gate hands checks.direction)."""
    from prefdata.gate.scoring import verdicts_for

    pairs = pl.DataFrame(rows, schema=["id", "prompt", "chosen", "rejected"], orient="row")
    return verdicts_for(spec, pairs)


def test_the_same_rule_spec_gives_the_same_verdicts_through_collect_and_check(scored):
    collected = collect_verdicts("rule:scored", ROWS)
    assert [(v.label, v.reason) for v in collected] == [
        ("a", "verifier"), ("b", "verifier"), (None, "equal_scores"), (None, "error"), (None, "error")]

    # the pairs the verifier scores: the same verdicts, equal scores undecided on both paths (not a tie)
    checked = check_verdicts("rule:scored", ROWS[:3])
    to_check = {"a": "chosen", "b": "rejected", None: None}
    assert checked["preferred"].to_list() == [to_check[v.label] for v in collected[:3]] == ["chosen", "rejected", None]
    assert list(zip(checked["score_chosen"], checked["score_rejected"])) == [v.scores for v in collected[:3]]

    # NaN, and a verifier that raises: an error on both paths, never a preference. Collect keeps the pair
    # undecided for humans (a judge never crashes a batch); check refuses the run naming the row, with the
    # very error the collect verdict keeps.
    for row, verdict in zip(ROWS[3:], collected[3:]):
        with pytest.raises(UnusableInput) as refused:
            check_verdicts("rule:scored", [*ROWS[:3], row])
        message = str(refused.value)
        assert f"--scorer rule:scored (one_rule:score): the verifier failed on row {row[0]!r} (chosen)" in message, message
        assert verdict.error in message and "\n" not in message
    assert collected[3].error == "it returned nan, not a finite number"
    assert collected[4].error == "ValueError: cannot score this prompt"


def test_a_reward_model_decides_by_the_same_rule_in_both_paths(monkeypatch):
    """Collect's RewardModelJudge and `--scorer rm:PATH`: equal scores undecided, a NaN score an error."""
    import prefdata.models.reward as reward
    from prefdata.collect.judging import PairToJudge, RewardModelJudge
    from prefdata.gate.scoring import reward_model_verdicts

    table = {"good": 2.0, "bad": -1.0, "fine": 0.25, "also fine": 0.25, "nan": math.nan}

    class Scorer:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, prompts, responses):
            return [table[r] for r in responses]

    monkeypatch.setattr(reward, "RewardModelScorer", Scorer)
    rows = ROWS[:4]
    collected = RewardModelJudge("rm").judge([PairToJudge(p, a, b, pair_id=i) for i, p, a, b in rows])
    assert [(v.label, v.reason) for v in collected] == [("a", "margin"), ("b", "margin"), (None, "equal_scores"),
                                                        (None, "error")]
    pairs = pl.DataFrame(rows[:3], schema=["id", "prompt", "chosen", "rejected"], orient="row")
    assert reward_model_verdicts("rm", pairs)["preferred"].to_list() == ["chosen", "rejected", None]
    with pytest.raises(UnusableInput, match=r"--scorer rm:rm: the scorer failed on row 'p4' \(chosen\): it returned nan"):
        reward_model_verdicts("rm", pl.DataFrame(rows, schema=["id", "prompt", "chosen", "rejected"], orient="row"))


def test_the_trainers_accuracy_counts_what_the_rule_decides_for_chosen(monkeypatch):
    import prefdata.models.logprobs as logprobs
    from prefdata.trainers.evaluation import preference_accuracy

    scores = {"good": -0.5, "bad": -2.0, "fine": -1.0, "also fine": -1.0, "nan": math.nan}
    monkeypatch.setattr(logprobs, "mean_logprobs", lambda model, tokenizer, rows, *a, **k: [scores[r] for _, r in rows])
    pairs = [{"prompt": p, "chosen": a, "rejected": b} for _, p, a, b in ROWS[:4]]
    assert preference_accuracy(None, None, pairs) == 1 / 4  # only p1: p2 lost, p3 equal, p4 NaN
