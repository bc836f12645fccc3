"""Independent scorers for the label-direction check (checklist item 8).

A scorer spec (prefdata.base.specs: the syntax `collect --judge` and the trainers' `rewards:` use too)
names a registered backend offering the scorer role, and where verdicts come from. prefdata's own
(prefdata/gate/backends.py):
  verdicts:FILE   a judge's verdicts already made: `id` (or idx, pair_id) and a verdict column
                  (verdict, preferred, gpt_result, pandalm_result, label, winner, vote) holding
                  chosen|rejected|tie, or a|b|tie / 1|2|0 about response_a/response_b
  rm:PATH         a sequence-classification reward model (transformers from_pretrained path or name),
                  each side scored as prompt + response + eos (prefdata/models/reward.py)
  lm:PATH         a causal LM (the policy): mean log-probability of each response given the prompt
  llm:MODEL@URL   an LLM judge behind an OpenAI-compatible endpoint, both orders (prefdata.collect.judging);
  llm:PATH        the same judge in this process (`judge:MODEL@URL`, the old spelling, still works)
  rule:NAME       a verifier (prompt, completion) -> bool | float scores each side; world is the demo's.
                  A verifier that raises, or returns NaN or no number, on a sampled row fails the run in
                  one line (exit 2) naming it, the row id and the error: no row is dropped in silence
A backend registered by another package or the operator's registry file works here the same way: its
own `scorer`, or else its judge on a sample of the pairs (`judged_verdicts`).

Each returns a frame `id, preferred` (chosen|rejected|tie, null when undecided) for
checks.direction.check_label_direction. An unparseable verdict is undecided, never a guess. Scores (rm,
lm, rule) become verdicts by the one rule collect's judges use too (prefdata.base.verdicts): the higher
side is preferred, equal scores are undecided (null, not a tie), and a score that is NaN, an infinity,
no number or the scorer's error fails the run in one line naming the row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import polars as pl

from prefdata.base.errors import UnusableInput
from prefdata.base.verdicts import Decision, attempt, decide
from prefdata.data.formats import RowRejected, parse_vote
from prefdata.data.readers import read_rows
from prefdata.base.specs import Spec

ID_COLUMNS = ("id", "idx", "pair_id")
VERDICT_COLUMNS = ("preferred", "verdict", "gpt_result", "pandalm_result", "label", "winner", "vote", "result")
OPTION = "--scorer"


def parse_spec(spec: str, notice: Callable[[str], None] | None = None) -> Spec:
    """A scorer spec: a registered backend offering the scorer role (prefdata.base.specs)."""
    from prefdata.base.specs import parse_spec as parse

    return parse(spec, "scorer", OPTION, notice)


def check_spec(spec: str) -> Spec:
    """parse_spec, plus what its backend can tell before any work is done (exit 2): a verdicts file, a
    local model folder or a verifier that is not there. A hub name (`org/name`) is left for loading to judge."""
    from prefdata.base.specs import check_spec as check

    return check(spec, "scorer", OPTION)


def _to_preferred(value, label: str | None) -> str | None:
    text = str(value).strip().lower() if value is not None else ""
    if text in ("chosen", "rejected"):
        return text
    try:
        vote = parse_vote(value)
    except RowRejected:
        return None  # an unparseable judge reply is undecided
    if vote is None or vote == "tie":
        return vote
    if label is None:  # plain pairs: "a" names the first side, chosen
        return "chosen" if vote == "a" else "rejected"
    return "chosen" if vote == label else "rejected"


def verdicts_from_file(path: str | Path, comparisons: pl.DataFrame | None = None) -> pl.DataFrame:
    rows = [r.data for r in read_rows(Path(path)) if r.data is not None]
    if not rows:
        raise UnusableInput(f"{path}: no readable verdict rows")
    columns = set(rows[0])
    id_col = next((c for c in ID_COLUMNS if c in columns), None)
    verdict_col = next((c for c in VERDICT_COLUMNS if c in columns), None)
    if id_col is None or verdict_col is None:
        raise UnusableInput(f"{path}: a verdicts file needs an id column ({'/'.join(ID_COLUMNS)}) and a verdict "
                            f"column ({'/'.join(VERDICT_COLUMNS)}); it has {', '.join(sorted(columns))}")
    labels = {} if comparisons is None else dict(comparisons.select("id", "label").iter_rows())
    ids = [str(r.get(id_col)) for r in rows]
    preferred = [_to_preferred(r.get(verdict_col), labels.get(i)) for i, r in zip(ids, rows)]
    return pl.DataFrame({"id": ids, "preferred": preferred}, schema={"id": pl.String, "preferred": pl.String})


def _sample(pairs: pl.DataFrame, sample_size: int, seed: int) -> pl.DataFrame:
    return pairs if pairs.height <= sample_size else pairs.sample(sample_size, seed=seed)


PREFERRED = {"a": "chosen", "b": "rejected", None: None}  # a Decision's side (chosen is shown as a) -> `preferred`
SIDES = {"a": "chosen", "b": "rejected"}


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decisions_frame(ids: list[str], decisions: list[Decision], where: str, what: str = "scorer") -> pl.DataFrame:
    """`id, preferred, score_chosen, score_rejected` of a scorer's decisions, made by the one rule that
    collect's judges use too (prefdata.base.verdicts: the higher score wins; equal scores are undecided,
    null). A decision that is an error (the scorer raised, or gave NaN, an infinity or no number on a
    sampled row) fails the run in one line (UnusableInput, exit 2) naming `where`, the row, the side and
    the error: such a row is never dropped or counted in silence, since the direction check would then
    judge a sample other than the one it reports. (Collect's judges leave that pair undecided instead,
    for humans: a judge never crashes a batch.)"""
    for row_id, decision in zip(ids, decisions, strict=True):
        if decision.error is not None:
            raise UnusableInput(f"{where}: the {what} failed on row {_one_line(repr(row_id), 80)} "
                                f"({SIDES[decision.side]}): {decision.error}; fix the {what} (or the row), or "
                                "check this data with another scorer")
    scores = [d.scores for d in decisions]
    return pl.DataFrame({"id": ids, "preferred": [PREFERRED[d.label] for d in decisions],
                         "score_chosen": [s[0] for s in scores], "score_rejected": [s[1] for s in scores]},
                        schema={"id": pl.String, "preferred": pl.String, "score_chosen": pl.Float64,
                                "score_rejected": pl.Float64})


def _from_scores(ids: list[str], chosen, rejected, tie_margin: float, where: str) -> pl.DataFrame:
    """A model's scores (a reward model's, or mean log-probabilities) as verdicts, by the one rule."""
    return decisions_frame(ids, [decide(c, r, tie_margin) for c, r in zip(chosen, rejected)], where)


def reward_model_verdicts(path: str, pairs: pl.DataFrame, sample_size: int = 500, seed: int = 0,
                          batch_size: int = 16, tie_margin: float = 0.0) -> pl.DataFrame:
    """Each side scored by the reward model as TRL trained it (prefdata/models/reward.py)."""
    from prefdata.models.reward import RewardModelScorer

    score = RewardModelScorer(path, batch_size=batch_size)
    sample = _sample(pairs, sample_size, seed)
    prompts = sample["prompt"].to_list()
    return _from_scores(sample["id"].to_list(), score(prompts, sample["chosen"].to_list()),
                        score(prompts, sample["rejected"].to_list()), tie_margin, f"--scorer rm:{path}")


def policy_logprob_verdicts(path: str, pairs: pl.DataFrame, sample_size: int = 500, seed: int = 0,
                            batch_size: int = 8, tie_margin: float = 0.0) -> pl.DataFrame:
    """Mean per-token log p(response | prompt) under a causal LM: the policy's own preference. The
    response is scored as written, without an eos (prefdata/models/logprobs.py)."""
    from prefdata.models.loading import load_causal_lm, load_tokenizer
    from prefdata.models.logprobs import mean_logprobs

    tokenizer = load_tokenizer(path)
    model = load_causal_lm(path)
    sample = _sample(pairs, sample_size, seed)
    prompts = sample["prompt"].to_list()

    def score(responses: list[str]) -> list[float]:
        return mean_logprobs(model, tokenizer, list(zip(prompts, responses)), batch_size, eos=False)

    return _from_scores(sample["id"].to_list(), score(sample["chosen"].to_list()), score(sample["rejected"].to_list()),
                        tie_margin, f"--scorer lm:{path}")


def judged_verdicts(judge, pairs: pl.DataFrame, sample_size: int = 500, seed: int = 0) -> pl.DataFrame:
    """A judge (prefdata.collect.judging: an LLM judge, served or in process, or another backend's) on a
    sample, chosen shown as A (an LLM judge sees both orders, so that is fair); undecided verdicts
    (inconsistent across orders, unparseable, failed) stay undecided, as in collect."""
    from prefdata.collect.judging import PairToJudge

    sample = _sample(pairs, sample_size, seed)
    items = [PairToJudge(p, c, r, pair_id=i) for i, p, c, r in sample.select("id", "prompt", "chosen", "rejected").iter_rows()]
    verdicts = judge.judge(items)
    preferred = [{"a": "chosen", "b": "rejected", "tie": "tie"}.get(v.label) for v in verdicts]
    return pl.DataFrame({"id": [v.pair_id for v in verdicts], "preferred": preferred},
                        schema={"id": pl.String, "preferred": pl.String})


def rule_verdicts(target: str, pairs: pl.DataFrame, sample_size: int = 500, seed: int = 0) -> pl.DataFrame:
    """A verifier scores each side (True/False or a number), decided by the one rule collect's RuleJudge
    uses (prefdata.base.verdicts): the higher side is preferred; equal (both pass, both fail) is
    undecided. A verifier that raises or returns NaN (or what is not a finite number) on any sampled row
    fails the run with one line (UnusableInput, exit 2) naming the verifier, the row id and the error."""
    from prefdata.base.registry import load, resolve

    verify = load("verifier", target, "--scorer rule")
    resolved = resolve("verifier", target, "--scorer rule")
    name = target if resolved == target else f"{target} ({resolved})"
    sample = _sample(pairs, sample_size, seed)
    rows = sample.select("id", "prompt", "chosen", "rejected").iter_rows()
    decisions = [decide(attempt(verify, p, c), attempt(verify, p, r)) for _, p, c, r in rows]
    return decisions_frame(sample["id"].to_list(), decisions, f"--scorer rule:{name}", "verifier")


def verdicts_for(spec: str, pairs: pl.DataFrame, comparisons: pl.DataFrame | None = None, sample_size: int = 500) -> pl.DataFrame:
    """The verdicts of the scorer `spec` names, from its backend (prefdata.base.specs): its own `scorer`,
    or else its judge on a sample of the pairs."""
    from prefdata.base.specs import backend, silent

    # notices were printed when the command checked the spec (check_spec): not once per shard here
    parsed = parse_spec(spec, notice=silent)
    found = backend(parsed.kind, OPTION)
    scorer = getattr(found, "scorer", None)
    if scorer is None:
        return judged_verdicts(found.judge(parsed, {}), pairs, sample_size)
    frame = scorer(parsed, pairs, comparisons, sample_size)
    if not isinstance(frame, pl.DataFrame) or not {"id", "preferred"} <= set(frame.columns):
        raise UnusableInput(f"{OPTION} {spec!r}: its backend's scorer gave a {type(frame).__name__}, not a frame with "
                            "the columns id and preferred (prefdata/base/specs.py)")
    return frame
