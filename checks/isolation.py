"""Checklist item 9: eval and train share no prompt (exact or near-duplicate), annotator or source."""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from prefdata.checks.base import CheckResult, default, skip
from prefdata.checks.dedup import find_near_duplicates

CHECK_ID = "split_isolation"
EVAL_SPLITS = ("test", "eval", "evaluation", "validation", "valid", "dev")


def split_train_eval(pairs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Train and eval rows of one frame by its `split` column (null counts as train)."""
    if "split" not in pairs.columns:
        return pairs, None
    is_eval = pl.col("split").str.to_lowercase().is_in(list(EVAL_SPLITS)).fill_null(False)
    held_out = pairs.filter(is_eval)
    return pairs.filter(~is_eval), (held_out if held_out.height else None)


def _annotators(frame: pl.DataFrame, votes: pl.DataFrame | None) -> set[str]:
    found: set[str] = set()
    if votes is not None:
        found |= set(votes.filter(pl.col("pair_id").is_in(frame["id"].implode()))["annotator"].cast(pl.String).to_list())
    if "annotators" in frame.columns:  # a JSON list or a comma-separated string per row
        for value in frame["annotators"].drop_nulls().unique().to_list():
            try:
                names = json.loads(value)
            except ValueError:
                names = value.split(",")
            found |= {str(n).strip() for n in (names if isinstance(names, list) else [names]) if str(n).strip()}
    return found


def check_split_isolation(
    train: pl.DataFrame,
    eval_pairs: pl.DataFrame | None,
    votes: pl.DataFrame | None = None,
    near_threshold: float = default("split_isolation", "near_threshold"),
) -> CheckResult:
    """Offending = eval rows whose prompt is also in train (exactly, or at Jaccard >= near_threshold),
    or that were labelled by an annotator or come from a source that train also has."""
    if eval_pairs is None or eval_pairs.height == 0:
        return skip(CHECK_ID, "no eval set: give --eval EVAL or rows with split test/eval/validation", 0.0)
    prompts = pl.concat([train.select("prompt"), eval_pairs.select("prompt")])
    n_train = train.height
    found = find_near_duplicates(prompts["prompt"], threshold=near_threshold)
    del prompts
    # an eval prompt is also in train (after normalisation) when its first exact copy is a train row
    exact = found.exact[n_train:] < n_train
    near = np.isin(found.cluster[n_train:], found.cluster[:n_train]) & ~exact

    shared_annotators = sorted(_annotators(train, votes) & _annotators(eval_pairs, votes))
    leaky = exact | near
    if shared_annotators and votes is not None:
        by_shared = votes.filter(pl.col("annotator").cast(pl.String).is_in(shared_annotators))["pair_id"]
        leaky |= eval_pairs["id"].is_in(by_shared.implode()).to_numpy()
    shared_sources: list[str] = []
    if "source" in train.columns and "source" in eval_pairs.columns:
        shared_sources = sorted(set(train["source"].drop_nulls().to_list()) & set(eval_pairs["source"].drop_nulls().to_list()))
        leaky |= eval_pairs["source"].is_in(shared_sources).fill_null(False).to_numpy()
    offending = eval_pairs["id"].filter(pl.Series(leaky)).to_list()
    share = len(offending) / eval_pairs.height
    parts = [f"{int(exact.sum())} eval prompts also in train", f"{int(near.sum())} near-duplicates of train prompts"]
    if shared_annotators:
        parts.append(f"annotators in both: {', '.join(shared_annotators[:10])}")
    if shared_sources:
        parts.append(f"sources in both: {', '.join(shared_sources[:10])}")
    details = {"n_eval": eval_pairs.height, "n_train": n_train, "n_exact": int(exact.sum()), "n_near": int(near.sum()),
               "shared_annotators": shared_annotators, "shared_sources": shared_sources, "n_offending": len(offending)}
    status = "pass" if not offending and not shared_annotators and not shared_sources else "fail"
    return CheckResult(CHECK_ID, status, share, 0.0, tuple(offending), "; ".join(parts), details)
