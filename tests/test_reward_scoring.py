"""The one reward-model scorer scores what TRL's RewardTrainer trains on: its own preprocessing and
collator, then the model's forward, give the same numbers; the eos is appended exactly once."""

from __future__ import annotations

import polars as pl
import pytest

from prefdata.collect.judging import PairToJudge, RewardModelJudge
from prefdata.models.reward import RewardModelScorer, reward_text
from prefdata.gate.scoring import reward_model_verdicts

PROMPTS = ["What is 2+3?", "Hi", "Say it twice: ", "Q"]
# The third response already ends with the eos token: TRL does not add a second, nor must we.
RESPONSES = ["5", "hello there, how are you doing today?", "again</s>", "x"]


def trl_scores(model_path, prompts: list[str], responses: list[str], output_dir) -> list[float]:
    """Scores through TRL itself: RewardTrainer prepares the data (eos, prompt + completion,
    tokenize), its collator pads the batch, the model it holds scores it."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    rows = [{"prompt": p, "chosen": r, "rejected": r} for p, r in zip(prompts, responses)]
    trainer = RewardTrainer(
        model=AutoModelForSequenceClassification.from_pretrained(model_path),
        args=RewardConfig(output_dir=str(output_dir), report_to="none", use_cpu=True, bf16=False,
                          dataset_num_proc=None),
        processing_class=AutoTokenizer.from_pretrained(model_path),
        train_dataset=Dataset.from_list(rows),
    )
    batch = trainer.data_collator(list(trainer.train_dataset))
    with torch.inference_mode():
        logits = trainer.model.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return logits[: len(rows), 0].float().tolist()  # the collator puts the chosen half first


def test_scores_match_trl_preprocessing_and_forward(tiny_reward_model, tmp_path):
    scorer = RewardModelScorer(tiny_reward_model, batch_size=3)  # 3: the last batch pads differently
    ours = scorer(PROMPTS, RESPONSES)
    assert ours == pytest.approx(trl_scores(tiny_reward_model, PROMPTS, RESPONSES, tmp_path), abs=1e-5)


def test_eos_is_appended_exactly_once(tiny_reward_model):
    scorer = RewardModelScorer(tiny_reward_model)
    eos_id = scorer.tokenizer.eos_token_id
    for response in ("again", "again</s>"):
        ids = scorer.tokenizer(scorer.render("Say: ", response))["input_ids"]
        assert ids[-1] == eos_id and ids.count(eos_id) == 1
    assert scorer(["Say: "], ["again"]) == pytest.approx(scorer(["Say: "], ["again</s>"]), abs=1e-6)


def test_judge_and_label_direction_scorer_use_it(tiny_reward_model):
    scorer = RewardModelScorer(tiny_reward_model)
    items = [PairToJudge(p, r, r[::-1] or "y", pair_id=str(i)) for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES))]
    expected = list(zip(scorer([i.prompt for i in items], [i.response_a for i in items]),
                        scorer([i.prompt for i in items], [i.response_b for i in items])))
    verdicts = RewardModelJudge(tiny_reward_model, batch_size=2).judge(items)
    assert [v.scores for v in verdicts] == [pytest.approx(e, abs=1e-5) for e in expected]

    pairs = pl.DataFrame({"id": [i.pair_id for i in items], "prompt": [i.prompt for i in items],
                          "chosen": [i.response_a for i in items], "rejected": [i.response_b for i in items]})
    frame = reward_model_verdicts(str(tiny_reward_model), pairs, batch_size=3)
    assert frame["score_chosen"].to_list() == pytest.approx([e[0] for e in expected], abs=1e-5)
    assert frame["score_rejected"].to_list() == pytest.approx([e[1] for e in expected], abs=1e-5)


def test_reward_text_appends_eos_once():
    assert reward_text("Q: ", "A", "</s>") == "Q: A</s>"
    assert reward_text("Q: ", "A</s>", "</s>") == "Q: A</s>"
    assert reward_text("Q: ", "A", "") == "Q: A"  # a tokenizer without an eos token: nothing to append


def test_mismatched_lengths_raise(tiny_reward_model):
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        RewardModelScorer(tiny_reward_model)(["a", "b"], ["c"])


def test_each_distinct_text_is_scored_once_and_equal_texts_score_equal(tiny_reward_model):
    """Replies repeat in real data: the model sees each distinct text once, so identical responses get
    the very same score (a tie), whatever rounding a batch of equal rows would give."""
    scorer = RewardModelScorer(tiny_reward_model, batch_size=2)
    rows_seen = []
    forward = scorer.model.forward
    scorer.model.forward = lambda **batch: rows_seen.append(batch["input_ids"].shape[0]) or forward(**batch)
    prompts, responses = ["Same", "Q", "Same", "Same", "Q"], ["identical", "x", "identical", "identical", "y"]
    scores = scorer(prompts, responses)
    assert sum(rows_seen) == 3  # "Same"+"identical", "Q"+"x", "Q"+"y"
    assert scores[0] == scores[2] == scores[3] and len(scores) == 5
    assert scores == pytest.approx([scorer([p], [r])[0] for p, r in zip(prompts, responses)], abs=1e-5)
