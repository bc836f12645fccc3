"""Checklist item 9: eval and train share no prompt (exact or near-duplicate), annotator or source
(`check_split_isolation`), and no benchmark's prompt is in the training prompts (`check_decontamination`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from prefdata.checks.base import CheckResult, default, skip
from prefdata.checks.dedup import find_near_duplicates
from prefdata.checks.frames import len_bytes, row_blocks
from prefdata.checks.ngrams import ngram_hashes, ngrams_in
from prefdata.data.records import normalise_series

CHECK_ID = "split_isolation"
EVAL_SPLITS = ("test", "eval", "evaluation", "validation", "valid", "dev")
NEAR_THRESHOLD = default(CHECK_ID, "near_threshold")  # checklist.yaml: near_duplicates' threshold


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
    near_threshold: float = NEAR_THRESHOLD,
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
    return split_isolation_result(offending, n_train=n_train, n_eval=eval_pairs.height, n_exact=int(exact.sum()),
                                  n_near=int(near.sum()), shared_annotators=shared_annotators,
                                  shared_sources=shared_sources)


def split_isolation_result(offending: list[str], *, n_train: int, n_eval: int, n_exact: int, n_near: int,
                           shared_annotators: list[str], shared_sources: list[Any]) -> CheckResult:
    """check_split_isolation's verdict from what it found: the leaky eval rows' ids, how many eval
    prompts are in train exactly or nearly, and the annotators and sources both sides share. The Dask
    run (checks/distributed.py) finds those its own way and builds its result here too."""
    share = len(offending) / n_eval
    parts = [f"{n_exact} eval prompts also in train", f"{n_near} near-duplicates of train prompts"]
    if shared_annotators:
        parts.append(f"annotators in both: {', '.join(shared_annotators[:10])}")
    if shared_sources:
        parts.append(f"sources in both: {', '.join(map(str, shared_sources[:10]))}")
    details = {"n_eval": n_eval, "n_train": n_train, "n_exact": n_exact, "n_near": n_near,
               "shared_annotators": shared_annotators, "shared_sources": shared_sources, "n_offending": len(offending)}
    status = "pass" if not offending and not shared_annotators and not shared_sources else "fail"
    return CheckResult(CHECK_ID, status, share, 0.0, tuple(offending), "; ".join(parts), details)


# -- decontamination against benchmark prompt sets ---------------------------------------------------

DECONTAMINATION_ID = "decontamination"
LISTED_ITEMS = 100      # contaminated items a benchmark names in details (the counts cover all)
LISTED_PAIR_IDS = 20    # pair ids an item names in details (all of them are in `offending`)
MATCH_SLICE = 1 << 22   # (prompt, benchmark n-gram) matches joined to their items at a time


def benchmark_frame(prompts: pl.Series | pl.DataFrame) -> pl.DataFrame:
    """A benchmark as the check takes it: `item` (its key, as text) and `prompt`. A Series of prompts
    is numbered from 1."""
    if isinstance(prompts, pl.DataFrame):
        return prompts.select(pl.col("item").cast(pl.String), pl.col("prompt").cast(pl.String))
    return pl.DataFrame({"item": [str(k) for k in range(1, len(prompts) + 1)], "prompt": prompts.cast(pl.String)})


def check_decontamination(
    pairs: pl.DataFrame,
    benchmarks: Mapping[str, pl.DataFrame | pl.Series] | None,
    ngram: int = default("decontamination", "ngram"),
    max_overlap: float = default("decontamination", "max_overlap"),
    max_contaminated_share: float = default("decontamination", "max_contaminated_share"),
) -> CheckResult:
    """No benchmark prompt is in the training prompts, by Tulu 3's decontamination rule: the prompt
    text of every pair (every split) and of every benchmark item are normalised
    (`prefdata.data.records.normalise_text`: NFKC, case folding, whitespace) and cut into word
    `ngram`-grams (checks/ngrams.py: words are whitespace-separated runs); an item is contaminated by
    a pair when more than `max_overlap` of its n-grams occur in that pair's prompt (in one prompt, not
    across several); an item of fewer than `ngram` words, when its whole normalised text stands in
    the prompt between word boundaries. `benchmarks`: name -> its items (`benchmark_frame`: `item`,
    `prompt`), from `--benchmark FILE`; none: a skip.

    metric = the largest share of a benchmark's items that are contaminated; the check fails when a
    benchmark's share is above `max_contaminated_share` (0: any contaminated item fails; Tulu 3 held
    a training set to 2% of a benchmark's items, 0.02). offending = the contaminated pairs' ids,
    benchmark by benchmark (a pair under the first benchmark it contaminates; row order within one:
    `contaminated_by` reads them back), listed whatever the status, so `prefdata filter --drop
    decontamination` quarantines them. details.benchmarks names, per benchmark, its contaminated
    items (key, prompt, largest overlap, pairs and their first ids)."""
    threshold = max_contaminated_share
    if not benchmarks:
        return skip(DECONTAMINATION_ID, "no benchmark to check against: give --benchmark FILE (e.g. IFEval's "
                                        "prompts: a .jsonl with a prompt column, .parquet or .txt)", threshold)
    if "prompt" not in pairs.columns:
        return skip(DECONTAMINATION_ID, "no prompt column; provide `prompt`", threshold)
    if pairs.height == 0:
        return skip(DECONTAMINATION_ID, "no rows", threshold)
    if ngram < 1 or not 0.0 <= max_overlap < 1.0:
        raise ValueError("ngram must be >= 1 and max_overlap in [0, 1)")

    names = list(benchmarks)
    frames = [benchmark_frame(benchmarks[name]) for name in names]
    items = pl.concat(frames) if frames else pl.DataFrame(schema={"item": pl.String, "prompt": pl.String})
    bench_of = np.repeat(np.arange(len(names)), [f.height for f in frames])
    texts = normalise_series(items["prompt"])
    hashes, grams, words = ngram_hashes(texts, ngram)
    wanted, gram_index = np.unique(hashes, return_inverse=True)
    # (n-gram, item, how often the item has it): what a prompt's matching n-gram counts for each item
    entries = (pl.DataFrame({"u": gram_index.astype(np.int64), "item": np.repeat(np.arange(items.height), grams)})
               .group_by("u", "item").agg(pl.len().cast(pl.Int64).alias("times")))
    short = np.flatnonzero((words > 0) & (words < ngram))
    patterns = (" " + texts.gather(short) + " ").to_list()

    # each distinct prompt once (a prompt has several pairs); `copy_of`: each pair's distinct prompt
    prompts = pairs["prompt"].cast(pl.String).fill_null("")
    first = pl.DataFrame({"t": prompts}).with_row_index("i").select(pl.col("i").min().over("t")).to_series().to_numpy()
    distinct = np.flatnonzero(first == np.arange(first.size))
    copy_of = np.searchsorted(distinct, first)
    unique_prompts = prompts.gather(distinct)
    short_found: list[tuple[np.ndarray, np.ndarray]] = []

    def normalised(a: int, b: int) -> pl.Series:
        block = normalise_series(unique_prompts.slice(a, b - a))
        if patterns:  # short items: the whole item between word boundaries (the prompt is whitespace-collapsed)
            padded = " " + block + " "
            candidates = np.flatnonzero(padded.str.contains_any(patterns).to_numpy())
            if candidates.size:
                held = padded.gather(candidates)
                for item, pattern in zip(short, patterns):
                    rows = candidates[held.str.contains(pattern, literal=True).to_numpy()]
                    short_found.append((rows + a, np.full(rows.size, item)))
        return block

    if wanted.size:
        rows, found = ngrams_in(normalised, len_bytes(unique_prompts), wanted, ngram)
    else:  # short items only: the substring pass alone, block by block
        for a, b in row_blocks(len_bytes(unique_prompts)):
            normalised(a, b)
        rows = found = np.zeros(0, np.int64)
    hits = [_overlapping(rows[lo:hi], found[lo:hi], entries, grams, max_overlap) for lo, hi in _slices(rows)]
    hits += [pl.DataFrame({"prompt": r, "item": i, "overlap": np.ones(r.size)}) for r, i in short_found if r.size]
    schema = {"prompt": pl.Int64, "item": pl.Int64, "overlap": pl.Float64}
    contaminated = pl.concat([h.cast(schema) for h in hits]) if hits else pl.DataFrame(schema=schema)
    # every pair whose prompt contaminates an item: (pair row, item, overlap)
    benches = pl.DataFrame({"item": np.arange(items.height, dtype=np.int64), "bench": bench_of.astype(np.int64)})
    by_pair = (pl.DataFrame({"row": np.arange(pairs.height, dtype=np.int64), "prompt": copy_of.astype(np.int64)})
               .join(contaminated, on="prompt").join(benches, on="item").sort("row", "item"))
    ids = pairs.select(pl.col(next((c for c in ("id", "pair_id") if c in pairs.columns), "prompt"))
                       .cast(pl.String).fill_null("") if {"id", "pair_id"} & set(pairs.columns)
                       else pl.int_range(pl.len()).cast(pl.String)).to_series()  # as frames.ids names rows
    by_pair = by_pair.with_columns(pair_id=ids.gather(by_pair["row"]))
    # each pair once, under the first benchmark it contaminates
    owner = by_pair.group_by("row").agg(pl.col("bench").min()).sort("bench", "row")
    offending = tuple(ids.gather(owner["row"]).to_list())

    report: dict[str, dict[str, Any]] = {}
    for b, (name, frame) in enumerate(zip(names, frames)):
        mine = by_pair.filter(pl.col("bench") == b)
        per_item = (mine.group_by("item", maintain_order=True)
                    .agg(pl.col("overlap").max(), pl.col("pair_id").unique(maintain_order=True))
                    .sort("item"))
        n_items = frame.height
        report[name] = {
            "items": n_items, "short_items": int(np.isin(short, np.flatnonzero(bench_of == b)).sum()),
            "contaminated": per_item.height, "share": per_item.height / n_items if n_items else 0.0,
            "pairs": mine["row"].n_unique(), "listed": int((owner["bench"] == b).sum()),
            "contaminated_items": [
                {"item": items["item"][i], "prompt": _cut(items["prompt"][i]), "overlap": round(float(o), 4),
                 "n_pairs": len(p), "pair_ids": p[:LISTED_PAIR_IDS]}
                for i, o, p in per_item.head(LISTED_ITEMS).iter_rows()],
        }
    metric = max(r["share"] for r in report.values())
    failing = [name for name, r in report.items() if r["share"] > threshold]
    details = {"ngram": ngram, "max_overlap": max_overlap, "max_contaminated_share": max_contaminated_share,
               "n_pairs": pairs.height, "n_prompts": int(distinct.size), "n_offending": len(offending),
               "benchmarks": report}
    return CheckResult(DECONTAMINATION_ID, "fail" if failing else "pass", metric, threshold, offending,
                       _decontamination_message(details), details)


def _overlapping(rows: np.ndarray, found: np.ndarray, entries: pl.DataFrame, grams: np.ndarray,
                 max_overlap: float) -> pl.DataFrame:
    """(prompt, item, overlap) where more than `max_overlap` of the item's n-gram positions are n-grams
    the prompt holds; `rows`, `found`: each prompt's distinct matching n-grams (ngrams_in)."""
    matched = (pl.DataFrame({"prompt": rows, "u": found}).join(entries, on="u")
               .group_by("prompt", "item").agg(pl.col("times").sum()))
    total = pl.Series(grams.astype(np.float64))
    return (matched.with_columns(overlap=pl.col("times") / total.gather(matched["item"]))
            .filter(pl.col("overlap") > max_overlap).select("prompt", "item", "overlap"))


def _slices(rows: np.ndarray) -> list[tuple[int, int]]:
    """[lo, hi) ranges of about MATCH_SLICE matches, cut between prompts (`rows` is sorted)."""
    cuts = np.searchsorted(rows, rows[np.arange(MATCH_SLICE, rows.size, MATCH_SLICE)], "left") if rows.size else []
    edges = np.unique(np.concatenate([[0], cuts, [rows.size]]).astype(np.int64))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _cut(text: str | None, limit: int = 160) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _decontamination_message(details: dict[str, Any]) -> str:
    parts = []
    for name, r in details["benchmarks"].items():
        if not r["contaminated"]:
            parts.append(f"{name}: none of {r['items']} items")
            continue
        keys = ", ".join(str(i["item"]) for i in r["contaminated_items"][:5])
        more = ", ..." if r["contaminated"] > 5 else ""
        parts.append(f"{name}: {r['contaminated']} of {r['items']} items ({r['share']:.2%}) in {r['pairs']} pairs "
                     f"(items {keys}{more})")
    rule = (f"an item counts when > {details['max_overlap']:.0%} of its word {details['ngram']}-grams are in one "
            f"training prompt (shorter items: their whole text); a benchmark fails above "
            f"{details['max_contaminated_share']:.2%} of its items")
    return "; ".join(parts) + f" ({rule})"


def contaminated_by(result: CheckResult) -> dict[str, str]:
    """pair id -> the benchmark it contaminates (the first, in the order given), from a
    decontamination result: its offending ids come benchmark by benchmark, `listed` of each."""
    found: dict[str, str] = {}
    at = 0
    for name, r in (result.details.get("benchmarks") or {}).items():
        for pair_id in result.offending[at: at + r["listed"]]:
            found.setdefault(pair_id, name)
        at += r["listed"]
    return found
