"""How several annotators' votes on a pair become its label: the majority (more than half agree)
or Dawid & Skene's EM over all votes (each annotator's confusion matrix weighs their vote).

The importer (`--aggregate majority|dawid-skene`), Argilla's pull and the agreement check
(checks/agreement.py, which reports annotator quality from the same model) all use these.
"""

from __future__ import annotations

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


def dawid_skene(votes: pl.DataFrame, max_iterations: int = DS_MAX_ITERATIONS,
                tolerance: float = DS_TOLERANCE) -> dict[str, Any]:
    """Each annotator's confusion matrix and each pair's label posterior, by EM (Dawid & Skene 1979,
    "Maximum likelihood estimation of observer error-rates using the EM algorithm"; the model behind
    cleanlab's multi-annotator scores, the field's anchor for annotator quality).

    The classes are the distinct votes (a, b and tie: a tie is a third class, not missing). The
    start is deterministic: each pair's share of votes per class (soft majority vote). EM stops when
    no posterior moves by more than `tolerance`, or after `max_iterations`.

    Returns classes, pair_ids, annotators, labels (pair -> most probable class), posteriors
    (pairs x classes), quality (annotator -> sum over classes of prior x P(votes the class | it is
    true): the accuracy the annotator would have against the true labels), n_votes, iterations.
    """
    votes = votes.select("pair_id", "annotator", pl.col("vote").cast(pl.String)).drop_nulls("vote")
    classes = sorted(votes["vote"].unique().to_list())
    annotators = sorted(votes["annotator"].unique().to_list())
    pair_ids = sorted(votes["pair_id"].unique().to_list())
    item = votes["pair_id"].replace_strict(pair_ids, list(range(len(pair_ids)))).to_numpy()
    who = votes["annotator"].replace_strict(annotators, list(range(len(annotators)))).to_numpy()
    said = votes["vote"].replace_strict(classes, list(range(len(classes)))).to_numpy()
    n_items, n_classes, n_annotators = len(pair_ids), len(classes), len(annotators)

    posterior = np.zeros((n_items, n_classes))
    np.add.at(posterior, (item, said), 1.0)
    posterior /= posterior.sum(axis=1, keepdims=True)
    iterations = 0
    for iterations in range(1, max_iterations + 1):
        # M-step: class priors and every annotator's confusion matrix (true class x vote)
        prior = posterior.mean(axis=0)
        confusion = np.full((n_annotators, n_classes, n_classes), _DS_SMOOTHING)
        np.add.at(confusion, (who, slice(None), said), posterior[item])
        confusion /= confusion.sum(axis=2, keepdims=True)
        # E-step: each pair's posterior over true classes given all its votes
        log_post = np.tile(np.log(np.maximum(prior, 1e-12)), (n_items, 1))
        np.add.at(log_post, item, np.log(confusion[who, :, said]))
        log_post -= log_post.max(axis=1, keepdims=True)
        updated = np.exp(log_post)
        updated /= updated.sum(axis=1, keepdims=True)
        moved = float(np.abs(updated - posterior).max())
        posterior = updated
        if moved < tolerance:
            break
    prior = posterior.mean(axis=0)
    quality = {str(a): float(prior @ np.diag(confusion[j])) for j, a in enumerate(annotators)}
    return {
        "classes": classes, "pair_ids": pair_ids, "annotators": [str(a) for a in annotators],
        "labels": {p: classes[k] for p, k in zip(pair_ids, posterior.argmax(axis=1).tolist())},
        "posteriors": posterior, "quality": quality,
        "n_votes": {str(a): int(n) for a, n in zip(annotators, np.bincount(who, minlength=n_annotators))},
        "iterations": iterations,
    }


def dawid_skene_labels(votes: list[dict[str, Any]]) -> dict[Any, str]:
    """pair_id -> the Dawid-Skene label, from long votes as dicts (the importer's `--aggregate dawid-skene`)."""
    if not votes:
        return {}
    return dawid_skene(pl.DataFrame(votes, schema={"pair_id": pl.String, "annotator": pl.String,
                                                   "vote": pl.String}))["labels"]
