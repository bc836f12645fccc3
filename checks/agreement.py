"""Inter-annotator agreement (checklist item 4): Krippendorff's alpha, Fleiss' and Cohen's kappa.

Small numpy implementations, checked against published values (tests/test_agreement.py). A
missing rating (None, NaN, null) is always *missing*: it never becomes a category of its own
(NLTK's AnnotationTask gets this wrong), and a unit left with fewer than two ratings drops out.

The agreement check works from counts over pairs (`vote_stats`), which add up exactly over tables
that share no pair (`merge_vote_stats`): checks/distributed.py runs it on Dask with the votes
shuffled on pair id, and gets the one-process result.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import polars as pl

from prefdata.checks.base import CheckResult, default, skip
from prefdata.data.records import VOTE_VALUES
# how votes become labels lives with the data (the importer aggregates with it); re-exported here
from prefdata.data.votes import (DS_MAX_ITERATIONS, DS_TOLERANCE, dawid_skene, dawid_skene_fit,  # noqa: F401
                                 dawid_skene_labels, majority_labels, vote_patterns)

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
    values, counts = _unit_counts(reliability_data)
    return _alpha(values, counts, np.ones(len(counts)), level)


def _alpha(values: np.ndarray, counts: np.ndarray, units: np.ndarray, level: str) -> float:
    """Alpha from units x values counts, a row standing for `units` units with those counts (the
    agreement check passes each distinct row once, with how many pairs have it)."""
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; choose one of {LEVELS}")
    pairable = counts.sum(axis=1) >= 2  # a unit with one value cannot be paired
    counts, units = counts[pairable], units[pairable]
    if counts.size == 0:
        return math.nan
    # Coincidence matrix: a unit with m values adds its m(m-1) ordered pairs, each weighted 1/(m-1).
    weighted = counts * units[:, None] / (counts.sum(axis=1) - 1)[:, None]
    o = counts.T @ weighted - np.diag(weighted.sum(axis=0))
    n_c = o.sum(axis=1)
    n = n_c.sum()
    delta = _distance(level, values, n_c)
    expected = n_c @ delta @ n_c
    if expected == 0:
        return math.nan
    return float(1.0 - (n - 1) * (o * delta).sum() / expected)


def fleiss_kappa(counts: Any, units: Any = None) -> float:
    """Fleiss' kappa of a units x categories count matrix; every unit needs the same number of raters.
    `units`: how many units each row stands for (default one each)."""
    table = np.asarray(counts, dtype=float)
    raters = table.sum(axis=1)
    if table.ndim != 2 or len(table) == 0 or not np.all(raters == raters[0]) or raters[0] < 2:
        raise ValueError("Fleiss' kappa needs >= 2 raters on every unit, the same number on each")
    weight = np.ones(len(table)) if units is None else np.asarray(units, dtype=float)
    n = raters[0]
    p_j = weight @ table / (weight @ raters)
    p_i = ((table**2).sum(axis=1) - n) / (n * (n - 1))  # agreeing rater pairs per unit
    p_e = (p_j**2).sum()
    return math.nan if p_e == 1 else float((weight @ p_i / weight.sum() - p_e) / (1 - p_e))


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
    return _kappa(_confusion(r1, r2, categories), weights)


def _kappa(counts: np.ndarray, weights: str | None = None) -> float:
    """Cohen's kappa of a confusion table (rater 1 x rater 2 counts, categories in scale order)."""
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


def _coded(votes: pl.DataFrame, rows: pl.Series | None = None) -> tuple[pl.DataFrame, set[str], tuple | None]:
    """The votes given (null and NaN votes left out: missing) with `code`, the vote as a number, and
    `_row`, the vote's row in the whole table (`rows`; default its row here); and what makes them
    unusable: the vote strings that are not a/b/tie, and the first row (row, pair_id, annotator) of
    an annotator who voted a pair twice, an error, not something to average away.

    a/b/tie become b=0 < tie=1 < a=2 (so ordinal and interval levels make sense); numeric votes,
    e.g. a 1-5 scale, keep their values."""
    frame = votes.select("pair_id", "annotator", "vote").with_columns(
        _row=rows if rows is not None else pl.int_range(pl.len(), dtype=pl.Int64))
    numeric = frame.schema["vote"].is_numeric()
    if frame.schema["vote"].is_float():
        frame = frame.with_columns(pl.col("vote").fill_nan(None))
    frame = frame.drop_nulls("vote")
    unknown: set[str] = set()
    if numeric:
        frame = frame.with_columns(code=pl.col("vote").cast(pl.Float64))
    else:
        frame = frame.with_columns(pl.col("vote").cast(pl.String))
        unknown = set(frame["vote"].unique().to_list()) - set(VOTE_VALUES)
        frame = frame.with_columns(code=pl.col("vote").replace_strict(VOTE_CODES, default=None, return_dtype=pl.Float64))
    twice = frame.filter(pl.struct("pair_id", "annotator").is_duplicated())
    repeated = twice.sort("_row").select("_row", "pair_id", "annotator").row(0) if twice.height else None
    return frame, unknown, repeated


def _raise_if_malformed(unknown: set[str], repeated: tuple | None) -> None:
    if unknown:
        raise ValueError(f"votes must be one of {VOTE_VALUES} or numbers, got {sorted(unknown)}")
    if repeated is not None:
        raise ValueError(f"annotator voted twice on the same pair: {repeated[1:]}")


def votes_matrix(votes: pl.DataFrame) -> tuple[list[Any], list[Any], np.ndarray]:
    """Long votes (pair_id, annotator, vote) -> (annotators, pair_ids, annotators x pairs matrix):
    a/b/tie as b=0 < tie=1 < a=2, numbers as they are, NaN for a missing vote (`_coded`)."""
    votes, unknown, repeated = _coded(votes)
    _raise_if_malformed(unknown, repeated)
    annotators = sorted(votes["annotator"].unique().to_list())
    pair_ids = sorted(votes["pair_id"].unique().to_list())
    rows = votes["annotator"].replace_strict(annotators, list(range(len(annotators)))).to_numpy()
    cols = votes["pair_id"].replace_strict(pair_ids, list(range(len(pair_ids)))).to_numpy()
    matrix = np.full((len(annotators), len(pair_ids)), np.nan)
    matrix[rows, cols] = votes["code"].to_numpy()
    return annotators, pair_ids, matrix


# -- the check's sufficient statistics ---------------------------------------------------------------------
#
# Everything the agreement check reports is a function of counts over pairs: alpha, Fleiss' kappa,
# raw agreement and the commonest vote of how many pairs have each vote profile; Cohen's kappas of
# confusion counts; majority agreement of per-annotator counts; Dawid-Skene of the histogram of vote
# patterns. Counts of tables that share no pair add up, exactly, to their union's: a votes table split
# by pair id (a Dask shuffle, checks/distributed.py) gives the very statistics of the whole table, and
# so the very result. check_agreement is that with one part.


@dataclass
class VoteStats:
    numeric: bool                                             # the votes are numbers (else a/b/tie)
    annotators: set = field(default_factory=set)              # who gave a vote
    unknown: set = field(default_factory=set)                 # vote strings that are not a/b/tie
    repeated: tuple | None = None                             # the first (row, pair_id, annotator) voted twice
    profiles: Counter = field(default_factory=Counter)        # ((value, votes), ...) -> pairs, pairs of >= 2 votes
    disagreeing: list = field(default_factory=list)           # sorted ids of pairs whose votes differ
    confusions: Counter = field(default_factory=Counter)      # (annotator1, annotator2, vote1, vote2) -> pairs
    matched: Counter = field(default_factory=Counter)         # annotator -> votes equal to their pair's majority
    scored: Counter = field(default_factory=Counter)          # annotator -> votes on pairs with a majority
    patterns: Counter = field(default_factory=Counter)        # Dawid-Skene's histogram (votes.vote_patterns)


def vote_stats(votes: pl.DataFrame, rows: pl.Series | None = None) -> VoteStats:
    """The agreement check's statistics of `votes` (pair_id, annotator, vote), which must hold every
    vote of each of its pairs. `rows`: each vote's row in the whole table, so that the first repeated
    vote is named as one process names it (default: its row here)."""
    coded, unknown, repeated = _coded(votes, rows)
    stats = VoteStats(numeric=votes.schema["vote"].is_numeric(), unknown=unknown, repeated=repeated)
    if unknown or repeated is not None:
        return stats  # nothing to count: agreement_result names what is wrong
    stats.annotators = set(coded["annotator"].unique().to_list())
    counted = coded.group_by("pair_id", "code").len("k")  # per pair, how many gave each vote
    per_pair = counted.sort("code").group_by("pair_id", maintain_order=True).agg("code", "k", m=pl.col("k").sum())
    pairable = per_pair.filter(pl.col("m") >= 2)
    for codes, ks, n in pairable.group_by("code", "k").len().iter_rows():
        stats.profiles[tuple(sorted(zip(codes, ks)))] += n
    stats.disagreeing = sorted(per_pair.filter(pl.col("code").list.len() > 1)["pair_id"].to_list())
    # majority agreement: each vote against its pair's majority (more than half), where there is one
    winners = counted.join(pairable.select("pair_id", "m"), on="pair_id").filter(pl.col("k") * 2 > pl.col("m"))
    scored = coded.join(winners.select("pair_id", label="code"), on="pair_id").group_by("annotator").agg(
        matched=(pl.col("code") == pl.col("label")).sum(), scored=pl.len())
    for annotator, matched, n in scored.iter_rows():
        stats.matched[annotator] += matched
        stats.scored[annotator] += n
    # Cohen's kappa: for every two annotators, the votes they gave the pairs both voted on. Each two
    # votes once, in whichever order the frame compares annotators (_pairwise_kappas reads both)
    given = coded.select("pair_id", "annotator", "code")
    both = given.join(given, on="pair_id", suffix="_2").filter(pl.col("annotator") < pl.col("annotator_2"))
    for a1, a2, c1, c2, n in both.group_by("annotator", "annotator_2", "code", "code_2").len().iter_rows():
        stats.confusions[(a1, a2, c1, c2)] += n
    stats.patterns = vote_patterns(coded)
    return stats


def merge_vote_stats(parts: list[VoteStats]) -> VoteStats:
    """The statistics of tables that share no pair (e.g. the partitions of votes shuffled on pair id)
    as their union's: counts add and sets unite, exactly; the first repeated vote is the earliest."""
    merged = VoteStats(numeric=parts[0].numeric)
    for part in parts:
        merged.annotators |= part.annotators
        merged.unknown |= part.unknown
        if part.repeated is not None and (merged.repeated is None or part.repeated < merged.repeated):
            merged.repeated = part.repeated
        for total, counts in ((merged.profiles, part.profiles), (merged.confusions, part.confusions),
                              (merged.matched, part.matched), (merged.scored, part.scored),
                              (merged.patterns, part.patterns)):
            total.update(counts)  # adds; keeps zero counts (Counter + would drop them)
        merged.disagreeing.extend(part.disagreeing)
    merged.disagreeing.sort()
    return merged


def _usable(votes: pl.DataFrame) -> VoteStats:
    stats = vote_stats(votes)
    _raise_if_malformed(stats.unknown, stats.repeated)
    return stats


def _profile_table(profiles: Counter) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sorted vote values, profiles x values vote counts, pairs with each profile), profiles in
    sorted order: the same profiles give the same arrays, however their counts were summed."""
    keys = sorted(profiles)
    values = sorted({v for key in keys for v, _ in key})
    at = {v: k for k, v in enumerate(values)}
    table = np.zeros((len(keys), len(values)), dtype=np.int64)
    for row, key in enumerate(keys):
        for value, n in key:
            table[row, at[value]] = n
    return np.array(values, dtype=float), table, np.array([profiles[k] for k in keys], dtype=np.int64)


def majority_agreement(votes: pl.DataFrame) -> dict[str, float]:
    """Share of each annotator's votes that match the majority label, on pairs with >= 2 votes and a
    majority. Not leave-one-out: the annotator's own vote counts toward the majority, which flatters
    everyone a little (most with 2-3 voters), but equally, so it still ranks annotators."""
    return _majority_shares(_usable(votes))


def _majority_shares(stats: VoteStats) -> dict[str, float]:
    return {str(a): stats.matched[a] / stats.scored[a] for a in sorted(stats.scored)}


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
    return _quality(dawid_skene(votes), max_quality_gap, min_annotator_quality, min_annotator_votes)


def _quality(model: dict[str, Any], max_quality_gap: float, min_annotator_quality: float,
             min_annotator_votes: int) -> list[dict[str, Any]]:
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
    stats = _usable(votes)
    return _pairwise_kappas(sorted(stats.annotators), stats.confusions)


def _pairwise_kappas(annotators: list[Any], confusions: Counter) -> dict[str, float | None]:
    cells: dict[tuple[Any, Any], list[tuple[float, float, int]]] = defaultdict(list)
    for (a1, a2, v1, v2), n in confusions.items():
        if a1 < a2:
            cells[(a1, a2)].append((v1, v2, n))
        else:
            cells[(a2, a1)].append((v2, v1, n))
    result: dict[str, float | None] = {}
    for a1, a2 in combinations(annotators, 2):
        shared = cells.get((a1, a2), [])
        # the categories either of the two used (cohen_kappa's default), so equal counts, equal kappa
        at = {c: k for k, c in enumerate(sorted({c for v1, v2, _ in shared for c in (v1, v2)}))}
        table = np.zeros((len(at), len(at)))
        for v1, v2, n in shared:
            table[at[v1], at[v2]] += n
        kappa = _kappa(table)
        result[f"{a1}|{a2}"] = None if math.isnan(kappa) else kappa
    return result


def percent_agreement(counts: np.ndarray, units: np.ndarray | None = None) -> float:
    """Raw agreement: of all pairs of votes given on the same pair, the share that agree. `counts`:
    pairs x vote values, a row standing for `units` pairs (default one). No correction for chance,
    unlike alpha and kappa."""
    counts = np.asarray(counts, dtype=np.int64)
    units = np.ones(len(counts), dtype=np.int64) if units is None else units
    m = counts.sum(axis=1)
    agree, total = int(units @ (counts * (counts - 1)).sum(axis=1)), int(units @ (m * (m - 1)))
    return agree / total if total else math.nan


def majority_vote_share(values: np.ndarray, counts: np.ndarray, units: np.ndarray) -> tuple[float, float]:
    """(the commonest vote value, its share of all votes): `counts` pairs x `values`, a row standing
    for `units` pairs."""
    totals = units @ counts
    top = int(totals.argmax())
    return float(values[top]), float(totals[top] / totals.sum())


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
    return _usable(votes).disagreeing


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
    return agreement_result(vote_stats(votes), threshold, level, max_quality_gap, min_annotator_quality,
                            min_annotator_votes)


def agreement_result(
    stats: VoteStats, threshold: float = DEFAULT_THRESHOLD, level: str = DEFAULT_LEVEL,
    max_quality_gap: float = DEFAULT_MAX_QUALITY_GAP, min_annotator_quality: float = DEFAULT_MIN_ANNOTATOR_QUALITY,
    min_annotator_votes: int = DEFAULT_MIN_ANNOTATOR_VOTES,
) -> CheckResult:
    """check_agreement's result from the votes' statistics (`vote_stats` of the table, or
    `merge_vote_stats` of its parts): equal statistics give an equal result, float for float."""
    _raise_if_malformed(stats.unknown, stats.repeated)
    if not stats.profiles:
        return skip(CHECK_ID, "no pair was labelled by two or more annotators", threshold)
    values, counts, units = _profile_table(stats.profiles)
    alpha = _alpha(values, counts, units, level)
    if math.isnan(alpha):
        return skip(CHECK_ID, "alpha is undefined: every vote on shared pairs is the same", threshold)

    raters = counts.sum(axis=1)
    pairs_by_raters: Counter = Counter()
    for m, n in zip(raters.tolist(), units.tolist()):
        pairs_by_raters[m] += n
    modal = max(pairs_by_raters.items(), key=lambda kv: (kv[1], kv[0]))[0]
    rows = raters == modal
    given = counts[rows].sum(axis=0) > 0  # the values the modal pairs were given: Fleiss' categories
    fleiss = fleiss_kappa(counts[rows][:, given], units[rows])
    offending = tuple(str(p) for p in stats.disagreeing)
    status = "fail" if alpha < threshold else "pass"
    quality = _quality(dawid_skene_fit(stats.patterns), max_quality_gap, min_annotator_quality, min_annotator_votes)
    flagged = [q["annotator"] for q in quality if q["flagged"]]
    raw = percent_agreement(counts, units)
    top_code, top_share = majority_vote_share(values, counts, units)
    top_vote = f"{top_code:g}" if stats.numeric else next(v for v, code in VOTE_CODES.items() if code == top_code)
    annotators = sorted(stats.annotators)
    n_pairs = int(units.sum())
    message = (
        f"Krippendorff's alpha ({level}) {alpha:.3f} over {n_pairs} pairs by "
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
            "fleiss_n_pairs": int(units[rows].sum()),
            "fleiss_n_raters": int(modal),
            "cohen_kappa": _pairwise_kappas(annotators, stats.confusions),
            "majority_agreement": _majority_shares(stats),
            "percent_agreement": raw,
            "majority_vote": top_vote,
            "majority_vote_share": top_share,
            "annotators": quality,
            "n_pairs": n_pairs,
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
