"""How several annotators' votes on a pair become its label: the majority (more than half agree)
or Dawid & Skene's EM over all votes (each annotator's confusion matrix weighs their vote).

The importer (`--aggregate majority|dawid-skene`), Argilla's pull and the agreement check
(checks/agreement.py, which reports annotator quality from the same model) all use these.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import polars as pl


def majority_labels(votes: pl.DataFrame) -> pl.DataFrame:
    """pair_id, label (the vote given by more than half the voters, else null), n_votes."""
    counted = votes.drop_nulls("vote").group_by("pair_id", "vote").len("k")
    totals = counted.group_by("pair_id").agg(pl.col("k").sum().alias("n_votes"))
    winners = counted.join(totals, on="pair_id").filter(pl.col("k") * 2 > pl.col("n_votes"))
    return (
        totals.join(winners.select("pair_id", pl.col("vote").alias("label")), on="pair_id", how="left")
        .select("pair_id", "label", "n_votes")
        .sort("pair_id")
    )


DS_MAX_ITERATIONS = 500
DS_TOLERANCE = 1e-4  # on any pair's posterior: EM crawls near a rare class (ties), so not tighter
_DS_SMOOTHING = 0.01  # pseudo-count per confusion cell: a class an annotator never saw stays defined


def vote_patterns(votes: pl.DataFrame) -> Counter:
    """How many pairs have each vote pattern: a pair's pattern is its votes as sorted (annotator,
    vote) tuples, votes as strings, null votes left out. Pairs with the same pattern have the same
    Dawid-Skene posterior, so this histogram is all the EM needs (`dawid_skene_fit`); the histograms
    of tables that share no pair add up (Counter +) to the whole's."""
    given = votes.select("pair_id", "annotator", pl.col("vote").cast(pl.String)).drop_nulls("vote")
    per_pair = given.sort("annotator", "vote").group_by("pair_id", maintain_order=True).agg("annotator", "vote")
    patterns: Counter = Counter()
    for annotators, said, n in per_pair.group_by("annotator", "vote").len().iter_rows():
        patterns[tuple(sorted(zip(annotators, said)))] += n  # sorted here too: one key whatever the sort did
    return patterns


def dawid_skene_fit(patterns: dict[tuple, int], max_iterations: int = DS_MAX_ITERATIONS,
                    tolerance: float = DS_TOLERANCE) -> dict[str, Any]:
    """Each annotator's confusion matrix and each vote pattern's label posterior, by EM (Dawid & Skene
    1979, "Maximum likelihood estimation of observer error-rates using the EM algorithm"; the model
    behind cleanlab's multi-annotator scores, the field's anchor for annotator quality), from
    `vote_patterns`' histogram: a pattern held by n pairs counts n times in the M-step, which is the
    per-pair EM exactly (pairs of one pattern keep one posterior throughout). The patterns are taken
    in sorted order, so equal histograms give bit-identical fits, however they were summed.

    The classes are the distinct votes (a, b and tie: a tie is a third class, not missing). The
    start is deterministic: each pair's share of votes per class (soft majority vote). EM stops when
    no posterior moves by more than `tolerance`, or after `max_iterations`.

    Returns classes, patterns (sorted), annotators, posteriors (patterns x classes), quality
    (annotator -> sum over classes of prior x P(votes the class | it is true): the accuracy the
    annotator would have against the true labels), n_votes, iterations.
    """
    keys = sorted(patterns)
    classes = sorted({v for key in keys for _, v in key})
    annotators = sorted({a for key in keys for a, _ in key})
    if not keys:
        return {"classes": [], "patterns": [], "annotators": [], "posteriors": np.zeros((0, 0)), "quality": {},
                "n_votes": {}, "iterations": 0}
    klass, annotator = {c: k for k, c in enumerate(classes)}, {a: k for k, a in enumerate(annotators)}
    item = np.array([k for k, key in enumerate(keys) for _ in key], dtype=np.int64)  # one entry per vote
    who = np.array([annotator[a] for key in keys for a, _ in key], dtype=np.int64)
    said = np.array([klass[v] for key in keys for _, v in key], dtype=np.int64)
    weight = np.array([patterns[key] for key in keys], dtype=float)  # pairs with the pattern
    n_patterns, n_classes, n_annotators = len(keys), len(classes), len(annotators)

    posterior = np.zeros((n_patterns, n_classes))
    np.add.at(posterior, (item, said), 1.0)
    posterior /= posterior.sum(axis=1, keepdims=True)
    iterations = 0
    for iterations in range(1, max_iterations + 1):
        # M-step: class priors and every annotator's confusion matrix (true class x vote), over pairs
        prior = weight @ posterior / weight.sum()
        confusion = np.full((n_annotators, n_classes, n_classes), _DS_SMOOTHING)
        np.add.at(confusion, (who, slice(None), said), posterior[item] * weight[item, None])
        confusion /= confusion.sum(axis=2, keepdims=True)
        # E-step: each pattern's posterior over true classes given all its votes
        log_post = np.tile(np.log(np.maximum(prior, 1e-12)), (n_patterns, 1))
        np.add.at(log_post, item, np.log(confusion[who, :, said]))
        log_post -= log_post.max(axis=1, keepdims=True)
        updated = np.exp(log_post)
        updated /= updated.sum(axis=1, keepdims=True)
        moved = float(np.abs(updated - posterior).max())
        posterior = updated
        if moved < tolerance:
            break
    prior = weight @ posterior / weight.sum()
    quality = {str(a): float(prior @ np.diag(confusion[j])) for j, a in enumerate(annotators)}
    votes_by = np.bincount(who, weights=weight[item], minlength=n_annotators)
    return {
        "classes": classes, "patterns": keys, "annotators": [str(a) for a in annotators],
        "posteriors": posterior, "quality": quality,
        "n_votes": {str(a): int(n) for a, n in zip(annotators, votes_by)}, "iterations": iterations,
    }


def dawid_skene(votes: pl.DataFrame, max_iterations: int = DS_MAX_ITERATIONS,
                tolerance: float = DS_TOLERANCE) -> dict[str, Any]:
    """Dawid-Skene over long votes (`dawid_skene_fit` on their `vote_patterns`), with each pair's
    posterior and label: the fit's keys, plus pair_ids (sorted), labels (pair -> most probable
    class) and posteriors (pairs x classes, in pair_ids' order)."""
    given = votes.select("pair_id", "annotator", pl.col("vote").cast(pl.String)).drop_nulls("vote")
    model = dawid_skene_fit(vote_patterns(given), max_iterations, tolerance)
    at = {key: k for k, key in enumerate(model["patterns"])}
    pattern_of = {p: at[tuple(sorted(zip(a, v)))]
                  for p, a, v in given.group_by("pair_id").agg("annotator", "vote").iter_rows()}
    pair_ids = sorted(pattern_of)
    rows = [pattern_of[p] for p in pair_ids]
    posteriors = model["posteriors"][np.array(rows, dtype=np.int64)] if rows else np.zeros((0, len(model["classes"])))
    best = posteriors.argmax(axis=1).tolist() if rows else []
    return {**model, "pair_ids": pair_ids, "posteriors": posteriors,
            "labels": {p: model["classes"][k] for p, k in zip(pair_ids, best)}}


def dawid_skene_labels(votes: list[dict[str, Any]]) -> dict[Any, str]:
    """pair_id -> the Dawid-Skene label, from long votes as dicts (the importer's `--aggregate dawid-skene`)."""
    if not votes:
        return {}
    return dawid_skene(pl.DataFrame(votes, schema={"pair_id": pl.String, "annotator": pl.String,
                                                   "vote": pl.String}))["labels"]
