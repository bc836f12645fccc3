"""Structural checks (checklist items 2, 3, 10, 11, 12 and degenerate pairs) on hand-made frames
and on real data: HH-RLHF harmless test (2,312 pairs) and PandaLM testset-v1."""

from __future__ import annotations

import math
import random
import statistics
import warnings

import polars as pl
import pytest

from prefdata.data.card import GUIDELINE_SECTIONS, PLACEHOLDER, render_card
from prefdata.checks.structure import (
    PREFIX_TIERS,
    check_annotation_guidelines,
    check_degenerate_pairs,
    check_length_ratio,
    check_min_size,
    check_same_policy,
    check_sft_subset,
    identical_after_normalisation,
    length_ratios,
)
from prefdata.data.importer import import_file
from prefdata.data.records import normalise_text
from prefdata.data.store import sft_subset

HH = "hh-rlhf-harmless/test.jsonl.gz"
PANDALM = "pandalm/testset-v1.json"


def frame(rows: list[dict], **extra_columns) -> pl.DataFrame:
    """Pairs with ids r0, r1, ... and the given columns (all strings unless given otherwise)."""
    data = {"id": [f"r{i}" for i in range(len(rows))]}
    for name in rows[0]:
        data[name] = [r.get(name) for r in rows]
    data.update(extra_columns)
    return pl.DataFrame(data)


def pairs_of(*sides: tuple[str | None, str | None], **extra_columns) -> pl.DataFrame:
    return frame([{"prompt": "p", "chosen": c, "rejected": r} for c, r in sides], **extra_columns)


@pytest.fixture(scope="module")
def hh(shared_data):
    return import_file(shared_data / HH)


@pytest.fixture(scope="module")
def pandalm(shared_data):
    return import_file(shared_data / PANDALM)


# -- length ratio (item 3) ----------------------------------------------------------------------


def test_length_ratio_passes_at_exactly_two():
    pairs = pairs_of(("ab", "abcd"), ("abcd", "ab"), ("abc", "abc"))
    result = check_length_ratio(pairs)
    assert result.status == "pass" and result.metric == 0.0 and result.threshold == 0.0
    assert result.offending == ()
    assert length_ratios(pairs).to_list() == [2.0, 2.0, 1.0]


def test_length_ratio_flags_pairs_over_the_bound_in_row_order():
    pairs = pairs_of(("a" * 5, "a" * 2), ("a", "a"), ("a", "a" * 3), ("a" * 10, "a" * 9))
    result = check_length_ratio(pairs)
    assert result.status == "fail"
    assert result.offending == ("r0", "r2")
    assert result.metric == pytest.approx(0.5)
    assert result.details["n_offending"] == 2 and result.details["n_pairs"] == 4
    # a share of violations can be allowed
    assert check_length_ratio(pairs, max_violation_share=0.5).status == "pass"
    assert check_length_ratio(pairs, max_ratio=2.5).offending == ("r2",)  # strictly above the bound


def test_length_ratio_empty_side_is_infinite_without_warnings():
    pairs = pairs_of(("", "abc"), ("abc", ""), ("", ""), ("ab", "ab"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ratios = length_ratios(pairs)
        result = check_length_ratio(pairs)
    assert ratios.to_list()[:3] == [math.inf] * 3
    assert result.offending == ("r0", "r1", "r2")
    assert result.details["n_infinite"] == 3
    assert result.details["median_ratio"] == 1.0  # over finite ratios only


def test_length_bias_leaves_equal_lengths_out_of_the_denominator():
    pairs = pairs_of(("aaa", "aa"), ("aaa", "aa"), ("aa", "aaa"), ("aa", "bb"), ("a", "b"))
    details = check_length_ratio(pairs).details
    assert details["length_bias"] == pytest.approx(2 / 3)
    assert (details["n_chosen_longer"], details["n_rejected_longer"], details["n_equal_length"]) == (2, 1, 2)
    assert check_length_ratio(pairs_of(("a", "b"))).details["length_bias"] is None


def test_length_ratio_uses_given_token_counts():
    pairs = pairs_of(("a" * 100, "a" * 10), ("abc", "abc"))
    tokens = (pl.Series([10, 3]), pl.Series([8, 9]))
    result = check_length_ratio(pairs, lengths=tokens)
    assert result.offending == ("r1",)
    assert result.details["unit"] == "given"
    assert length_ratios(pairs, tokens).to_list() == [1.25, 3.0]
    with pytest.raises(ValueError, match="one value per pair"):
        check_length_ratio(pairs, lengths=(pl.Series([1]), pl.Series([1])))


def test_length_ratio_skips_without_text_columns():
    result = check_length_ratio(pl.DataFrame({"id": ["a"], "prompt": ["p"]}))
    assert result.status == "skip" and "chosen" in result.message


def test_length_ratio_on_hh_matches_plain_python(hh):
    pairs = hh.pairs
    assert pairs.height == 2312
    expected, finite, longer_c, longer_r = [], [], 0, 0
    for row in pairs.iter_rows(named=True):
        lc, lr = len(row["chosen"]), len(row["rejected"])
        ratio = math.inf if min(lc, lr) == 0 else max(lc, lr) / min(lc, lr)
        if ratio > 2:
            expected.append(row["id"])
        if ratio != math.inf:
            finite.append(ratio)
        longer_c += lc > lr
        longer_r += lr > lc
    result = check_length_ratio(pairs)
    assert result.offending == tuple(expected)
    assert result.n_offending == len(expected)
    assert result.metric == pytest.approx(len(expected) / 2312)
    assert result.status == "fail"
    assert result.details["length_bias"] == pytest.approx(longer_c / (longer_c + longer_r))
    assert result.details["median_ratio"] == pytest.approx(statistics.median(finite))
    p95 = statistics.quantiles(finite, n=20, method="inclusive")[-1]
    assert result.details["p95_ratio"] == pytest.approx(p95)
    assert result.details["n_infinite"] == 4  # the four empty chosen responses


# -- degenerate pairs -----------------------------------------------------------------------------


def test_degenerate_identical_after_normalisation():
    pairs = pairs_of(
        ("Hello  World", "hello world"),  # case + whitespace
        ("ＡＢＣ", "abc"),  # NFKC: fullwidth letters
        ("Straße", "STRASSE"),  # case folding, not just lower-casing
        ("\tsame text\n", "same text"),  # stripped
        ("one answer", "another answer"),
    )
    result = check_degenerate_pairs(pairs)
    assert result.offending == ("r0", "r1", "r2", "r3")
    assert result.details["reasons"]["identical"] == 4
    assert result.metric == pytest.approx(0.8) and result.threshold == 0.0 and result.status == "fail"


def test_degenerate_pairs_keep_case_when_told():
    pairs = pairs_of(
        ("THE SEA IS WIDE.", "The sea is wide."),  # the pair of a case constraint
        ("the  sea", "the sea\n"),  # whitespace is still no difference
        ("Straße", "STRAẞE"),
    )
    assert check_degenerate_pairs(pairs).offending == ("r0", "r1", "r2")
    kept = check_degenerate_pairs(pairs, fold_case=False)
    assert kept.offending == ("r1",) and kept.details["reasons"]["identical"] == 1


def test_degenerate_empty_sides():
    pairs = pairs_of(("", "x"), ("x", " \n\t "), (None, "y"), ("fine", "also fine"))
    result = check_degenerate_pairs(pairs)
    assert result.offending == ("r0", "r1", "r2")
    assert result.details["reasons"]["empty_chosen"] == 2
    assert result.details["reasons"]["empty_rejected"] == 1
    assert result.details["examples"]["empty_chosen"] == ["r0", "r2"]


def test_degenerate_tie_labels_from_comparisons():
    pairs = pairs_of(("a", "b"), ("c", "d"), ("e", "f"))
    comparisons = pl.DataFrame({"id": ["r1", "r2", "zz"], "label": ["tie", "a", "tie"]})
    result = check_degenerate_pairs(pairs, comparisons)
    assert result.offending == ("r1",)
    assert result.details["reasons"]["tie_label"] == 1
    assert result.details["checked"]["comparisons"] is True
    # without comparisons the tie check does not run, and the message says so
    alone = check_degenerate_pairs(pairs)
    assert alone.status == "pass" and "tie_label" not in alone.details["reasons"]
    assert "pass comparisons" in alone.message


def test_degenerate_tied_scores_numbers_and_numeric_strings():
    pairs = pairs_of(("a", "b"), ("c", "d"), ("e", "f"), ("g", "h"), ("i", "j"),
                     score_chosen=["4", " 3.0", "5", None, "n/a"], score_rejected=[4.0, 3.0, 2.0, 1.0, 1.0])
    result = check_degenerate_pairs(pairs)
    assert result.offending == ("r0", "r1")
    assert result.details["reasons"]["tied_scores"] == 2
    numbers = pairs_of(("a", "b"), ("c", "d"), score_chosen=[7, 8], score_rejected=[7, 1])
    assert check_degenerate_pairs(numbers).offending == ("r0",)


def test_degenerate_counts_rows_lost_at_read():
    lost = pl.DataFrame({"id": ["d.jsonl:3", "x9"], "reason": ["identical_responses", "empty_text:prompt"]})
    result = check_degenerate_pairs(pairs_of(("a good answer", "a bad answer")), lost=lost)
    assert result.status == "fail" and result.offending == ("d.jsonl:3", "x9")
    assert result.metric == pytest.approx(2 / 3) and result.message.startswith("2 of 3 pairs")
    assert result.details["reasons"]["identical"] == 1 and result.details["reasons"]["empty_prompt"] == 1
    assert result.details["lost_at_read"] == 2
    # every row of the file lost: still a failure, not a skip for want of pairs
    only_lost = check_degenerate_pairs(pairs_of(("a", "b")).clear(), lost=lost)
    assert only_lost.status == "fail" and only_lost.metric == 1.0


def test_unreadable_rows():
    from prefdata.checks.structure import check_unreadable_rows

    lost = pl.DataFrame({"id": ["d.jsonl:4", "v.jsonl:2"], "reason": ["invalid_json", "unknown_pair_id"]})
    result = check_unreadable_rows(lost, n_read=10)
    assert result.status == "fail" and result.offending == ("d.jsonl:4", "v.jsonl:2") and result.metric == 0.2
    assert result.details["reasons"] == {"invalid_json": 1, "unknown_pair_id": 1}
    assert check_unreadable_rows(lost, n_read=10, max_share=0.2).status == "pass"
    assert check_unreadable_rows(None, n_read=10).status == "pass"
    assert check_unreadable_rows(None, n_read=0).status == "skip"


def test_degenerate_passes_clean_pairs_and_skips_without_text():
    assert check_degenerate_pairs(pairs_of(("a good answer", "a bad answer"))).status == "pass"
    assert check_degenerate_pairs(pl.DataFrame({"id": ["x"], "chosen": ["a"]})).status == "skip"


def test_identical_after_normalisation_beyond_the_cheap_prefix():
    """Texts longer than the prefix the fast path compares: equal only after normalising the tail,
    a combining mark right after the prefix, and a difference only in the tail."""
    head = "w" * (PREFIX_TIERS[-1] - 1)
    cases = [
        (head + "a  B", head + "a b"),  # equal after normalising
        (head + "e\u0301x", head + "\u00e9x"),  # combining acute right after the prefix: NFKC composes
        (head + "abc", head + "abd"),  # differs in the tail
        (head + "ß", head.upper() + "SS"),
        ("中文" * 40 + "，好", "中文" * 40 + ",好"),  # fullwidth comma NFKC -> ","
        ("中文" * 40, "中文" * 39 + "中字"),
        ("ｶ" + "a" * 80, "カ" + "A" * 80),
    ]
    pairs = pl.DataFrame({"chosen": [c for c, _ in cases], "rejected": [r for _, r in cases]})
    expected = [normalise_text(c) == normalise_text(r) for c, r in cases]
    assert expected == [True, True, False, True, True, False, True]
    assert identical_after_normalisation(pairs).to_list() == expected


def test_identical_after_normalisation_agrees_with_python_on_random_text():
    rng = random.Random(7)
    alphabet = list("abAB  \t\n") + ["中", "가", "\u11a8", "か", "\u3099", "ｶ", "，", "\u00a0", "\u3000",
                                      "\u0301", "é", "ﬁ", "Ａ", "ß", "Σ", "ς", "¨"]
    chosen, rejected = [], []
    for _ in range(3000):
        base = "a" * rng.choice([0, 1, 14, 15, 16, 17, 126, 127, 128, 129]) + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        other = rng.choice([base.upper(), base.lower(), base.replace(" ", "  "), " " + base, base + "\u0301",
                            base.replace("fi", "ﬁ"), base[:-1], "".join(rng.choice(alphabet) for _ in range(4))])
        chosen.append(base)
        rejected.append(other)
    pairs = pl.DataFrame({"chosen": chosen, "rejected": rejected})
    expected = [normalise_text(c) == normalise_text(r) for c, r in zip(chosen, rejected)]
    assert 500 < sum(expected) < 2900
    assert identical_after_normalisation(pairs).to_list() == expected


def test_identical_after_normalisation_of_replies_that_start_alike():
    """Replies that share a long start (sampled from one model) pass the cheap prefixes: plain ASCII
    pairs are compared lower-cased, the others normalised; each equals Python's normaliser."""
    rng = random.Random(11)
    stem = " ".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 8))) for _ in range(60))
    tails = ["end of it", "End Of It", "end  of it", "end of it ", " end of it", "end of it\n", "end of\tit",
             "ＥＮＤ of it", "end ofit", "end of its", "", "e\u0301nd of it", "énd of it", "end of it\u200b",
             "END OF IT!", "end of it!", "~end of it", "\x1fend of it"]
    chosen, rejected = [], []
    for _ in range(2000):
        chosen.append(rng.choice([stem, stem.upper(), stem + " "]) + rng.choice([" ", "  ", ""]) + rng.choice(tails))
        rejected.append(rng.choice([stem, stem.upper()]) + rng.choice([" ", "  ", ""]) + rng.choice(tails))
    chosen += [None, "", "a b", None]
    rejected += [None, None, "A B", "x"]
    pairs = pl.DataFrame({"chosen": chosen, "rejected": rejected}, schema={"chosen": pl.String, "rejected": pl.String})
    expected = [normalise_text(c or "") == normalise_text(r or "") for c, r in zip(chosen, rejected)]
    assert 100 < sum(expected) < 1900
    assert identical_after_normalisation(pairs).to_list() == expected
    from prefdata.data.records import normalise_expr

    case_kept = pairs.select(normalise_expr("chosen", fold_case=False)
                             == normalise_expr("rejected", fold_case=False)).to_series().to_list()
    assert 0 < sum(case_kept) < sum(expected)
    assert identical_after_normalisation(pairs, fold_case=False).to_list() == case_kept


def test_degenerate_on_hh_flags_the_empty_chosen_rows(hh):
    pairs = hh.pairs
    expected = [r["id"] for r in pairs.iter_rows(named=True)
                if not r["chosen"].strip() or not r["rejected"].strip()
                or normalise_text(r["chosen"]) == normalise_text(r["rejected"])]
    empty = [r["id"] for r in pairs.iter_rows(named=True) if r["chosen"] == ""]
    assert len(empty) == 4
    result = check_degenerate_pairs(pairs)
    assert set(empty) <= set(result.offending)
    assert result.offending == tuple(expected)
    assert result.details["reasons"]["empty_chosen"] == 4
    assert result.status == "fail"


def test_degenerate_flags_ties_wrongly_emitted_as_pairs_on_pandalm(pandalm):
    ties = pandalm.comparisons.filter(pl.col("label") == "tie")
    assert ties.height == 105
    emitted = ties.select("id", "pair_id", "prompt_id", "prompt",
                          pl.col("response_a").alias("chosen"), pl.col("response_b").alias("rejected"))
    wrong = pl.concat([pandalm.pairs.select(emitted.columns), emitted])
    result = check_degenerate_pairs(wrong, pandalm.comparisons)
    assert result.details["reasons"]["tie_label"] == 105
    assert set(ties["id"]) <= set(result.offending)
    # the importer keeps ties out of the pairs: none of the real pairs is a tie
    clean = check_degenerate_pairs(pandalm.pairs, pandalm.comparisons)
    assert clean.details["reasons"]["tie_label"] == 0
    assert not set(ties["id"]) & set(clean.offending)


# -- same policy (item 2) -------------------------------------------------------------------------


def test_same_policy_from_chosen_and_rejected_model_columns():
    pairs = pairs_of(("a", "b"), ("c", "d"), ("e", "f"),
                     chosen_model=["sft-7b", "sft-7b", "SFT-7B "], rejected_model=["sft-7b", "gpt-4", "sft-7b"])
    result = check_same_policy(pairs)
    assert result.status == "fail" and result.offending == ("r1",)
    assert result.metric == pytest.approx(1 / 3) and result.threshold == 0.0
    assert {"models": ["gpt-4", "sft-7b"], "n": 1, "same": False} in result.details["model_pairs"]
    assert result.details["evidence"] == {"chosen_model/rejected_model": 3}
    same = pairs_of(("a", "b"), chosen_model=["m"], rejected_model=["m"])
    assert check_same_policy(same).status == "pass"


def test_same_policy_from_model_a_b_and_cmp_key():
    by_ab = pairs_of(("a", "b"), ("c", "d"), model_a=["x", "x"], model_b=["x", "y"])
    assert check_same_policy(by_ab).offending == ("r1",)
    by_key = pairs_of(("a", "b"), ("c", "d"), ("e", "f"), cmp_key=["x_y", "x_x", "a_b_c"])
    result = check_same_policy(by_key)
    assert result.offending == ("r0",)
    assert result.details["n_without_evidence"] == 1  # "a_b_c" does not name two models
    assert result.metric == pytest.approx(1 / 2)


def test_same_policy_evidence_order():
    # chosen_model/rejected_model win over cmp_key; cmp_key is used where they are missing
    pairs = pairs_of(("a", "b"), ("c", "d"), chosen_model=["m", None], rejected_model=["m", None],
                     cmp_key=["m_n", "m_n"])
    result = check_same_policy(pairs)
    assert result.offending == ("r1",)
    assert result.details["evidence"] == {"chosen_model/rejected_model": 1, "cmp_key": 1}


def test_same_policy_from_comparisons_joined_on_id():
    pairs = pairs_of(("a", "b"), ("c", "d"))
    comparisons = pl.DataFrame({"id": ["r1", "r0"], "model_a": ["p", "q"], "model_b": ["p", "r"]})
    result = check_same_policy(pairs, comparisons)
    assert result.offending == ("r0",)
    assert result.details["evidence"] == {"comparisons.model_a/model_b": 2}


def test_same_policy_from_lineage():
    pairs = pairs_of(("a", "b"), ("c", "d"))
    one = {"components": {"sampler": {"model": "sft-7b", "temperature": 1.0}}}
    assert check_same_policy(pairs, lineage=one).status == "pass"
    same_twice = {"components": {"sampler": [{"model": "sft-7b", "seed": 1}, {"model": "sft-7b", "seed": 2}]}}
    result = check_same_policy(pairs, lineage=same_twice)
    assert result.status == "pass" and result.details["lineage_sampler_settings"] == 2
    two = {"components": {"sampler": [{"model": "sft-7b"}, {"model": "gpt-4"}]}}
    result = check_same_policy(pairs, lineage=two)
    assert result.status == "fail" and result.offending == ("r0", "r1")
    assert result.details["n_undetermined"] == 2
    # row evidence wins over lineage
    rows = pairs_of(("a", "b"), chosen_model=["x"], rejected_model=["y"])
    assert check_same_policy(rows, lineage=one).offending == ("r0",)


def test_same_policy_skips_without_evidence():
    result = check_same_policy(pairs_of(("a", "b")))
    assert result.status == "skip"
    assert "chosen_model" in result.message and "lineage" in result.message
    no_model = check_same_policy(pairs_of(("a", "b")), lineage={"components": {"sampler": {"temperature": 1}}})
    assert no_model.status == "skip"
    all_null = check_same_policy(pairs_of(("a", "b"), chosen_model=[None], rejected_model=[None]))
    assert all_null.status == "skip"


def test_same_policy_fails_every_pandalm_pair(pandalm):
    pairs = pandalm.pairs
    keys = pairs["cmp_key"].to_list()
    assert all(len(k.split("_")) == 2 and k.split("_")[0] != k.split("_")[1] for k in keys)
    result = check_same_policy(pairs)
    assert result.status == "fail" and result.metric == 1.0
    assert result.offending == tuple(pairs["id"])
    assert result.details["n_different_models"] == pairs.height
    assert all(not p["same"] for p in result.details["model_pairs"])
    # the cmp_key alone is enough evidence
    by_key = check_same_policy(pairs.drop("chosen_model", "rejected_model"))
    assert by_key.offending == tuple(pairs["id"])
    assert by_key.details["evidence"] == {"cmp_key": pairs.height}


# -- minimum size (item 10) -----------------------------------------------------------------------


def test_min_size_counts_the_train_split():
    pairs = pairs_of(*[("a", "b")] * 5, split=["train", None, "test", "train", "validation"])
    result = check_min_size(pairs, min_pairs=3)
    assert result.status == "pass" and result.metric == 3.0 and result.threshold == 3.0
    assert check_min_size(pairs, min_pairs=4).status == "fail"
    assert check_min_size(pairs.drop("split"), min_pairs=5).metric == 5.0


def test_min_size_kind_picks_the_bound():
    pairs = pairs_of(*[("a", "b")] * 20)
    assert check_min_size(pairs, min_pairs=10, min_pairs_hard=50).status == "pass"
    for kind in ("reasoning", "safety"):
        result = check_min_size(pairs, min_pairs=10, min_pairs_hard=50, kind=kind)
        assert result.status == "fail" and result.threshold == 50.0
    with pytest.raises(ValueError, match="kind"):
        check_min_size(pairs, kind="chat")


def test_min_size_fails_on_hh(hh):
    result = check_min_size(hh.pairs)
    assert result.status == "fail" and result.metric == 2312.0 and result.threshold == 10_000.0
    assert check_min_size(hh.pairs, kind="safety").threshold == 50_000.0


# -- chosen-only SFT subset (item 11) -------------------------------------------------------------


def test_sft_subset_from_the_store_passes_and_a_tenth_fails(hh):
    pairs = hh.pairs
    full = check_sft_subset(pairs, sft_subset(pairs))
    assert full.status == "pass"
    assert full.metric == pytest.approx((2312 - 4) / 2312)  # four empty chosen responses
    assert len(full.offending) == 4 and full.details["n_not_chosen"] == 0
    tenth = check_sft_subset(pairs, sft_subset(pairs).head(231))
    assert tenth.status == "fail" and tenth.metric < 0.2 and tenth.threshold == 0.2


def test_sft_subset_absent_is_a_failure_not_a_skip():
    pairs = pairs_of(("a", "b"))
    result = check_sft_subset(pairs, None)
    assert result.status == "fail" and result.metric == 0.0 and "SFT subset" in result.message
    wrong = check_sft_subset(pairs, pl.DataFrame({"id": ["r0"], "prompt": ["p"], "text": ["a"]}))
    assert wrong.status == "fail" and "completion" in wrong.message


def test_sft_subset_counts_only_usable_train_rows():
    pairs = pairs_of(*[(f"c{i}", f"r{i}") for i in range(10)])
    sft = pl.DataFrame({"id": ["s0", "s1", "s2", "s3"], "prompt": ["p"] * 4,
                        "completion": ["c0", " ", "c2", "r3"], "split": ["train", "train", None, "test"]})
    result = check_sft_subset(pairs, sft, min_ratio=0.2)
    assert result.metric == pytest.approx(0.2) and result.status == "pass"
    assert result.offending == ("s1",)
    assert check_sft_subset(pairs, sft, min_ratio=0.25).status == "fail"
    with_rejected = pl.DataFrame({"id": ["s0", "s1"], "prompt": ["p", "p"], "completion": ["c0", "r1"]})
    assert check_sft_subset(pairs, with_rejected).details["n_not_chosen"] == 1
    no_train = pairs_of(("a", "b"), split=["test"])
    assert check_sft_subset(no_train, sft).status == "skip"


# -- annotation guidelines (item 12) --------------------------------------------------------------

GUIDELINES = """# Guidelines

## Annotation guidelines

Annotators compare two responses to the same prompt and pick the more helpful, honest and harmless one.

## Rubric

Score helpfulness first, then harmlessness; a refusal beats a harmful answer; ties are allowed.

## Edge cases

When both responses are harmful, label a tie. When one response is empty, prefer the non-empty one.
"""


def _card(guidelines: str | None) -> str:
    counts = {"rows": {"default": {"train": 3}}, "read": 3, "kept": 3, "quarantined": 0}
    return render_card("demo", {"default": {"train": "data/train-*.parquet"}}, counts, guidelines)


def test_guidelines_card_with_every_section_passes():
    result = check_annotation_guidelines(_card(GUIDELINES))
    assert result.status == "pass" and result.metric == 1.0 and result.threshold == 1.0
    assert result.offending == ()


def test_guidelines_placeholders_fail_with_section_titles():
    card = _card(None)
    assert PLACEHOLDER in card
    result = check_annotation_guidelines(card)
    assert result.status == "fail" and result.metric == 0.0
    assert result.offending == GUIDELINE_SECTIONS
    assert "section titles, not row ids" in result.message
    assert set(result.details["sections"].values()) == {"placeholder"}


def test_guidelines_missing_short_and_commented_sections():
    text = ("## annotation guidelines:\n\n" + "x" * 40 + "\n\n## Rubric\n\nTBD\n\n"
            "## Edge cases\n\n<!-- " + "write the edge cases here " * 3 + "-->\n")
    result = check_annotation_guidelines(text)
    assert result.offending == ("Rubric", "Edge cases")
    assert result.metric == pytest.approx(1 / 3)
    assert result.details["sections"] == {"Annotation guidelines": "documented", "Rubric": "too_short",
                                          "Edge cases": "placeholder"}
    missing = check_annotation_guidelines("## Rubric\n\n" + "y" * 50)
    assert missing.offending == ("Annotation guidelines", "Edge cases")
    assert missing.details["sections"]["Edge cases"] == "missing"
    assert check_annotation_guidelines("## Rubric\n\n" + "y" * 50, required=("Rubric",)).status == "pass"


def test_guidelines_ignore_front_matter_and_fail_without_a_card():
    # "## Rubric" inside YAML front matter is a YAML comment, not a section
    text = "---\n## Rubric\ntags: [x]\n---\n# Title\n\n## Annotation guidelines\n\n" + "z" * 60
    result = check_annotation_guidelines(text, required=("Annotation guidelines", "Rubric"))
    assert result.offending == ("Rubric",)
    absent = check_annotation_guidelines(None)
    assert absent.status == "fail" and absent.metric == 0.0 and absent.offending == GUIDELINE_SECTIONS


def test_a_reply_of_invisible_or_blank_characters_is_empty():
    """Issue 44 item 4: a reply of nothing but a zero-width space or a Braille blank was not empty to
    degenerate_pairs. `_blank` holds exactly where normalising leaves nothing, on every code point."""
    from prefdata.checks.structure import _blank
    from prefdata.data.records import normalise_text

    texts = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    blank = pl.DataFrame({"t": texts}).select(_blank("t")).to_series().to_list()
    assert blank == [normalise_text(t) == "" for t in texts]
    pairs = pl.DataFrame({"id": ["z", "b"], "prompt": ["q1", "q2"], "chosen": ["\u200b", "\u2800 \u2800"],
                          "rejected": ["an answer", "another"]})
    from prefdata.checks.structure import check_degenerate_pairs

    result = check_degenerate_pairs(pairs)
    assert result.status == "fail" and set(result.offending) == {"z", "b"}
