"""Independent scorers for label_direction: a real judge's verdicts, reward models, policy log-probs."""

from __future__ import annotations

import polars as pl
import pytest

from prefdata.checks.direction import check_label_direction
from prefdata.base.errors import UnusableInput
from prefdata.data.importer import import_file
from prefdata.gate.scoring import check_spec, parse_spec, verdicts_for, verdicts_from_file
from prefdata.base.specs import Spec

PAIRS = pl.DataFrame({
    "id": ["p1", "p2", "p3"],
    "prompt": ["q: 12+30=", "q: 40+2=", "rev: abc="],
    "chosen": ["42", "42", "cba"],
    "rejected": ["41", "24", "abc"],
})


def test_gpt35_verdicts_agree_with_pandalm_humans_and_catch_flipped_labels(shared_data):
    """GPT-3.5's published verdicts on PandaLM are a real independent judge of the same rows (993 kept: 6 have a JSON `true` as a response and are quarantined)."""
    data = import_file(shared_data / "pandalm" / "testset-v1.json")
    judge_file = shared_data / "pandalm" / "gpt-3.5-turbo-testset-v1.json"
    result = check_label_direction(data.pairs, verdicts_from_file(judge_file, data.comparisons))
    assert result.status == "pass" and 0.75 < result.metric < 0.9
    agreement = result.metric
    assert result.details["n_undecided"] > 0  # unparseable judge replies stay undecided, not guessed

    swap = {"a": "b", "b": "a"}
    flipped = data.comparisons.with_columns(pl.col("label").replace(swap))
    flipped_pairs = data.pairs.with_columns(chosen=pl.col("rejected"), rejected=pl.col("chosen"))
    result = check_label_direction(flipped_pairs, verdicts_from_file(judge_file, flipped))
    assert result.status == "fail" and result.message.startswith("labels look flipped")
    assert pytest.approx(result.metric, abs=1e-9) == 1 - agreement  # every decided verdict now disagrees


@pytest.mark.parametrize("kind", ["rm", "lm"])
def test_model_scorers_load_by_path_and_score_every_pair(kind, tiny_reward_model, tiny_llama):
    path = tiny_reward_model if kind == "rm" else tiny_llama
    verdicts = verdicts_for(f"{kind}:{path}", PAIRS)
    assert verdicts["id"].to_list() == ["p1", "p2", "p3"]
    assert set(verdicts["preferred"]) <= {"chosen", "rejected", None}  # equal scores: undecided, never a tie
    scores = verdicts.select("score_chosen", "score_rejected").to_numpy()
    assert scores.shape == (3, 2) and (scores == scores).all()  # finite numbers, no NaN
    # the verdict follows the scores
    expected = ["chosen" if c > r else "rejected" if r > c else None for c, r in scores]
    assert verdicts["preferred"].to_list() == expected


def test_bad_scorer_specs():
    for spec in ("oracle:x", "rm", "llm:", "rule:"):
        with pytest.raises(UnusableInput, match="use llm:MODEL@http://HOST:PORT/v1 or llm:PATH, optionally "
                                                ":TEMPLATE-vN; rm:PATH; lm:PATH; rule:NAME; verdicts:FILE; or world"):
            parse_spec(spec)
    with pytest.raises(UnusableInput, match="a served judge is llm:MODEL@http"):
        parse_spec("llm:judge@ftp://host")
    with pytest.raises(UnusableInput, match="not a model folder .* or .gguf file"):
        check_spec("llm:./no/such/judge")
    with pytest.raises(UnusableInput, match="--scorer rule 'no_such_module:verify' is not a registered verifier"):
        check_spec("rule:no_such_module:verify")


def test_one_spec_syntax_with_collect_and_the_old_spelling_still_read():
    """check --scorer reads collect --judge's syntax (prefdata.base.specs); judge:MODEL@URL, its own spelling
    before, still works with a one-line notice."""
    from prefdata.commands.collect import judge_params

    notes: list[str] = []
    old = parse_spec("judge:big-judge@http://127.0.0.1:8001/v1", notice=notes.append)
    assert old == parse_spec("llm:big-judge@http://127.0.0.1:8001/v1") == Spec(
        "llm", "big-judge", "http://127.0.0.1:8001/v1", None)
    assert notes == ["--scorer 'judge:big-judge@http://127.0.0.1:8001/v1': 'judge:' is now 'llm:', as everywhere a "
                     "judge is named (the old spelling still works)"]
    assert parse_spec("world") == Spec("rule", "world")  # a registered name (prefdata/base/registry.py)
    assert judge_params("world") == {"kind": "rule", "verifier": "prefdata.world:verify"}
    assert judge_params("llm:big-judge@http://127.0.0.1:8001/v1:world-judge-v2")["template"] == \
        parse_spec("llm:big-judge@http://127.0.0.1:8001/v1:world-judge-v2").template


def test_a_verifier_and_an_in_process_judge_score_label_direction(tmp_path, monkeypatch, tiny_llama, register):
    (tmp_path / "my_rules.py").write_text("def is_42(prompt, completion):\n    return completion == '42'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    register(verifiers={"is_42": "my_rules:is_42"})
    # neither is 42 on p3: undecided (null), as collect's RuleJudge says (both_fail), where this once said "tie"
    assert verdicts_for("rule:is_42", PAIRS)["preferred"].to_list() == ["chosen", "chosen", None]  # by its name
    verdicts = verdicts_for("rule:my_rules:is_42", PAIRS)
    assert verdicts["preferred"].to_list() == ["chosen", "chosen", None]  # 42 over 41 and 24; neither is 42
    # A random tiny model as an in-process judge: every pair undecided, none guessed
    judged = verdicts_for(f"llm:{tiny_llama}", PAIRS)
    assert judged["id"].to_list() == ["p1", "p2", "p3"] and judged["preferred"].to_list() == [None, None, None]
