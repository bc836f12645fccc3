"""Agreement statistics against published values, the PandaLM annotations, and small hand-made frames."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import polars as pl
import pytest

from prefdata.checks.agreement import (
    check_agreement,
    cohen_kappa,
    cohen_kappa_se,
    disagreeing_pairs,
    fleiss_kappa,
    krippendorff_alpha,
    majority_agreement,
    majority_labels,
    pairwise_cohen_kappa,
    votes_matrix,
)

FIXTURES = "iaa_reference/iaa_reference_fixtures.json"
THREE_DP = 5e-4  # "reproduces the published value to 3 decimals"


@pytest.fixture(scope="module")
def iaa(shared_data):
    return json.loads((shared_data / FIXTURES).read_text())


def _published_alphas(example: dict) -> dict[str, float]:
    """`expected` plus the levels that only appear in the paper note ("nominal .743, ...")."""
    values = dict(example["expected"])
    note = example.get("expected_published_paper_all_levels", "")
    for level, value in re.findall(r"(nominal|ordinal|interval|ratio) (\.\d+)", note):
        values.setdefault(level, float(value))
    return values


KRIPPENDORFF_CASES = [
    ("wikipedia_3coders_15units", "nominal"),
    ("wikipedia_3coders_15units", "interval"),
    ("krippendorff2011_4observers_12units", "nominal"),
    ("krippendorff2011_4observers_12units", "ordinal"),
    ("krippendorff2011_4observers_12units", "interval"),
    ("krippendorff2011_4observers_12units", "ratio"),
    ("string_labels_3coders", "nominal"),
]


@pytest.mark.parametrize(("example", "level"), KRIPPENDORFF_CASES)
def test_krippendorff_alpha_matches_published(iaa, example, level):
    data = iaa["krippendorff"][example]
    published = _published_alphas(data)[level]
    assert krippendorff_alpha(data["reliability_data"], level) == pytest.approx(published, abs=THREE_DP)


def test_paper_note_agrees_with_stored_expected_values(iaa):
    example = iaa["krippendorff"]["krippendorff2011_4observers_12units"]
    note = _published_alphas({**example, "expected": {}})  # the note's values alone
    assert set(note) == {"nominal", "ordinal", "interval", "ratio"}
    for level, value in example["expected"].items():
        assert note[level] == pytest.approx(value, abs=THREE_DP)


def _diagnoses_counts(ratings: list[list[int]]) -> np.ndarray:
    """30 subjects x 6 raters' diagnoses (1-5) -> subjects x categories counts."""
    r = np.asarray(ratings)
    return np.stack([(r == c).sum(axis=1) for c in range(1, 6)], axis=1)


def test_fleiss_1971_diagnoses(iaa):
    data = iaa["statsmodels_inter_rater"]["fleiss1971_diagnoses"]
    counts = _diagnoses_counts(data["ratings"])
    assert counts.sum(axis=0).tolist() == data["expected"]["category_totals_1to5"]
    assert fleiss_kappa(counts) == pytest.approx(data["expected"]["fleiss_kappa"], abs=THREE_DP)


def test_fleiss_wikipedia_table(iaa):
    data = iaa["statsmodels_inter_rater"]["wikipedia_fleiss_table"]
    assert fleiss_kappa(data["counts"]) == pytest.approx(data["expected"]["fleiss_kappa"], abs=THREE_DP)


def _sas_raters(table: list[list[int]]) -> tuple[list[int], list[int]]:
    """Expand the 3x3 contingency table into the two raters' labels (categories 1-3)."""
    cells = [(i + 1, j + 1, n) for i, row in enumerate(table) for j, n in enumerate(row)]
    return [i for i, _, n in cells for _ in range(n)], [j for _, j, n in cells for _ in range(n)]


def _sas(r1, r2, key):
    kappa, se = cohen_kappa(r1, r2), cohen_kappa_se(r1, r2)
    return {
        "cohen_kappa": kappa,
        "ase": se,
        "ci95_low": kappa - 1.96 * se,  # SAS's Wald interval
        "ci95_high": kappa + 1.96 * se,
        "linear_weighted_kappa(weights=[0,1,2])": cohen_kappa(r1, r2, "linear", categories=[1, 2, 3]),
    }[key]


SAS_KEYS = ["cohen_kappa", "ase", "ci95_low", "ci95_high", "linear_weighted_kappa(weights=[0,1,2])"]


@pytest.mark.parametrize("key", SAS_KEYS)
def test_cohen_sas_example(iaa, key):
    data = iaa["statsmodels_inter_rater"]["sas_cohen_table"]
    expected = dict(data["expected"])
    expected["ci95_low"], expected["ci95_high"] = expected.pop("ci95")
    r1, r2 = _sas_raters(data["table"])
    assert _sas(r1, r2, key) == pytest.approx(expected[key], abs=THREE_DP)


ANXIETY_WEIGHTS = {"cohen_unweighted": None, "cohen_linear(equal)": "linear", "cohen_quadratic(squared)": "quadratic"}


@pytest.mark.parametrize("key", list(ANXIETY_WEIGHTS))
def test_cohen_irr_anxiety_raters_2_vs_3(iaa, key):
    data = iaa["statsmodels_inter_rater"]["irr_anxiety"]
    ratings = np.asarray(data["ratings"])
    kappa = cohen_kappa(ratings[:, 1].tolist(), ratings[:, 2].tolist(), ANXIETY_WEIGHTS[key])
    assert kappa == pytest.approx(data["expected_raters2_vs_3"][key], abs=THREE_DP)


def test_every_published_value_in_the_fixture_has_a_case(iaa):
    """A value added to the fixture file must not go silently untested."""
    stats = iaa["statsmodels_inter_rater"]
    covered = {("krippendorff", *case) for case in KRIPPENDORFF_CASES}
    covered |= {("sas", k) for k in SAS_KEYS} | {("anxiety", k) for k in ANXIETY_WEIGHTS}
    examples = {name: d for name, d in iaa["krippendorff"].items() if isinstance(d, dict)}
    published = {("krippendorff", name, level) for name, d in examples.items() for level in _published_alphas(d)}
    sas_keys = set(stats["sas_cohen_table"]["expected"]) - {"ci95"} | {"ci95_low", "ci95_high"}
    published |= {("sas", k) for k in sas_keys}
    published |= {("anxiety", k) for k in stats["irr_anxiety"]["expected_raters2_vs_3"]}
    assert published == covered
    assert set(stats["fleiss1971_diagnoses"]["expected"]) == {"fleiss_kappa", "category_totals_1to5"}
    assert set(stats["wikipedia_fleiss_table"]["expected"]) == {"fleiss_kappa"}


# --- PandaLM: three human annotators on 999 pairs; 0 = tie, 1 = response1 better, 2 = response2 better.
PANDALM_VOTE = {0: "tie", 1: "a", 2: "b"}
# PandaLM README, "Cohen's kappa" table: annotator #1-#2 0.85, #1-#3 0.88, #2-#3 0.86.
PANDALM_KAPPA = {"annotator1|annotator2": 0.85, "annotator1|annotator3": 0.88, "annotator2|annotator3": 0.86}


@pytest.fixture(scope="module")
def pandalm_votes(shared_data) -> pl.DataFrame:
    rows = json.loads((shared_data / "pandalm/testset-v1.json").read_text())
    assert len(rows) == 999
    return pl.DataFrame(
        [
            {"pair_id": f"pandalm-{r['idx']:04d}", "annotator": name, "vote": PANDALM_VOTE[r[name]]}
            for r in rows
            for name in ("annotator1", "annotator2", "annotator3")
        ]
    )


def test_pandalm_pairwise_cohen_kappa_matches_readme(pandalm_votes):
    kappas = pairwise_cohen_kappa(pandalm_votes)
    assert {pair: round(k, 2) for pair, k in kappas.items()} == PANDALM_KAPPA


def test_pandalm_majority_counts_match_readme(pandalm_votes):
    labels = majority_labels(pandalm_votes)
    counts = dict(labels["label"].value_counts().iter_rows())
    assert counts == {"tie": 105, "a": 422, "b": 472}  # README: 105 tie / 422 response1 / 472 response2
    assert labels["n_votes"].unique().to_list() == [3]


def test_pandalm_check_passes_and_lists_the_split_pairs(pandalm_votes):
    result = check_agreement(pandalm_votes)
    split = pandalm_votes.group_by("pair_id").agg(pl.col("vote").n_unique()).filter(pl.col("vote") > 1)
    assert result.status == "pass" and result.metric > 0.6
    assert list(result.offending) == sorted(split["pair_id"].to_list())
    assert result.details["n_pairs"] == 999 and result.details["n_annotators"] == 3
    assert result.details["fleiss_n_raters"] == 3 and result.details["fleiss_n_pairs"] == 999
    assert {k: round(v, 2) for k, v in result.details["cohen_kappa"].items()} == PANDALM_KAPPA
    json.dumps(result.to_json(), allow_nan=False)  # details stay plain JSON


def test_ordinal_check_on_graded_votes_reproduces_krippendorff_example_c(iaa):
    """The same 1-5 ratings as a long votes frame: the check's metric is the published alpha."""
    example = iaa["krippendorff"]["krippendorff2011_4observers_12units"]
    votes = pl.DataFrame(
        [
            {"pair_id": f"u{unit:02d}", "annotator": f"obs{coder}", "vote": value}
            for coder, row in enumerate(example["reliability_data"])
            for unit, value in enumerate(row)
            if value is not None
        ]
    )
    for level, published in _published_alphas(example).items():
        assert check_agreement(votes, level=level).metric == pytest.approx(published, abs=THREE_DP)
    assert check_agreement(votes).details["n_pairs"] == 11  # unit 12 has one rating: unpairable


# --- Small hand-made frames.
def _votes(rows: dict[str, dict[str, str | None]]) -> pl.DataFrame:
    """{pair_id: {annotator: vote}} -> long votes frame."""
    return pl.DataFrame(
        [{"pair_id": p, "annotator": a, "vote": v} for p, by in rows.items() for a, v in by.items()],
        schema={"pair_id": pl.String, "annotator": pl.String, "vote": pl.String},
    )


def test_perfect_agreement_passes_with_alpha_one():
    votes = _votes({f"p{i}": {"x": v, "y": v, "z": v} for i, v in enumerate(["a", "b", "tie", "a"])})
    result = check_agreement(votes)
    assert result.status == "pass" and result.metric == pytest.approx(1.0)
    assert result.offending == ()
    assert result.details["fleiss_kappa"] == pytest.approx(1.0)
    assert list(result.details["cohen_kappa"].values()) == pytest.approx([1.0, 1.0, 1.0])
    assert result.details["majority_agreement"] == {"x": 1.0, "y": 1.0, "z": 1.0}


def test_disagreement_fails_and_lists_exactly_the_split_pairs():
    votes = _votes(
        {
            "p1": {"x": "a", "y": "b"},
            "p2": {"x": "b", "y": "a"},
            "p3": {"x": "a", "y": "a"},
            "p4": {"x": "tie", "y": "b"},
            "p5": {"x": "b", "y": "b"},
        }
    )
    result = check_agreement(votes)
    assert result.status == "fail" and result.metric < 0.6 and result.threshold == 0.6
    assert result.offending == ("p1", "p2", "p4")
    assert disagreeing_pairs(votes) == ["p1", "p2", "p4"]


def test_unpairable_units_do_not_change_alpha():
    base = {"p1": {"x": "a", "y": "a", "z": "b"}, "p2": {"x": "b", "y": "b"}, "p3": {"x": "tie", "z": "tie"}}
    with_lonely = {**base, "p4": {"x": "a"}, "p5": {"y": "b", "z": None}}
    assert check_agreement(_votes(with_lonely)).metric == check_agreement(_votes(base)).metric
    # The same at the matrix level, with both spellings of "missing".
    matrix = [[1, 1, 2, 3, None], [1, 1, 2, float("nan"), 4], [2, float("nan"), 2, None, None]]
    trimmed = [row[:3] for row in matrix]
    for level in ("nominal", "ordinal", "interval", "ratio"):
        assert krippendorff_alpha(matrix, level) == pytest.approx(krippendorff_alpha(trimmed, level))


def test_missing_is_never_a_category():
    assert cohen_kappa(["a", "b", None, "a"], ["a", "b", "b", None]) == cohen_kappa(["a", "b"], ["a", "b"])
    assert fleiss_kappa([[2, 0], [0, 2]]) == pytest.approx(1.0)


def test_single_annotator_skips():
    result = check_agreement(_votes({"p1": {"x": "a"}, "p2": {"x": "b"}}))
    assert result.status == "skip" and "two or more annotators" in result.message


def test_no_votes_or_no_variation_skips():
    assert check_agreement(None).status == "skip"
    assert check_agreement(_votes({})).status == "skip"
    assert check_agreement(_votes({"p1": {"x": "a", "y": "a"}})).status == "skip"  # alpha undefined


def test_ordinal_votes_order_b_tie_a():
    annotators, pair_ids, matrix = votes_matrix(_votes({"p1": {"x": "b", "y": "tie", "z": "a"}}))
    assert (annotators, pair_ids, matrix[:, 0].tolist()) == (["x", "y", "z"], ["p1"], [0.0, 1.0, 2.0])
    near = {"p1": {"x": "a", "y": "tie"}, "p2": {"x": "b", "y": "b"}, "p3": {"x": "a", "y": "a"}}
    far = {**near, "p1": {"x": "a", "y": "b"}}
    # On the ordered scale a-vs-tie is a near miss (counts less than nominally), a-vs-b is not.
    near_n, near_o = (check_agreement(_votes(near), level=level).metric for level in ("nominal", "ordinal"))
    far_o = check_agreement(_votes(far), level="ordinal").metric
    assert near_o > near_n and near_o > far_o
    assert near_o == pytest.approx(krippendorff_alpha([[2, 0, 2], [1, 0, 2]], "ordinal"))


def test_majority_and_agreement_with_majority():
    votes = _votes({"p1": {"x": "a", "y": "a", "z": "b"}, "p2": {"x": "a", "y": "b", "z": "tie"}})
    labels = majority_labels(votes)
    assert labels.to_dicts() == [
        {"pair_id": "p1", "label": "a", "n_votes": 3},
        {"pair_id": "p2", "label": None, "n_votes": 3},  # no strict majority
    ]
    assert majority_agreement(votes) == {"x": 1.0, "y": 1.0, "z": 0.0}


def test_fleiss_uses_units_with_the_modal_number_of_raters():
    votes = _votes(
        {"p1": {"x": "a", "y": "a"}, "p2": {"x": "b", "y": "b"}, "p3": {"x": "b", "y": "a", "z": "b"}}
    )
    details = check_agreement(votes).details
    assert (details["fleiss_n_raters"], details["fleiss_n_pairs"]) == (2, 2)
    assert details["fleiss_kappa"] == pytest.approx(1.0)
    assert details["cohen_kappa"]["x|z"] is None  # one shared pair, one label: kappa undefined


def test_malformed_votes_raise():
    with pytest.raises(ValueError, match="twice"):
        votes_matrix(pl.DataFrame({"pair_id": ["p1", "p1"], "annotator": ["x", "x"], "vote": ["a", "b"]}))
    with pytest.raises(ValueError, match="votes must be"):
        votes_matrix(pl.DataFrame({"pair_id": ["p1"], "annotator": ["x"], "vote": ["left"]}))
    with pytest.raises(ValueError, match="Fleiss"):
        fleiss_kappa([[2, 0], [1, 2]])
    with pytest.raises(ValueError, match="level"):
        krippendorff_alpha([[1, 2], [1, 2]], "cardinal")
    assert math.isnan(krippendorff_alpha([[1, None], [None, 2]]))


def test_a_low_alpha_on_near_unanimous_votes_names_the_prevalence_effect():
    """The demo's case: almost every vote is the same answer, the annotators agree on 88% of vote
    pairs, and alpha is still below 0 (chance agreement is nearly all of the agreement)."""
    rows = []
    for p in range(40):  # three annotators; 36 pairs all 'a', 4 pairs split one 'b' against two 'a'
        for k, annotator in enumerate(("x", "y", "z")):
            rows.append({"pair_id": f"p{p}", "annotator": annotator, "vote": "b" if p >= 36 and k == p % 3 else "a"})
    result = check_agreement(pl.DataFrame(rows))
    assert result.status == "fail" and result.metric < 0
    raw = result.details["percent_agreement"]
    assert raw == pytest.approx((36 * 6 + 4 * 2) / (40 * 6))  # agreeing ordered vote pairs / all of them
    assert result.details["majority_vote"] == "a" and result.details["majority_vote_share"] == pytest.approx(116 / 120)
    assert f"raw agreement {raw:.0%}, commonest vote 'a' 97%" in result.message
    assert "the prevalence effect" in result.message and "label_audit" in result.message
    # a real disagreement gets no such note
    split = pl.DataFrame([{"pair_id": f"p{p}", "annotator": a, "vote": v} for p in range(20)
                          for a, v in zip("xy", ("a", "b") if p % 2 else ("a", "a"))])
    assert "prevalence" not in check_agreement(split).message
