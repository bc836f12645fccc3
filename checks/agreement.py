"""Inter-annotator agreement (checklist item 4): Krippendorff's alpha, Fleiss' and Cohen's kappa.

Small numpy implementations, checked against published values (tests/test_agreement.py). A
missing rating (None, NaN, null) is always *missing*: it never becomes a category of its own
(NLTK's AnnotationTask gets this wrong), and a unit left with fewer than two ratings drops out.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import combinations
from typing import Any

import numpy as np
import polars as pl

from prefdata.checks.base import CheckResult, default, skip
from prefdata.data.records import VOTE_VALUES
# how votes become labels lives with the data (the importer aggregates with it); re-exported here
from prefdata.data.votes import DS_MAX_ITERATIONS, DS_TOLERANCE, dawid_skene, dawid_skene_labels, majority_labels  # noqa: F401

CHECK_ID = "agreement"
# Seed checklist item 4: pairs labelled by several annotators separately, "IAA >= 0.6". This
# module's defaults are set in checks/checklist.yaml (base.default).
DEFAULT_THRESHOLD = default("agreement", "threshold")
LEVELS = ("nominal", "ordinal", "interval", "ratio")
DEFAULT_LEVEL = default("agreement", "level")
# a/b/tie on an ordered scale: "tie" sits between "b is better" and "a is better".
VOTE_CODES = {"b": 0.0, "tie": 1.0, "a": 2.0}
_WEIGHTS = (None, "linear", "quadratic")


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _unit_counts(reliability_data: Any) -> tuple[np.ndarray, np.ndarray]:
    """Coders x units data -> (sorted distinct values, units x values matrix of counts)."""
    try:  # numbers (None becomes NaN here), the fast and common case
        data = np.asarray(reliability_data, dtype=float)
        missing = np.isnan(data)
        values = np.unique(data[~missing])
        codes = np.where(missing, -1, np.searchsorted(values, np.nan_to_num(data)))
    except (TypeError, ValueError):  # labels such as "pos"/"neg"
        data = np.asarray(reliability_data, dtype=object)
        present = sorted({v for v in data.ravel().tolist() if not _is_missing(v)})
        index = {v: i for i, v in enumerate(present)}
        values = np.asarray(present)
        codes = np.array([-1 if _is_missing(v) else index[v] for v in data.ravel().tolist()])
        codes = codes.reshape(data.shape)
    if data.ndim != 2:
        raise ValueError(f"reliability data must be coders x units (2-D), got shape {data.shape}")
    k, units = len(values), np.broadcast_to(np.arange(data.shape[1]), data.shape)
    flat = (units * k + codes)[codes >= 0]
    return values, np.bincount(flat, minlength=data.shape[1] * k).reshape(data.shape[1], k)


def _distance(level: str, values: np.ndarray, n_c: np.ndarray) -> np.ndarray:
    """Squared difference delta^2(c, k) between every two values (Krippendorff 2011, section E)."""
    if level == "nominal":
        return 1.0 - np.eye(len(values))
    if values.dtype.kind not in "iuf":
        raise ValueError(f"level {level!r} needs numeric values, got {values.dtype}")
    if level == "ordinal":
        # Ordinal distance counts how many pairable values lie between c and k: the sum of n_g for
        # g from c to k minus half of n_c and n_k, i.e. the gap between cumulative midpoints.
        mid = np.cumsum(n_c) - n_c / 2
        return (mid[:, None] - mid[None, :]) ** 2
    v = values.astype(float)
    diff = v[:, None] - v[None, :]
    if level == "interval":
        return diff**2
    if level == "ratio":
        total = v[:, None] + v[None, :]
        return np.divide(diff, total, out=np.zeros_like(diff), where=total != 0) ** 2
    raise ValueError(f"unknown level {level!r}; choose one of {LEVELS}")


def krippendorff_alpha(reliability_data: Any, level: str = "nominal") -> float:
    """Krippendorff's alpha of a coders x units matrix, None/NaN for missing (Krippendorff 2011).

    Returns NaN when alpha is undefined: no unit has two values, or all values are the same.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; choose one of {LEVELS}")
    values, counts = _unit_counts(reliability_data)
    counts = counts[counts.sum(axis=1) >= 2]  # a unit with one value cannot be paired
    if counts.size == 0:
        return math.nan
    # Coincidence matrix: a unit with m values adds its m(m-1) ordered pairs, each weighted 1/(m-1).
    weighted = counts / (counts.sum(axis=1) - 1)[:, None]
    o = counts.T @ weighted - np.diag(weighted.sum(axis=0))
    n_c = o.sum(axis=1)
    n = n_c.sum()
    delta = _distance(level, values, n_c)
    expected = n_c @ delta @ n_c
    if expected == 0:
        return math.nan
    return float(1.0 - (n - 1) * (o * delta).sum() / expected)


def fleiss_kappa(counts: Any) -> float:
    """Fleiss' kappa of a units x categories count matrix; every unit needs the same number of raters."""
    table = np.asarray(counts, dtype=float)
    raters = table.sum(axis=1)
    if table.ndim != 2 or len(table) == 0 or not np.all(raters == raters[0]) or raters[0] < 2:
        raise ValueError("Fleiss' kappa needs >= 2 raters on every unit, the same number on each")
    n = raters[0]
    p_j = table.sum(axis=0) / table.sum()
    p_i = ((table**2).sum(axis=1) - n) / (n * (n - 1))  # agreeing rater pairs per unit
    p_e = (p_j**2).sum()
    return math.nan if p_e == 1 else float((p_i.mean() - p_e) / (1 - p_e))


def _confusion(r1: Any, r2: Any, categories: Any) -> np.ndarray:
    """Counts of two raters' label pairs, dropping items where either rating is missing."""
    pairs = [(a, b) for a, b in zip(list(r1), list(r2), strict=True)]
    pairs = [(a, b) for a, b in pairs if not (_is_missing(a) or _is_missing(b))]
    cats = list(categories) if categories is not None else sorted({x for pair in pairs for x in pair})
    index = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(cats), len(cats)))
    for a, b in pairs:
        table[index[a], index[b]] += 1
    return table


def cohen_kappa(r1: Any, r2: Any, weights: str | None = None, categories: Any = None) -> float:
    """Cohen's kappa of two raters' labels; items where either rating is missing are dropped.

    Weights go by position in `categories` (default: the sorted labels either rater used), so an
    unused scale point does not widen the distances; this is what R irr and scikit-learn do.
    """
    if weights not in _WEIGHTS:
        raise ValueError(f"unknown weights {weights!r}; choose one of {_WEIGHTS}")
    counts = _confusion(r1, r2, categories)
    observed = counts / max(counts.sum(), 1)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    gap = np.abs(np.subtract.outer(np.arange(len(observed)), np.arange(len(observed)))).astype(float)
    disagreement = {None: gap > 0, "linear": gap, "quadratic": gap**2}[weights]
    chance = (disagreement * expected).sum()
    return math.nan if chance == 0 else float(1 - (disagreement * observed).sum() / chance)


def cohen_kappa_se(r1: Any, r2: Any, categories: Any = None) -> float:
    """Asymptotic standard error of unweighted Cohen's kappa (Fleiss, Cohen & Everitt 1969; the
    ASE that SAS PROC FREQ reports), for a confidence interval kappa +/- 1.96 * se."""
    counts = _confusion(r1, r2, categories)
    n = counts.sum()
    p = counts / max(n, 1)
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    p_e = rows @ cols
    if n == 0 or p_e == 1:
        return math.nan
    kappa = (np.trace(p) - p_e) / (1 - p_e)
    on = (np.diag(p) * (1 - (rows + cols) * (1 - kappa)) ** 2).sum()
    off = (1 - kappa) ** 2 * (p * (cols[:, None] + rows[None, :]) ** 2 * (1 - np.eye(len(p)))).sum()
    return float(math.sqrt((on + off - (kappa - p_e * (1 - kappa)) ** 2) / ((1 - p_e) ** 2 * n)))


def votes_matrix(votes: pl.DataFrame) -> tuple[list[Any], list[Any], np.ndarray]:
    """Long votes (pair_id, annotator, vote) -> (annotators, pair_ids, annotators x pairs matrix).

    a/b/tie become b=0 < tie=1 < a=2 (so ordinal and interval levels make sense); numeric votes,
    e.g. a 1-5 scale, keep their values. NaN marks a missing vote. A pair voted twice by the same
    annotator is an error, not something to average away.
    """
    votes = votes.select("pair_id", "annotator", "vote").drop_nulls("vote")
    if not votes.schema["vote"].is_numeric():
        votes = votes.with_columns(pl.col("vote").cast(pl.String))
        unknown = set(votes["vote"].unique().to_list()) - set(VOTE_VALUES)
        if unknown:
            raise ValueError(f"votes must be one of {VOTE_VALUES} or numbers, got {sorted(unknown)}")
        votes = votes.with_columns(pl.col("vote").replace_strict(VOTE_CODES, return_dtype=pl.Float64))
    repeated = votes.filter(pl.struct("pair_id", "annotator").is_duplicated())
    if repeated.height:
        raise ValueError(f"annotator voted twice on the same pair: {repeated.row(0)[:2]}")
    annotators = sorted(votes["annotator"].unique().to_list())
    pair_ids = sorted(votes["pair_id"].unique().to_list())
    rows = votes["annotator"].replace_strict(annotators, list(range(len(annotators)))).to_numpy()
    cols = votes["pair_id"].replace_strict(pair_ids, list(range(len(pair_ids)))).to_numpy()
    matrix = np.full((len(annotators), len(pair_ids)), np.nan)
    matrix[rows, cols] = votes["vote"].cast(pl.Float64).to_numpy()
    return annotators, pair_ids, matrix


def majority_agreement(votes: pl.DataFrame) -> dict[str, float]:
    """Share of each annotator's votes that match the majority label, on pairs with >= 2 votes and a
    majority. Not leave-one-out: the annotator's own vote counts toward the majority, which flatters
    everyone a little (most with 2-3 voters), but equally, so it still ranks annotators."""
    majority = majority_labels(votes).filter((pl.col("n_votes") >= 2) & pl.col("label").is_not_null())
    scored = votes.drop_nulls("vote").join(majority, on="pair_id")
    per = scored.group_by("annotator").agg((pl.col("vote") == pl.col("label")).mean().alias("share"))
    return {str(a): float(s) for a, s in sorted(per.iter_rows())}


# -- annotator quality: Dawid & Skene (1979) -------------------------------------------------------------

# Flag an annotator whose quality is clearly below the rest: below the median quality by more than
# this, or below this floor. 0.5 is a coin between "a" and "b" (a voter at random over a/b gets
# about 0.5 by accuracy-equivalent); 0.2 under the median separates a careless voter from honest
# disagreement (PandaLM's three humans lie within 0.03 of each other).
DEFAULT_MAX_QUALITY_GAP = default("agreement", "max_quality_gap")
DEFAULT_MIN_ANNOTATOR_QUALITY = default("agreement", "min_annotator_quality")
# Too few votes make a quality estimate noise: no flag below this many (10).
DEFAULT_MIN_ANNOTATOR_VOTES = default("agreement", "min_annotator_votes")
def annotator_quality(votes: pl.DataFrame, max_quality_gap: float = DEFAULT_MAX_QUALITY_GAP,
                      min_annotator_quality: float = DEFAULT_MIN_ANNOTATOR_QUALITY,
                      min_annotator_votes: int = DEFAULT_MIN_ANNOTATOR_VOTES) -> list[dict[str, Any]]:
    """[{annotator, quality, n_votes, flagged}] by Dawid-Skene quality. Flagged: at least
    `min_annotator_votes` votes and a quality below `min_annotator_quality`, or more than
    `max_quality_gap` below the median quality of all annotators."""
    model = dawid_skene(votes)
    median = float(np.median(list(model["quality"].values())))
    return [
        {"annotator": a, "quality": round(q, 4), "n_votes": model["n_votes"][a],
         "flagged": model["n_votes"][a] >= min_annotator_votes
                    and (q < min_annotator_quality or q < median - max_quality_gap)}
        for a, q in model["quality"].items()
    ]


def pairwise_cohen_kappa(votes: pl.DataFrame) -> dict[str, float | None]:
    """Unweighted Cohen's kappa for every two annotators on the pairs both voted on, keyed "a1|a2".
    None where it is undefined (no shared pairs, or only one label used between them)."""
    annotators, _, matrix = votes_matrix(votes)
    result: dict[str, float | None] = {}
    for i, j in combinations(range(len(annotators)), 2):
        kappa = cohen_kappa(matrix[i].tolist(), matrix[j].tolist())
        result[f"{annotators[i]}|{annotators[j]}"] = None if math.isnan(kappa) else kappa
    return result


def percent_agreement(pairable: np.ndarray) -> float:
    """Raw agreement: of all pairs of votes given on the same pair (annotators x pairs, NaN missing),
    the share that agree. No correction for chance, unlike alpha and kappa."""
    agree = total = 0
    for unit in pairable.T:
        values = unit[~np.isnan(unit)]
        m = len(values)
        _, counts = np.unique(values, return_counts=True)
        agree += int((counts * (counts - 1)).sum())
        total += m * (m - 1)
    return agree / total if total else math.nan


def majority_vote_share(pairable: np.ndarray) -> tuple[float, float]:
    """(the commonest vote value, its share of all votes) on the pairs with two votes or more."""
    values, counts = np.unique(pairable[~np.isnan(pairable)], return_counts=True)
    top = int(counts.argmax())
    return float(values[top]), float(counts[top] / counts.sum())


def prevalence_note(alpha: float, threshold: float, raw: float, top_share: float, top_vote: str) -> str:
    """When alpha fails while annotators mostly agree: name the prevalence effect, so that a low alpha
    on near-unanimous votes is read for what it is (agreement beyond chance, not raw agreement)."""
    if alpha >= threshold or raw < 0.8 or top_share < 0.7:
        return ""
    return (f"; yet {raw:.0%} of vote pairs agree: {top_share:.0%} of votes are {top_vote!r}, so chance agreement "
            "is high and alpha, which counts only agreement beyond chance, is low (the prevalence effect); look at "
            "the pairs they split on, or audit against known labels (label_audit)")


def disagreeing_pairs(votes: pl.DataFrame) -> list[Any]:
    """Sorted ids of pairs whose voters did not all give the same vote."""
    split = votes.drop_nulls("vote").group_by("pair_id").agg(pl.col("vote").n_unique().alias("k"))
    return sorted(split.filter(pl.col("k") > 1)["pair_id"].to_list())


def check_agreement(
    votes: pl.DataFrame | None, threshold: float = DEFAULT_THRESHOLD, level: str = DEFAULT_LEVEL,
    max_quality_gap: float = DEFAULT_MAX_QUALITY_GAP, min_annotator_quality: float = DEFAULT_MIN_ANNOTATOR_QUALITY,
    min_annotator_votes: int = DEFAULT_MIN_ANNOTATOR_VOTES,
) -> CheckResult:
    """Krippendorff's alpha over pairs with >= 2 votes; fails below `threshold`. Each annotator's
    Dawid-Skene quality goes in details["annotators"] (`annotator_quality`: who is flagged and why);
    a flag is named in the message but does not fail the check by itself.

    Fleiss' kappa needs the same number of raters on every unit, so it is computed over the pairs
    with the most common number of votes (the larger number when two are equally common).
    """
    if votes is None or votes.height == 0:
        return skip(CHECK_ID, "no annotator votes", threshold)
    annotators, _, matrix = votes_matrix(votes)
    n_votes = (~np.isnan(matrix)).sum(axis=0)
    pairable = matrix[:, n_votes >= 2]
    if pairable.shape[1] == 0:
        return skip(CHECK_ID, "no pair was labelled by two or more annotators", threshold)
    alpha = krippendorff_alpha(pairable, level)
    if math.isnan(alpha):
        return skip(CHECK_ID, "alpha is undefined: every vote on shared pairs is the same", threshold)

    modal = max(Counter(n_votes[n_votes >= 2].tolist()).items(), key=lambda kv: (kv[1], kv[0]))[0]
    _, counts = _unit_counts(matrix[:, n_votes == modal])
    fleiss = fleiss_kappa(counts)
    offending = tuple(str(p) for p in disagreeing_pairs(votes))
    status = "fail" if alpha < threshold else "pass"
    quality = annotator_quality(votes, max_quality_gap, min_annotator_quality, min_annotator_votes)
    flagged = [q["annotator"] for q in quality if q["flagged"]]
    raw = percent_agreement(pairable)
    top_code, top_share = majority_vote_share(pairable)
    numeric = votes.schema["vote"].is_numeric()
    top_vote = f"{top_code:g}" if numeric else next(v for v, code in VOTE_CODES.items() if code == top_code)
    message = (
        f"Krippendorff's alpha ({level}) {alpha:.3f} over {pairable.shape[1]} pairs by "
        f"{len(annotators)} annotators ({'below' if status == 'fail' else 'at or above'} "
        f"{threshold}); raw agreement {raw:.0%}, commonest vote {top_vote!r} {top_share:.0%}; "
        f"{len(offending)} pairs with disagreement"
        + (f"; low-quality annotator(s): {', '.join(flagged)}" if flagged else "")
        + prevalence_note(alpha, threshold, raw, top_share, top_vote)
    )
    return CheckResult(
        CHECK_ID, status, metric=alpha, threshold=threshold, offending=offending, message=message,
        details={
            "level": level,
            "fleiss_kappa": None if math.isnan(fleiss) else fleiss,
            "fleiss_n_pairs": int(counts.shape[0]),
            "fleiss_n_raters": int(modal),
            "cohen_kappa": pairwise_cohen_kappa(votes),
            "majority_agreement": majority_agreement(votes),
            "percent_agreement": raw,
            "majority_vote": top_vote,
            "majority_vote_share": top_share,
            "annotators": quality,
            "n_pairs": int(pairable.shape[1]),
            "n_annotators": len(annotators),
            "n_offending": len(offending),
        },
    )


# -- label audit: do the annotators uphold the dataset's own labels? -------------------------------------

LABEL_AUDIT_ID = "label_audit"
# The same floor as label_direction (checklist item 8, an independent evaluation prefers chosen):
# a human audit is that independent evaluation. For scale: InstructGPT's labelers agreed with each
# other on 73-77% of comparisons (Ouyang et al. 2022); labels worse than 60% are not worth training
# on as they are.
DEFAULT_MIN_LABEL_AGREEMENT = default("label_audit", "min_agreement")


def label_agreement(votes: pl.DataFrame) -> dict[str, Any]:
    """How often annotators uphold the dataset's own labels. `votes`: pair_id, annotator, vote and
    `label`, the dataset's label for the pair in the votes' own terms (a/b/tie; `argilla pull`
    writes it for every pushed row that had one, and "a" for a version's pairs: chosen is response_a).

    Per pair, the majority vote (more than half of the pair's votes) upholds the label, reverses
    it (the other side wins), ties it (tie wins over a preference), or there is none (undecided).
    Overturned = reversed or tied: the majority is against the label.
    """
    votes = votes.drop_nulls(["vote", "label"]).with_columns(pl.col("vote").cast(pl.String),
                                                               pl.col("label").cast(pl.String))
    labels = votes.group_by("pair_id").agg(pl.col("label").n_unique().alias("k"), pl.col("label").first())
    if labels.filter(pl.col("k") > 1).height:
        raise ValueError(f"pair {labels.filter(pl.col('k') > 1)['pair_id'][0]!r} has two different labels in the votes")
    majority = majority_labels(votes).rename({"label": "majority"})
    verdict = majority.join(labels.select("pair_id", "label"), on="pair_id").with_columns(
        pl.when(pl.col("majority").is_null()).then(pl.lit("undecided"))
        .when(pl.col("majority") == pl.col("label")).then(pl.lit("upheld"))
        .when(pl.col("majority") == "tie").then(pl.lit("tied"))
        .otherwise(pl.lit("reversed")).alias("verdict")
    ).sort("pair_id")
    count = dict(verdict.group_by("verdict").len().iter_rows())
    agree = votes.with_columns((pl.col("vote") == pl.col("label")).alias("agrees"))
    per = agree.group_by("annotator").agg(pl.col("agrees").mean()).sort("annotator")
    return {
        "n_audited": verdict.height,
        "n_upheld": count.get("upheld", 0),
        "n_reversed": count.get("reversed", 0),
        "n_tied": count.get("tied", 0),
        "n_undecided": count.get("undecided", 0),
        "overturned": [str(p) for p in verdict.filter(pl.col("verdict").is_in(["reversed", "tied"]))["pair_id"]],
        "vote_agreement": float(agree["agrees"].mean()) if agree.height else math.nan,
        "per_annotator": {str(a): float(s) for a, s in per.iter_rows()},
        "n_votes": agree.height,
    }


def check_label_audit(votes: pl.DataFrame | None,
                      min_agreement: float = DEFAULT_MIN_LABEL_AGREEMENT) -> list[CheckResult]:
    """The share of audited pairs whose annotators' majority upholds the dataset's label; fails
    below `min_agreement`. The offending pairs are the overturned ones (`prefdata filter --drop
    label_audit` removes them). Votes without a `label` column are no audit: no result at all, so
    datasets that were never audited are neither passed nor failed by it."""
    if votes is None or "label" not in votes.columns:
        return []
    found = label_agreement(votes)
    if found["n_audited"] == 0:
        return [skip(LABEL_AUDIT_ID, "no vote names a pair with a label", min_agreement)]
    share = found["n_upheld"] / found["n_audited"]
    status = "pass" if share >= min_agreement else "fail"
    overturned = tuple(found.pop("overturned"))
    message = (f"annotators uphold {found['n_upheld']} of {found['n_audited']} labels ({share:.0%}); "
               f"{found['n_reversed']} reversed, {found['n_tied']} tied, {found['n_undecided']} undecided; "
               f"{found['vote_agreement']:.0%} of {found['n_votes']} votes agree")
    return [CheckResult(LABEL_AUDIT_ID, status, metric=share, threshold=min_agreement, offending=overturned,
                        message=message, details={**found, "n_offending": len(overturned)})]
