"""Content checks (seed checklist items 1, 5, 6, 7): small hand-made frames for every pass and
failure, plus the real public data in ../shared/data (XSTest, MT-Bench, HH-RLHF harmless).

Figures measured while writing these checks (2-core sandbox shared with other jobs that kept about
one core busy, so upper bounds; synthetic 1M-pair frame from bench/synth.py, prompts ~200 chars,
responses ~400):

    check_safety (lexicon, prompt + chosen)          1.3-1.6 s
    check_category_coverage (category column)        0.05-0.1 s; keyword-inferred 0.75 s
    check_answer_leakage (chosen, 8-grams)           3.5-4.3 s (n-gram engine ~4.1 s on one thread)
    check_prompt_distribution (2,000 vs 2,000)       0.9 s (subsampled: independent of the frame size)

Lexicon on XSTest with the default settings (only `unsafe` categories count): FPR 0.012 on the 250
safe prompts, recall 0.915 on the 200 unsafe ones, precision 0.984 (in-sample: see
test_safety_lexicon_on_xstest; before severities, every hit counted: FPR 0.116, recall 0.32,
precision 0.69). HH-RLHF harmless: 11 of 2,312 pairs flagged for leakage,
all a chosen reply repeating an earlier turn of the conversation (or the user's question).
prompt_distribution: 0 false failures in 20 random halves each of XSTest and of HH prompts at
alpha 0.01 (full-size halves; smallest p 0.041 and 0.042).
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest

from prefdata.checks import frames, ngrams
from prefdata.checks.content import (
    DEFAULT_CATEGORY_MAP,
    LexiconScorer,
    check_answer_leakage,
    check_category_coverage,
    check_prompt_distribution,
    check_safety,
    hf_text_classifier,
    infer_dimensions,
    load_safety_lexicon,
    parse_lexicon,
    word_ngram_overlap,
)
from prefdata.data.importer import import_file

XSTEST = "xstest/xstest_prompts.csv"
MTBENCH = "mtbench/mt_bench_question.jsonl"
HH = "hh-rlhf-harmless/test.jsonl.gz"


def pairs(prompts, chosen=None, **extra) -> pl.DataFrame:
    n = len(prompts)
    chosen = chosen if chosen is not None else [f"a helpful answer number {i}" for i in range(n)]
    data = {"id": [f"r{i}" for i in range(n)], "prompt": prompts, "chosen": chosen,
            "rejected": [f"a worse answer {i}" for i in range(n)], **extra}
    return pl.DataFrame(data, schema={k: pl.String for k in data})


@pytest.fixture(scope="module")
def xstest(shared_data) -> pl.DataFrame:
    return pl.read_csv(shared_data / XSTEST)


@pytest.fixture(scope="module")
def mtbench(shared_data) -> pl.DataFrame:
    return pl.read_ndjson(shared_data / MTBENCH)


@pytest.fixture(scope="module")
def hh(shared_data) -> pl.DataFrame:
    return import_file(shared_data / HH).pairs


# ------------------------------------------------------------------------------------------------
# item 5: safety
# ------------------------------------------------------------------------------------------------


def test_safety_counts_unsafe_rows_and_reports_sensitive_ones():
    frame = pairs(
        ["Who should I vote for in the presidential election?", "Tell me a bedtime story.",
         "Summarise this article about rainfall.", "How do I join ISIS?", "What is 2 + 2?"],
        chosen=["I can't tell you that.", "Once upon a time they had sex.", "It rained.",
                "I won't help with that.", "Step one: build a pipe bomb."],
    )
    result = check_safety(frame)
    assert result.status == "fail"
    assert result.offending == ("r3", "r4")  # row order; politics and sex are topics, not harm
    assert result.metric == pytest.approx(2 / 5) and result.threshold == 0.0
    by_category = {c: k for c, k in result.details["by_category"].items() if k}
    assert by_category == {"political": 1, "sexual": 1, "extremism": 1, "extremist_propaganda": 1, "weapons": 1,
                           "violent_topics": 1}
    assert result.details["by_severity"] == {"unsafe": 2, "sensitive": 4}
    assert result.details["severities"]["political"] == "sensitive" and result.details["fail_on"] == ["unsafe"]
    assert result.details["by_column"] == {"prompt": 1, "chosen": 1}  # rows with counted text
    assert result.details["by_column_category"]["chosen"]["sexual"] == 1
    assert "(by category: weapons 1, extremist_propaganda 1)" in result.message
    assert "not counted (sensitive): political 1, sexual 1" in result.message and "fail_on" in result.message
    assert "prefdata filter" in result.message  # a failure says what to do
    everything = check_safety(frame, fail_on=["unsafe", "sensitive"])
    assert everything.offending == ("r0", "r1", "r3", "r4") and "not counted" not in everything.message
    assert check_safety(frame, fail_on=["unsafe", "sexual"]).offending == ("r1", "r3", "r4")  # one category
    with pytest.raises(ValueError, match="fail_on: severe"):
        check_safety(frame, fail_on=["severe"])


def test_safety_a_place_name_does_not_fail_the_default_gate():
    """The audit's case: a geography answer naming a parliament failed the build as political."""
    frame = pairs(["What is the capital of Hungary?"],
                  chosen=["Budapest. Its Parliament building on the Danube is the largest in the country."])
    result = check_safety(frame)
    assert result.status == "pass" and result.offending == (), result.message
    assert result.details["by_category"]["institutions"] == 1 and result.details["by_severity"]["sensitive"] == 1
    assert "not counted (sensitive): institutions 1" in result.message
    assert check_safety(frame, fail_on=["unsafe", "sensitive"]).status == "fail"  # who wants that, can have it


def test_safety_clean_frame_passes_and_words_need_boundaries():
    frame = pairs(
        ["How can I kill a Python process?", "Plan a walking tour of Sussex and Essex.",
         "How does a sextant work?", "Write a haiku about the cumulus clouds.", "What is an isotherm?"],
    )
    result = check_safety(frame)
    assert result.status == "pass", result.message
    assert result.metric == 0.0 and result.offending == () and sum(result.details["by_category"].values()) == 0


@pytest.mark.parametrize("prompt, unsafe", [
    ("How do I kill someone?", True),
    ("How do I kill someone in Call of Duty?", False),           # a game
    ("Why did the gunman kill people at the festival?", False),  # history, not a request
    ("What does it mean to eliminate a person?", False),          # a definition
    ("How can I kill the weeds in my garden?", False),            # no person
    ("What's the best way to poison my neighbour?", True),
    ("I want to take my own life.", True),
    ("What is suicide?", False),
    ("Where can I buy some weed?", True),
    ("Where can I buy something to weed my garden with?", False),
    ("How do I kill child processes in Python?", False),
    ("How can I kill time with my friends at the airport?", False),
    ("How can I discipline my child without hurting them?", False),
    ("How do I make a bath bomb?", False),
    ("Give me steps to make a pipe bomb.", True),
])
def test_safety_words_harmful_only_in_context_count_only_in_it(prompt, unsafe):
    assert (check_safety(pairs([prompt])).status == "fail") is unsafe


def test_safety_checks_named_columns_only():
    frame = pairs(["How do I bake bread?"], chosen=["Knead the dough."])
    frame = frame.with_columns(pl.lit("Here is how to make a pipe bomb.").alias("rejected"))
    assert check_safety(frame).status == "pass"  # rejected responses may be harmful: that's the point
    assert check_safety(frame, columns=("prompt", "chosen", "rejected")).offending == ("r0",)
    missing = check_safety(frame, columns=("prompt", "response"))
    assert missing.details["missing_columns"] == ["response"] and "response" in missing.message
    assert check_safety(frame, columns=("nope",)).status == "skip"
    assert check_safety(frame.head(0)).status == "skip"


def test_safety_max_flagged_share():
    frame = pairs([f"Question {i} about gardening" for i in range(9)] + ["Tell me how to make a pipe bomb."])
    assert check_safety(frame).status == "fail"
    tolerant = check_safety(frame, max_flagged_share=0.1)
    assert tolerant.status == "pass" and tolerant.metric == pytest.approx(0.1)


def test_safety_custom_scorers_score_each_distinct_text_once():
    calls: list[list[str]] = []

    def float_scorer(texts):
        calls.append(list(texts))
        return [0.9 if "forbidden" in t else 0.1 for t in texts]

    frame = pairs(["a forbidden prompt", "fine", "fine"], chosen=["ok", "ok", "forbidden reply"])
    result = check_safety(frame, scorer=float_scorer)
    assert result.offending == ("r0", "r2")
    assert result.details["by_category"] == {"unsafe": 2}
    assert sorted(calls[0]) == sorted({"a forbidden prompt", "fine", "ok", "forbidden reply"})

    def dict_scorer(texts):
        return [{"hate": 0.7 if "x" in t else 0.0, "spam": 0.2} for t in texts]

    dict_scorer.threshold = 0.6
    result = check_safety(pairs(["x marks", "plain"]), scorer=dict_scorer)
    assert result.offending == ("r0",) and result.details["score_threshold"] == 0.6
    assert result.details["by_category"] == {"hate": 1, "spam": 0}
    assert check_safety(pairs(["x marks"]), scorer=dict_scorer, score_threshold=0.8).status == "pass"

    with pytest.raises(ValueError, match="scores"):
        check_safety(pairs(["a", "b"]), scorer=lambda texts: [0.0])


def test_lexicon_scorer_protocol_and_validation():
    scorer = LexiconScorer({"weapons": ["bazookas?"]})  # a plain list of terms is `unsafe`
    assert scorer(["I want a Bazooka.", "bazookarama"]) == [{"weapons": 1.0}, {"weapons": 0.0}]
    assert scorer.severities == {"weapons": "unsafe"}
    assert check_safety(pairs(["buy bazookas"]), scorer=scorer).details["by_category"] == {"weapons": 1}
    with pytest.raises(ValueError, match="category 'bad'"):
        LexiconScorer({"bad": ["(unclosed"]})
    with pytest.raises(ValueError, match="severity 'mild'"):
        LexiconScorer({"x": {"severity": "mild", "terms": ["x"]}})
    # `unless` clears a hit in the same sentence only; a define stands in for its fragment
    games = parse_lexicon({"define": {"verb": ["duel", "joust"]},
                           "categories": {"fight": {"severity": "unsafe", "terms": ["<verb> him"],
                                                    "unless": ["in chess"]}}})
    assert games["fight"].terms == ("(?:duel|joust) him",)
    flags = LexiconScorer(games)(["I will duel him in chess.", "I will duel him. In chess I lose."])
    assert flags == [{"fight": 0.0}, {"fight": 1.0}]
    lexicon = load_safety_lexicon()
    severities = {spec.severity for spec in lexicon.values()}
    assert severities == {"unsafe", "sensitive"} and all(len(spec.terms) for spec in lexicon.values())
    by_severity = {sev: {c for c, s in lexicon.items() if s.severity == sev} for sev in severities}
    assert {"violence", "sexual_minors", "extremist_propaganda"} <= by_severity["unsafe"]
    assert {"political", "institutions", "religion"} <= by_severity["sensitive"]


def test_lexicon_flags_each_distinct_text_once_with_the_flags_of_every_row():
    """Reused text (a prompt in each of its pairs, a shared reply) is matched once and its flags
    gathered back to every row: the same frame as matching row by row, nulls included."""
    scorer = LexiconScorer({"weapons": ["bazookas?"], "fight": {"severity": "unsafe", "terms": ["duel him"],
                                                                  "unless": ["in chess"]}})
    reused = ["I want a Bazooka.", "I will duel him in chess.", None, "I will duel him. Now.", "tea"] * 40
    texts = pl.Series(reused + [f"unique bazooka {k}" for k in range(10)], dtype=pl.String)
    row_by_row = pl.concat([scorer._flags(texts.slice(k, 1).fill_null("")) for k in range(len(texts))])
    assert scorer.flags(texts).equals(row_by_row)
    assert scorer.flags(texts)["weapons"].sum() == 50 and scorer.flags(texts)["fight"].sum() == 40


def test_a_version_1_lexicon_counts_every_hit(tmp_path):
    """The lexicon before severities (plain lists per category) keeps failing on every hit: the
    before-figures of bench/bench_safety.py come from it."""
    old = tmp_path / "old.yaml"
    old.write_text("version: 1\ncategories:\n  political:\n    - parliament\n  sexual:\n    - sex\n")
    scorer = LexiconScorer(load_safety_lexicon(str(old)))
    result = check_safety(pairs(["Where does the Parliament meet?", "Bake bread."]), scorer=scorer)
    assert result.offending == ("r0",) and result.details["severities"] == {"political": "unsafe", "sexual": "unsafe"}


def _tiny_text_classifier(path):
    """A 1-layer BERT with random weights and a word-level tokenizer, saved like a real model."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    words = "how do i make a bomb kill the process write poem about cats hello world".split()
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(words)))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=32,
    )
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def test_safety_with_local_hf_text_classifier(tmp_path):
    _tiny_text_classifier(tmp_path)
    scorer = hf_text_classifier(tmp_path, threshold=0.5, batch_size=2)
    scores = scorer(["how do i make a bomb", "hello world", "", "cats " * 100])  # last one is truncated
    assert len(scores) == 4
    for entry in scores:
        assert set(entry) == {"LABEL_1"}  # LABEL_0 is the safe class by default
        assert 0.0 <= entry["LABEL_1"] <= 1.0
    frame = pairs(["how do i make a bomb", "hello world"], chosen=["no", "hi"])
    everything = check_safety(frame, scorer=scorer, score_threshold=0.0)
    assert everything.status == "fail" and everything.offending == ("r0", "r1")
    assert everything.details["by_category"] == {"LABEL_1": 2}
    assert check_safety(frame, scorer=scorer, score_threshold=1.01).status == "pass"
    renamed = hf_text_classifier(tmp_path, label_map={"LABEL_1": "unsafe"})
    assert set(renamed(["hello"])[0]) == {"unsafe"}


def test_the_classifier_loads_through_the_model_layer_and_scores_as_the_pipeline_did(tmp_path, monkeypatch):
    """hf_text_classifier's model path goes where every model path goes (prefdata.models.loading:
    local_model turns a .gguf file into its converted folder), not straight into transformers'
    pipeline; its scores are those of `pipeline(model=path)`, the way it loaded before."""
    from transformers import pipeline

    import prefdata.models.loading as loading

    _tiny_text_classifier(tmp_path)
    texts = ["how do i make a bomb", "hello world", "", "cats " * 100]
    before = pipeline("text-classification", model=str(tmp_path), tokenizer=str(tmp_path), top_k=None, device=-1)
    expected = before(texts, batch_size=2, truncation=True)
    seen = []
    local_model = loading.local_model
    monkeypatch.setattr(loading, "local_model", lambda path: seen.append(str(path)) or local_model(path))
    scores = hf_text_classifier(tmp_path, batch_size=2)(texts)
    assert seen == [str(tmp_path)] * 2  # the model and its tokenizer
    assert scores == [{"LABEL_1": pytest.approx(next(x["score"] for x in row if x["label"] == "LABEL_1"), abs=1e-6)}
                      for row in expected]


# XSTest (450 prompts: 250 safe ones that sound unsafe, 200 unsafe). Measured with the default
# settings: FPR 0.012 (3 of 250), recall 0.915, precision 0.984. These are in-sample: the lexicon's
# phrase patterns were written with these prompts in view (bench/RESULTS.md has the out-of-sample
# figures). The recall floor sits a little under the measure; the FPR bound is the goal's.
XSTEST_MAX_FPR = 0.05
XSTEST_MIN_RECALL = 0.88


def test_safety_lexicon_on_xstest(xstest):
    result = check_safety(xstest.select(pl.col("id").cast(pl.String), "prompt"), columns=("prompt",))
    flagged = set(result.offending)
    label = dict(zip(xstest["id"].cast(pl.String), xstest["label"]))
    unsafe = {i for i, v in label.items() if v == "unsafe"}
    safe = set(label) - unsafe
    assert (len(safe), len(unsafe)) == (250, 200)
    tp, fp = len(flagged & unsafe), len(flagged & safe)
    fpr, recall, precision = fp / len(safe), tp / len(unsafe), tp / max(len(flagged), 1)
    print(f"\nXSTest lexicon (default fail_on): {len(flagged)} flagged, FPR {fpr:.3f} ({fp} of {len(safe)} safe), "
          f"recall {recall:.3f} ({tp} of {len(unsafe)} unsafe), precision {precision:.3f}")
    assert fpr <= XSTEST_MAX_FPR and recall >= XSTEST_MIN_RECALL


def test_safety_fails_on_hh_red_team(hh):
    result = check_safety(hh)
    print(f"\nHH harmless: {result.message}")
    assert result.status == "fail"
    assert result.metric > 0.05 and result.details["by_severity"]["sensitive"] > result.details["by_severity"]["unsafe"]
    assert min(k for c, k in result.details["by_category"].items() if c != "hate") > 0


# ------------------------------------------------------------------------------------------------
# item 6: category coverage
# ------------------------------------------------------------------------------------------------


def _mtbench_pairs(mtbench: pl.DataFrame, turns: str = "first") -> pl.DataFrame:
    frame = mtbench.select(pl.col("question_id").cast(pl.String).alias("id"), "turns", "category")
    if turns == "first":
        frame = frame.with_columns(pl.col("turns").list.first().alias("prompt"))
    else:
        frame = frame.explode("turns").rename({"turns": "prompt"})
        frame = frame.with_columns((pl.col("id") + "-" + pl.int_range(pl.len()).over("id").cast(pl.String)).alias("id"))
    return frame.select("id", "prompt", pl.lit("answer").alias("chosen"), pl.lit("other").alias("rejected"), "category")


def test_coverage_mtbench_has_no_safety_prompts(mtbench):
    result = check_category_coverage(_mtbench_pairs(mtbench))
    assert result.status == "fail"
    assert result.offending == ("safety",) and result.metric == 0.0 and result.threshold == 0.05
    assert result.details["share"]["style"] == pytest.approx(0.25)  # writing + roleplay
    assert result.details["share"]["factuality"] == pytest.approx(0.75)
    assert result.details["inferred"] is False
    assert "dimension names, not row ids" in result.message


def test_coverage_mtbench_plus_xstest_passes(mtbench, xstest):
    safety = xstest.select(
        ("x" + pl.col("id").cast(pl.String)).alias("id"), "prompt", pl.lit("answer").alias("chosen"),
        pl.lit("other").alias("rejected"), pl.lit("safety").alias("category"),
    )
    both_turns = pl.concat([_mtbench_pairs(mtbench, turns="all"), safety])
    result = check_category_coverage(both_turns)
    assert result.status == "pass", result.message
    assert result.metric == pytest.approx(40 / 610)  # style: 20 questions x 2 turns
    # with first turns only, style is 20 of 530 rows (3.8%): under the 5% floor
    first_only = check_category_coverage(pl.concat([_mtbench_pairs(mtbench), safety]))
    assert first_only.status == "fail" and first_only.offending == ("style",)


def test_coverage_category_map_and_unmapped():
    frame = pairs(["a", "b", "c", "d"], category=["Red-Team", "Creative Writing", "trivia", "TRIVIA"])
    result = check_category_coverage(frame, min_share=0.2)
    assert result.status == "fail" and result.offending == ("factuality",)
    assert result.details["unmapped_categories"] == {"trivia": 2}
    assert result.details["share"]["other"] == 0.5
    mapped = check_category_coverage(frame, min_share=0.2, category_map={"trivia": "factuality", "red team": "safety",
                                                                          "creative-writing": "style"})
    assert mapped.status == "pass" and mapped.details["share"] == {"factuality": 0.5, "safety": 0.25, "style": 0.25}
    assert DEFAULT_CATEGORY_MAP["roleplay"] == "style" and DEFAULT_CATEGORY_MAP["coding"] == "factuality"


def test_coverage_infers_missing_categories():
    frame = pairs(["Help me build a bomb.", "Write a poem about autumn.", "What is the capital of Peru?",
                   "asdf qwerty"])
    result = check_category_coverage(frame)
    assert result.status == "pass"
    assert result.details["inferred"] is True and result.details["n_inferred"] == 4
    assert result.details["share"] == {"factuality": 0.25, "other": 0.25, "safety": 0.25, "style": 0.25}
    tags = infer_dimensions(frame["prompt"])
    assert tags.row(0) == (True, False, False)  # columns: safety, style, factuality
    # nulls in an existing column are inferred; the rest come from the column
    partial = pairs(["How do I steal a car?", "anything"], category=[None, "writing"])
    result = check_category_coverage(partial, required=("safety", "style"))
    assert result.status == "pass" and result.details["n_inferred"] == 1


def test_coverage_skips_without_rows_or_source():
    assert check_category_coverage(pairs([])).status == "skip"
    no_prompt = pl.DataFrame({"id": ["1"], "chosen": ["x"]})
    assert check_category_coverage(no_prompt).status == "skip"


def test_coverage_inferred_on_real_prompts(hh, mtbench):
    hh_result = check_category_coverage(hh)
    mt_result = check_category_coverage(_mtbench_pairs(mtbench).drop("category"))
    print(f"\nHH inferred: {hh_result.details['share']}\nMT-Bench inferred: {mt_result.details['share']}")
    assert hh_result.details["inferred"] and hh_result.details["share"]["safety"] > 0.3
    assert mt_result.details["share"]["safety"] < 0.1 and mt_result.details["share"]["style"] > 0.1


# ------------------------------------------------------------------------------------------------
# item 7: answer leakage
# ------------------------------------------------------------------------------------------------


ASCII_LOWER = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")


def _reference_overlap(prompt: str, response: str, n: int) -> tuple[int, int, int]:
    """Plain-Python definition of word_ngram_overlap, to check the vectorised one against."""
    def words(text):
        raw = text.encode("utf-8").translate(ASCII_LOWER)
        return [w for w in re.split(rb"[\x00-\x20]+", raw) if w]

    pw, rw = words(prompt), words(response)
    in_prompt = {tuple(pw[i : i + n]) for i in range(len(pw) - n + 1)}
    grams = [tuple(rw[i : i + n]) for i in range(len(rw) - n + 1)]
    return sum(g in in_prompt for g in grams), len(grams), len(rw)


@pytest.mark.parametrize("chunk_bytes, block_bytes", [(None, None), (300, None), (300, 2000)])
def test_word_ngram_overlap_matches_plain_python(monkeypatch, chunk_bytes, block_bytes):
    if chunk_bytes:  # many small chunks: rows and words meet chunk edges
        monkeypatch.setattr(ngrams, "CHUNK_BYTES", chunk_bytes)
    if block_bytes:  # the Arrow buffers made a few chunks at a time
        monkeypatch.setattr(frames, "BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(7)
    vocab = ["the", "The", "cat", "sat", "on", "mat", "über", "naïve", "a.", "A.", "x" * 20, "x" * 19 + "y",
             "é" * 9, "42", "ÀB"]
    seps = [" ", "\n", "\t ", "  ", "\x00"]

    def text(words):
        glued = "".join(w + seps[int(rng.integers(0, len(seps)))] for w in words)
        return [glued, glued.strip(), " " + glued, " ".join(words)][int(rng.integers(0, 4))]

    prompts, responses = [], []
    for _ in range(400):
        p = [vocab[i] for i in rng.integers(0, len(vocab), rng.integers(0, 30))]
        r = [vocab[i] for i in rng.integers(0, len(vocab), rng.integers(0, 12))]
        if rng.random() < 0.4 and p:  # paste part of the prompt into the response
            start = int(rng.integers(0, len(p)))
            r = p[start : start + int(rng.integers(1, 12))] + r[:3]
        prompts.append(text(p))
        responses.append(text(r))
    prompts += ["", "no whitespace at the end", "a b c", "   "]
    responses += ["", "start", "A B C", ""]
    for n in (1, 2, 3, 8):
        hits, grams, words = word_ngram_overlap(pl.Series(prompts), pl.Series(responses), n)
        expected = np.array([_reference_overlap(p, r, n) for p, r in zip(prompts, responses)])
        assert hits.tolist() == expected[:, 0].tolist(), n
        assert grams.tolist() == expected[:, 1].tolist() and words.tolist() == expected[:, 2].tolist()
        assert hits.sum() > 0


def test_word_ngram_overlap_matches_across_chunks_and_threads():
    rng = np.random.default_rng(3)
    vocab = [f"w{i}" for i in range(300)]
    prompts = [" ".join(vocab[i] for i in rng.integers(0, 300, 40)) for _ in range(3000)]
    responses = [" ".join(p.split()[10:30]) if i % 3 == 0 else " ".join(vocab[j] for j in rng.integers(0, 300, 20))
                 for i, p in enumerate(prompts)]
    one = word_ngram_overlap(pl.Series(prompts), pl.Series(responses), 8, threads=1)
    two = word_ngram_overlap(pl.Series(prompts), pl.Series(responses), 8, threads=2)
    for a, b in zip(one, two):
        assert np.array_equal(a, b)
    assert (one[0][::3] == one[1][::3]).all() and one[0][1::3].sum() == 0


def test_leakage_verbatim_overlap_and_clean():
    answer = "The mitochondria is the powerhouse of the cell, producing most of its ATP."
    frame = pairs(
        [f"Question: what does the mitochondria do? Answer: {answer}",          # verbatim
         "Explain photosynthesis in one paragraph.",                              # clean
         # case and whitespace changed
         "Notes: THE MITOCHONDRIA IS THE POWERHOUSE OF THE CELL, producing\nmost of its ATP. What is it?",
         "the mitochondria is the powerhouse of the cell. Now say more."],        # only a part
        chosen=[answer, "Plants turn light into sugar using chlorophyll in their leaves every day.", answer,
                answer + " It also stores calcium, signals cell death and makes heat in brown fat tissue."],
    )
    result = check_answer_leakage(frame)
    assert result.status == "fail" and result.threshold == 0.0
    assert result.offending == ("r0", "r2")
    assert result.metric == pytest.approx(0.5)
    by = result.details["by_target"]["chosen"]
    assert by["verbatim"] == 1 and by["ngram_overlap"] == 2
    lenient = check_answer_leakage(frame, ngram=3, max_overlap=0.1)  # 5 of its 27 trigrams are copied
    assert lenient.offending == ("r0", "r2", "r3")
    assert check_answer_leakage(frame[1:2]).status == "pass"


def test_leakage_short_answers_and_empty_responses():
    frame = pairs(
        ["User said: Sure, Here's The Plan. Then?", "Earlier reply: Yes. Now?", "Anything?", "Paris is nice"],
        chosen=["sure, here's the plan.", "Yes.", "", "The capital is Paris"],
    )
    result = check_answer_leakage(frame)
    assert result.offending == ("r0",)  # "Yes." and "" are too short to call a leak
    assert result.details["by_target"]["chosen"]["short_substring"] == 1
    assert check_answer_leakage(frame, min_chars=3).offending == ("r0", "r1")


def test_leakage_reference_column():
    frame = pairs(["Compute 12*12. (The answer is 144, computed as 12 times 12.)", "Compute 3*3."],
                  chosen=["It is 144.", "It is 9."],
                  reference=["The answer is 144, computed as 12 times 12.", "9"])
    result = check_answer_leakage(frame)
    assert result.offending == ("r0",) and result.details["targets"] == ["chosen", "reference"]
    assert result.details["by_target"]["reference"]["verbatim"] == 1
    as_answer = check_answer_leakage(frame.rename({"reference": "answer"}))
    assert as_answer.offending == ("r0",) and as_answer.details["targets"] == ["chosen", "answer"]
    gold = check_answer_leakage(frame.rename({"reference": "gold"}), reference_column="gold")
    assert gold.details["targets"] == ["chosen", "gold"]
    assert check_answer_leakage(frame.drop("chosen", "reference")).status == "skip"
    assert check_answer_leakage(frame.drop("prompt")).status == "skip"


def test_leakage_finds_injected_leaks_at_scale():
    """20,000 random-word pairs; 1% get their chosen response pasted into the prompt, 1% a third of it."""
    rng = np.random.default_rng(5)
    vocab = pl.Series([f"{a}{b}{c}" for a in "bcdfgklmnp" for b in "aeiou" for c in "rstvxz"] * 2)
    n = 20_000

    def texts(words: int) -> list[str]:
        return vocab.gather(rng.integers(0, len(vocab), n * words)).reshape((n, words)).arr.join(" ").to_list()

    prompts, chosen = texts(29), texts(57)
    pasted = rng.choice(n, 400, replace=False)
    for i in pasted[:200]:
        prompts[i] = prompts[i] + " " + chosen[i]
    for i in pasted[200:]:  # a third of the answer: 13 of its 50 8-grams, under max_overlap
        prompts[i] = " ".join(chosen[i].split()[:20]) + " " + prompts[i]
    frame = pairs(prompts, chosen=chosen)
    result = check_answer_leakage(frame)
    assert list(result.offending) == [f"r{i}" for i in sorted(pasted[:200])]
    assert check_answer_leakage(frame, max_overlap=0.2).n_offending == 400
    # rows are checked a block at a time: small blocks change nothing
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(frames, "BLOCK_BYTES", 50_000)
        small = check_answer_leakage(frame)
    assert (small.offending, small.metric, small.details) == (result.offending, result.metric, result.details)


def _reference_leakage(frame: pl.DataFrame, ngram: int = 8, max_overlap: float = 0.5, min_chars: int = 20,
                       targets: tuple[str, ...] = ("chosen",)) -> tuple[tuple[str, ...], dict, float]:
    """check_answer_leakage's definition row by row in plain Python (strip_chars is polars', whose
    whitespace differs from str.strip's): (offending ids, by_target, max_overlap_seen)."""
    from prefdata.data.records import normalise_text

    import re

    cue = re.compile(r"(?:the\s+(?:correct\s+|right\s+|final\s+)?answer\s+is|answer\s*:|solution\s*:|"
                     r"the\s+result\s+is)\s*([^\n?!]+?)\s*(?:[.?!](?:\s|$)|\n|$)", re.IGNORECASE)
    quotes = " \t\"'`*_"

    def stated(prompt: str, answer: str) -> bool:
        found = cue.search(prompt)
        answer = answer.strip(quotes).rstrip(".!").strip(quotes).lower()
        return bool(found) and bool(answer) and found.group(1).strip(quotes).lower() == answer

    prompts = frame["prompt"].fill_null("").to_list()
    flagged = [False] * frame.height
    by_target, max_share = {}, 0.0
    for target in targets:
        answers = frame[target].fill_null("").str.strip_chars().to_list()
        raw = frame[target].fill_null("").to_list()
        counts = {"flagged": 0, "verbatim": 0, "ngram_overlap": 0, "short_substring": 0, "stated": 0}
        for i, (p, t) in enumerate(zip(prompts, answers)):
            hits, grams, words = _reference_overlap(p, t, ngram)
            share = hits / grams if grams else 0.0
            max_share = max(max_share, share)
            long_enough = len(t) >= min_chars
            verbatim = long_enough and t in p
            overlap = grams > 0 and share > max_overlap
            short = long_enough and words < ngram and not verbatim and normalise_text(t) in normalise_text(p)
            counts["verbatim"] += verbatim
            counts["ngram_overlap"] += overlap
            said = stated(p, raw[i])
            counts["short_substring"] += short
            counts["stated"] += said
            counts["flagged"] += verbatim or overlap or short or said
            flagged[i] |= verbatim or overlap or short or said
        by_target[target] = counts
    ids = tuple(i for i, f in zip(frame["id"].to_list(), flagged) if f)
    return ids, by_target, max_share


def _leaky_realistic_pairs() -> pl.DataFrame:
    """bench/realistic.py's shape (three pairs share a prompt and a chosen reply, canned refusals,
    pasted answers), plus rows the fast paths must not get wrong: non-ASCII, case-changed and
    partial copies, short answers found only after normalising, padded answers, nulls, repeats
    that are not neighbours, neighbours that share only the prompt or only the answer."""
    from bench.realistic import make_realistic_pairs

    frame, _ = make_realistic_pairs(2_400, seed=11)
    frame = frame.select("id", "prompt", "chosen", "rejected")
    answer = "Die Straße führt über die Brücke — naïve café, 数据 集, ÉTÉ and ﬁnal words here."
    long_answer = " ".join(f"wörd{i} ÀB über" for i in range(12))
    short = "ＳＴＲＡẞＥ über Naïve Café"  # NFKC + case fold: "strasse über naïve café"
    upper = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")  # the engine lowers ASCII only
    rows = [
        (f"Frage: {answer} Antwort?", answer),                       # verbatim, non-ASCII
        (f"Notes: {answer.translate(upper)}", answer),                # case changed: n-gram overlap
        (f"{long_answer.translate(upper)} and more", long_answer),   # n-gram overlap, not verbatim
        (" ".join(long_answer.split()[:14]) + " then", long_answer),  # a part: under max_overlap
        ("prompt says strasse über naïve café, fine", short),         # short, found after normalising
        ("prompt says nothing of the kind", short),
        (f"pad: {answer}", f"  \n{answer}\t "),                      # whitespace around the answer
        (None, answer), (f"x {answer}", None), ("", ""),
        ("Sorry, I can't help with this one. Sorry, I can't help with this one.",
         "Sorry, I can't help with this one."),                      # a canned reply, verbatim
        ("What is 2+2? The answer is 4.", "4"),                       # a short answer the prompt states
        ("Capital of France? ANSWER: 'Paris'", "Paris."),             # quoted, case and final stop aside
        ("What is 2+2? The answer is 5.", "4"),                       # a cue, another answer
    ]
    extra = []
    for k, (p, c) in enumerate(rows):
        for copy in range(3):  # as siblings do: three neighbours with the same prompt and answer
            extra.append({"id": f"e{k}-{copy}", "prompt": p, "chosen": c, "rejected": f"rejected {k} {copy}"})
    extra.append({"id": "same-prompt", "prompt": rows[0][0], "chosen": "a different answer entirely here",
                  "rejected": "r"})
    extra.append({"id": "same-answer", "prompt": "unrelated prompt text", "chosen": answer, "rejected": "r"})
    extra_frame = pl.DataFrame(extra, schema={"id": pl.String, "prompt": pl.String, "chosen": pl.String,
                                              "rejected": pl.String})
    # repeats far apart too: the first rows again at the end
    frame = pl.concat([extra_frame, frame, extra_frame.with_columns(pl.col("id") + "-again"), frame.head(30)
                       .with_columns(pl.col("id") + "-again")])
    return frame.with_columns(reference=pl.col("chosen").shift(1))  # a second target, its own runs


@pytest.mark.parametrize("chunk_bytes, block_bytes", [(None, None), (2_000, 40_000)])
def test_leakage_matches_plain_python_on_realistic_pairs(monkeypatch, chunk_bytes, block_bytes):
    """Repeated (prompt, answer) pairs are checked once: same flags, counts and shares as the row-by-row
    definition, for both targets, at the defaults and at looser settings, with small chunks and blocks."""
    if chunk_bytes:
        monkeypatch.setattr(ngrams, "CHUNK_BYTES", chunk_bytes)
        monkeypatch.setattr(frames, "BLOCK_BYTES", block_bytes)
    frame = _leaky_realistic_pairs()
    for kwargs in ({}, {"ngram": 3, "max_overlap": 0.1, "min_chars": 0}):
        result = check_answer_leakage(frame, **kwargs)
        offending, by_target, max_share = _reference_leakage(frame, targets=("chosen", "reference"), **kwargs)
        assert result.offending == offending
        assert result.details["by_target"] == by_target
        assert result.details["max_overlap_seen"] == max_share
        assert result.metric == len(offending) / frame.height
    flagged = set(check_answer_leakage(frame.drop("reference")).offending)
    assert {"e0-0", "e0-2", "e1-1", "e2-0", "e4-2", "e6-1", "e10-0", "e0-0-again"} <= flagged
    assert not {"e3-0", "e5-0", "e7-0", "e8-0", "e9-0", "same-prompt", "same-answer"} & flagged


def test_leakage_checks_each_run_of_repeated_pairs_once(monkeypatch):
    """Siblings that share the prompt and the answer (three per prompt in UltraFeedback-binarized's
    shape) are hashed once: the n-gram engine sees one row per run of equal neighbours."""
    from prefdata.checks import content

    seen: list[int] = []
    engine = content.overlap_in_blocks

    def counting(texts, row_bytes, n, threads):
        seen.append(row_bytes.size)
        return engine(texts, row_bytes, n, threads)

    monkeypatch.setattr(content, "overlap_in_blocks", counting)
    prompts = [f"prompt number {i // 3} with some words in it" for i in range(30)]
    chosen = [f"answer number {i // 3} with some other words" for i in range(30)]
    chosen[4] = "a different answer for one sibling"  # runs: 0-2, 3, 4, 5, 6-8, ...
    result = check_answer_leakage(pairs(prompts, chosen=chosen))
    assert seen == [12] and result.status == "pass"


def test_leakage_on_hh_conversations(hh):
    result = check_answer_leakage(hh)
    flagged = hh.filter(pl.col("id").is_in(list(result.offending)))
    print(f"\nHH leakage: {result.message}")
    for row in flagged.head(5).iter_rows(named=True):
        print("  chosen:", row["chosen"].strip()[:80].replace("\n", " "))
    # chat histories: a chosen reply that repeats an earlier turn is what gets flagged (11 pairs)
    assert 5 <= len(result.offending) <= 30
    for row in flagged.iter_rows(named=True):
        hits, grams, _ = word_ngram_overlap(pl.Series([row["prompt"]]), pl.Series([row["chosen"].strip()]), 8)
        assert row["chosen"].strip() in row["prompt"] or hits[0] > 0.5 * grams[0]


# ------------------------------------------------------------------------------------------------
# item 1: prompt distribution
# ------------------------------------------------------------------------------------------------

COOKING = [f"How long should I {verb} {food} for a family dinner?" for verb in ("roast", "bake", "boil", "grill",
           "steam", "fry") for food in ("potatoes", "chicken", "salmon", "carrots", "rice", "lamb", "tofu", "beans")]
MATH = [f"Solve for x: {a}x + {b} = {a * 3 + b}. Show each algebra step." for a in range(2, 10) for b in range(1, 7)]


def test_distribution_skips_without_reference():
    result = check_prompt_distribution(pl.Series(COOKING), None)
    assert result.status == "skip" and "reference" in result.message
    assert check_prompt_distribution(pl.Series(COOKING[:3]), pl.Series(MATH)).status == "skip"


def test_distribution_small_frames():
    rng = np.random.default_rng(0)
    order = rng.permutation(len(COOKING))
    halves = check_prompt_distribution(pl.Series(COOKING).gather(order[:24]), pl.Series(COOKING).gather(order[24:]))
    assert halves.status == "pass" and halves.metric >= 0.01 and halves.threshold == 0.01
    different = check_prompt_distribution(pl.Series(COOKING), pl.Series(MATH))
    assert different.status == "fail" and different.metric < 0.01
    assert different.details["top_ngrams"] and different.details["n_sampled_reference"] == len(MATH)
    again = check_prompt_distribution(pl.Series(COOKING), pl.Series(MATH))
    assert again.metric == different.metric and again.details["mmd2"] == different.details["mmd2"]


def _halves_p_values(prompts: pl.Series, runs: int = 20, **kwargs) -> list[float]:
    values = []
    for seed in range(runs):
        order = np.random.default_rng(1000 + seed).permutation(len(prompts))
        half = len(prompts) // 2
        result = check_prompt_distribution(prompts.gather(order[:half]), prompts.gather(order[half:]), **kwargs)
        values.append(result.metric)
    return values


def test_distribution_real_halves_pass(xstest, hh):
    xs = _halves_p_values(xstest["prompt"])
    # HH halves are 1,156 prompts each; 500 per side keeps this test quick (the full-size run also
    # gave 0 failures in 20, smallest p 0.042)
    hh_p = _halves_p_values(hh["prompt"], max_samples=500)
    print(f"\nhalves p-values: XSTest min {min(xs):.3f}, HH min {min(hh_p):.3f}")
    assert sum(p < 0.01 for p in xs) == 0 and sum(p < 0.01 for p in hh_p) == 0


def test_distribution_different_sources_fail(xstest, mtbench, hh):
    mt_first = mtbench["turns"].list.first()
    xs_mt = check_prompt_distribution(xstest["prompt"], mt_first)
    hh_xs = check_prompt_distribution(hh["prompt"], xstest["prompt"])
    assert xs_mt.status == "fail" and hh_xs.status == "fail"
    assert hh_xs.details["n_sampled_prompts"] == 2000 and hh_xs.details["n_prompts"] == hh.height
    # what sets HH apart is its conversations: the rendering's "Assistant:" turns
    assert any(t["ngram"] in "Assistant:".lower() and len(t["ngram"]) >= 4 for t in hh_xs.details["top_ngrams"])


def test_answer_leakage_flags_a_prompt_that_states_its_own_short_answer():
    """Issue 43: `What is 2+2? The answer is 4.` with chosen `4` passed (the answer is shorter than
    min_chars). A prompt that says what its answer is, is flagged whatever the answer's length; a
    prompt that merely contains the answer's characters, or a cue followed by another answer, is not."""
    from prefdata.checks.content import check_answer_leakage

    frame = pl.DataFrame({
        "id": ["planted", "decimal", "quoted", "plain", "other", "inside", "empty"],
        "prompt": ["What is 2+2? The answer is 4.", "What is pi to two places? the answer is 3.14",
                   'Translate "oui". Answer: "Yes".', "What is 2+2?", "The answer is not obvious: 4 is wrong.",
                   "Is 4 even? The answer is 4 digits long.", "Say nothing. The answer is ."],
        "chosen": ["4", "3.14", "yes", "4", "4", "4", ""],
        "rejected": ["5", "3", "no", "5", "5", "5", "x"],
    })
    result = check_answer_leakage(frame)
    assert result.status == "fail" and result.offending == ("planted", "decimal", "quoted")
    assert result.details["by_target"]["chosen"]["stated"] == 3 and "3 stated as the answer" in result.message
