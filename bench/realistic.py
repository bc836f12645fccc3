"""Preference pairs shaped like UltraFeedback-binarized, with injected faults whose ids are known.

SYNTHETIC DATA: texts are made-up words and phrases, not language (see bench/synth.py). What is
realistic is the *shape*, which is what the checklist's cost depends on:

- k = 4 completions per prompt; the best is `chosen` against each of the other three, so every
  prompt gives three pairs that share the prompt and the chosen text (UltraFeedback-binarized's
  `train_prefs` has this structure);
- ~5% of rejected replies are one of a few canned refusals (at most one per prompt, so two sibling
  pairs are never the same pair);
- lengths vary (prompts 60-600 characters, completions 150-2,000, log-normal around a per-prompt
  length), and a prompt is never
  longer than 0.6x its chosen reply, so two sibling pairs stay below Jaccard 0.8 on their whole
  text (they share prompt and chosen, but not the rejected reply) and are not near duplicates;
- injected faults, each on its own rows, copied only from clean rows (`truth` lists their ids):

    exact_duplicates     a clean pair copied with case and whitespace changed, new id (~1%)
    near_duplicates      a clean pair copied with 1-3 words of its prompt or chosen reply replaced,
                         pair-text Jaccard of byte 5-grams >= 0.8 (checked here), new id (~1%)
    length_ratio         the rejected reply cut to under 1/3 of the chosen one (~0.5%)
    answer_leakage       the chosen reply appended to the prompt (0.5%)
    identical_responses  rejected = chosen (0.1%; `prefdata import` quarantines these)
    empty_prompt         the prompt is empty (0.05%; quarantined by the import)

  Canned refusals are *not* faults of the duplicate checks, but a ~40-character refusal against a
  long chosen reply breaks the length ratio: `truth["length_ratio_all"]` lists every row whose
  longer/shorter ratio is above 2, injected or not.

Shaped like real collections (`shape="collections"`, the default since 2026-12-07; issue 46 item 4),
on top of the above, with draws of their own (so `shape="plain"` gives the earlier rows, row for row):

- the completions sampled for one prompt start alike: each rejected completion repeats the first
  30-70% of the chosen one's phrases (less where two sibling pairs' texts would come near the
  near-duplicate threshold: their estimated Jaccard is kept <= SIBLING_MAX_J; measured on 10k
  prompts: median 0.54, 99th percentile 0.70, largest 0.72), so chosen and rejected share long
  starts and sibling pairs are near-duplicate candidates that only exact Jaccard settles;
- canned replies are reused across prompts: the canned rejected replies are drawn from refusals and
  stock answers (CANNED: "Yes.", "I don't know.", a paragraph asking for context, ...), and for ~2%
  of the prompts a canned reply is the chosen one (`truth["canned_chosen_rows"]`);
- the injected faults and their ids are the same kinds and rates as above.

Columns: id ("u0000001", ... in row order), prompt, chosen, rejected, score_chosen, score_rejected,
source. `make_realistic_pairs(n, seed)` is deterministic for (n, seed, shape); 1M pairs take ~30 s
(~80 s in the collections shape).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from bench.synth import _vocabulary

K = 4  # completions per prompt
PHRASE_WORDS = 8
PHRASE_POOL = 200_000
VOCAB = 5_000
REFUSALS = (
    "I'm sorry, but I can't help with that.",
    "I'm sorry, but I cannot assist with that request.",
    "As an AI language model, I cannot provide that information.",
    "I apologize, but I am unable to fulfil this request.",
    "Sorry, I can't help with this one.",
)
REFUSAL_SHARE = 0.05
# The shapes: "collections" (the default) is shaped like real collections, "plain" is the shape this
# generator had before (bench/RESULTS.md's figures up to 2026-12-06 are on it; same rows, same ids).
SHAPES = ("collections", "plain")
# collections: stock answers a model gives to many prompts, reused like the refusals above (as the
# rejected reply, and as the chosen one for CANNED_CHOSEN_SHARE of the prompts)
STOCK_ANSWERS = (
    "Thank you for your question! Could you please provide a little more context, so that I can give "
    "you a more accurate and useful answer?",
    "I'm not sure I understand the question. Could you rephrase it or add some details about what you "
    "are looking for?",
    "As an AI language model, I do not have personal opinions or feelings. However, I can share some general "
    "information on this topic if that would be useful to you.",
    "As an AI language model, I do not have access to real-time information, so I cannot give you an accurate "
    "answer. Please check a reliable and up-to-date source for the latest details.",
    "Great question! The answer depends on several factors, including your specific situation, your goals and "
    "the resources you have available. It is a good idea to consult a qualified professional who can take "
    "your circumstances into account and give you advice tailored to your needs.",
    "The question contains an assumption that does not hold, so it cannot be answered as it is asked. If you "
    "tell me more about what you want to find out, I will do my best to give a correct and complete answer.",
    "Sure! Here is a summary of the main points: the topic has several aspects that are worth considering, "
    "and the best choice depends on the details of your situation. Let me know which aspect you would like "
    "me to explain further, and I will go into more depth on it.",
    "I'm sorry, but I cannot answer that question as it is written, because it is ambiguous and could be read "
    "in several different ways. Each reading would lead to a different answer. Please clarify which meaning you "
    "intended, and include any constraints or examples that matter to you, so that the answer fits what you need.",
    "Yes.",
    "No, that is not correct.",
    "I don't know.",
    "There is not enough information in the question to answer it.",
)
CANNED = REFUSALS + STOCK_ANSWERS
CANNED_CHOSEN_SHARE = 0.02  # of the prompts: a canned reply is the chosen one (a refusal preferred, say)
# the completions sampled for one prompt start alike: the rejected ones repeat the first 30-70% of the
# chosen one's phrases (less where sibling pairs would come near the near-duplicate threshold: SIBLING_MAX_J)
PREFIX_SHARE = (0.3, 0.7)
SIBLING_MAX_J = 0.7  # estimated Jaccard of two sibling pairs' texts, kept below 0.8 with room to spare
RATES = {"exact_duplicates": 0.01, "near_duplicates": 0.01, "length_ratio": 0.005, "answer_leakage": 0.005,
         "identical_responses": 0.001, "empty_prompt": 0.0005}
SHINGLE = 5
NEAR_MIN_JACCARD = 0.8


def _picks(pool: pl.Series, rng: np.random.Generator, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, pool indices): `counts[i]` random pool entries for text i."""
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return offsets, rng.integers(0, len(pool), size=int(offsets[-1]))


def _join(pool: pl.Series, offsets: np.ndarray, picks: np.ndarray) -> pl.Series:
    """One text per run of `picks` (offsets): those pool entries joined by spaces."""
    import pyarrow as pa

    words = pool.gather(picks).to_arrow()
    lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), words.cast(pa.string()))
    return pl.from_arrow(lists).list.join(" ").rename("text")


def _texts(pool: pl.Series, rng: np.random.Generator, counts: np.ndarray) -> pl.Series:
    """One text per entry of `counts`: that many random pool entries joined by spaces."""
    return _join(pool, *_picks(pool, rng, counts))


def _shingles(text: str) -> set[bytes]:
    from prefdata.checks.dedup import normalise_series

    data = normalise_series(pl.Series([text])).item().encode()
    return {data[i : i + SHINGLE] for i in range(max(1, len(data) - SHINGLE + 1))}


def _jaccard(a: str, b: str) -> float:
    sa, sb = _shingles(a), _shingles(b)
    return len(sa & sb) / max(1, len(sa | sb))


def _messy_case(text: str, rng: np.random.Generator) -> str:
    """Same text after normalisation: some words upper-cased, doubled spaces, a trailing newline."""
    words = text.split(" ")
    out = [w.upper() if rng.random() < 0.3 else w for w in words]
    return "  ".join(out[:3]) + " " + " ".join(out[3:]) + " \n"


def _shared_prefixes(comp: np.ndarray, lengths: np.ndarray, prompt_len: np.ndarray, chosen_len: np.ndarray,
                     canned_chosen: np.ndarray, tail_fixed: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(n_prompts, K) phrases each completion takes from the start of completion 0 (0 for completion 0).

    Each prompt draws a share in PREFIX_SHARE; completion k repeats that share of min(its phrases,
    completion 0's), keeping at least one phrase of its own. Two sibling pairs share the prompt and the
    chosen reply (and, when the chosen reply is canned, the rejected replies' common start), so the
    share is lowered, in steps, where the estimated Jaccard of some two sibling pairs' texts (in
    characters: shared / all) would pass SIBLING_MAX_J; `tail_fixed` (n_prompts, K) gives the own
    characters of rejected replies that are canned (their length) or cut or copied by a fault (0),
    NaN elsewhere."""
    n_prompts = comp.shape[0]
    target = rng.uniform(*PREFIX_SHARE, size=n_prompts)
    base = prompt_len + chosen_len
    x = canned_chosen.astype(np.float64)
    pairs = [(1, 2), (1, 3), (2, 3)]
    share = np.zeros(n_prompts)
    done = np.zeros(n_prompts, dtype=bool)
    for step in (1.0, 0.85, 0.7, 0.55, 0.4, 0.25, 0.1):
        f = target * step
        stem = np.minimum(np.floor(f[:, None] * np.minimum(comp[:, :1], comp)), comp - 1)
        stem_chars = lengths * stem / comp
        tail = np.where(np.isnan(tail_fixed), lengths - stem_chars, tail_fixed)
        stem_chars = np.where(np.isnan(tail_fixed), stem_chars, 0.0)
        worst = np.zeros(n_prompts)
        for j, k in pairs:
            lo, hi = np.minimum(stem_chars[:, j], stem_chars[:, k]), np.maximum(stem_chars[:, j], stem_chars[:, k])
            jac = (base + x * lo) / np.maximum(1.0, base + x * hi + tail[:, j] + tail[:, k])
            worst = np.maximum(worst, jac)
        fits = ~done & (worst <= SIBLING_MAX_J)
        share[fits] = f[fits]
        done |= fits
    stem = np.minimum(np.floor(share[:, None] * np.minimum(comp[:, :1], comp)), comp - 1).astype(np.int64)
    stem[:, 0] = 0
    return np.maximum(stem, 0)


def _with_prefixes(offsets: np.ndarray, picks: np.ndarray, stem: np.ndarray) -> np.ndarray:
    """`picks` with completion (i, k)'s first stem[i, k] phrases set to completion (i, 0)'s."""
    counts = stem.reshape(-1)
    first = np.repeat(np.arange(0, counts.size, K), K)  # completion 0 of each completion's prompt
    total = int(counts.sum())
    within = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    out = picks.copy()
    out[np.repeat(offsets[:-1], counts) + within] = picks[np.repeat(offsets[:-1][first], counts) + within]
    return out


def make_realistic_pairs(n: int, seed: int = 0, first_id: int = 1,
                         shape: str = "collections") -> tuple[pl.DataFrame, dict[str, list[str]]]:
    """`n` pairs (n >= 100) and the ids of the injected faults (see the module docstring); ids
    count from `first_id`. `shape`: "collections" (shared starts, canned replies as chosen too) or
    "plain" (this generator's earlier shape, row for row)."""
    if n < 100:
        raise ValueError(f"n must be >= 100, got {n}")
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng, VOCAB)
    phrases = vocab.gather(rng.integers(0, VOCAB, size=(PHRASE_POOL, PHRASE_WORDS)).reshape(-1))
    phrases = phrases.reshape((PHRASE_POOL, PHRASE_WORDS)).arr.join(" ")  # ~60 characters each
    n_prompts = -(-n // (K - 1))

    # completion lengths in phrases (~61 characters each): log-normal, 150-2,000 characters
    # (a per-prompt base length, each completion varying around it)
    base = rng.normal(np.log(9), 0.5, size=(n_prompts, 1))
    comp = np.clip(np.round(np.exp(base + rng.normal(0, 0.25, size=(n_prompts, K)))), 3, 32).astype(np.int64)
    best = comp[:, 0]  # completion 0 is the best one (chosen)
    # prompts in words (~7 characters each): 60-600 characters and at most 0.6x the chosen reply
    words = np.clip(np.round(np.exp(rng.normal(np.log(25), 0.5, size=n_prompts))), 9, 85).astype(np.int64)
    words = np.minimum(words, np.maximum(9, (best * 61 * 0.6 / 7).astype(np.int64)))
    prompts = _texts(vocab, rng, words)
    comp_offsets, comp_picks = _picks(phrases, rng, comp.reshape(-1))
    completions = _join(phrases, comp_offsets, comp_picks)  # row-major: prompt i's are 4i..4i+3

    # pairs: (prompt i, completion 0) against completions 1, 2, 3
    group = np.repeat(np.arange(n_prompts), K - 1)[:n]
    other = np.tile(np.arange(1, K), n_prompts)[:n]
    chosen_idx, rejected_idx = group * K, group * K + other
    frame = pl.DataFrame({
        "prompt": prompts.gather(group),
        "chosen": completions.gather(chosen_idx),
        "rejected": completions.gather(rejected_idx),
    })
    scores = np.round(rng.uniform(1, 10, size=(n_prompts, K)), 1)
    scores[:, 0] = 10.0
    score_chosen, score_rejected = scores[group, 0], np.minimum(scores[group, other], 9.5)

    # canned refusals: at most one sibling per prompt, so two siblings never become the same pair
    # ...and only where the other two rejected replies are at least 0.7x the chosen one: two siblings
    # share prompt and chosen, so a short reply beside a refusal would make them real near duplicates
    refused = 1 + np.arange(n_prompts) % (K - 1)
    others = np.where(np.arange(1, K)[None, :] == refused[:, None], np.iinfo(np.int64).max, comp[:, 1:])
    allowed = others.min(axis=1) >= 0.7 * best
    refuse_prompt = allowed & (rng.random(n_prompts) < REFUSAL_SHARE * (K - 1) / max(allowed.mean(), 1e-9))
    refusal_row = np.flatnonzero(refuse_prompt[group] & (other == 1 + (group % (K - 1))))
    refusals = pl.Series(REFUSALS).gather(rng.integers(0, len(REFUSALS), size=refusal_row.size))
    frame = frame.with_columns(frame["rejected"].scatter(refusal_row, refusals))

    # faults on distinct rows; sources are clean rows before the fault row
    # No fault goes into a prompt group with a refusal: a sibling cut short (or made identical) next
    # to a ~40-character refusal would make the two pairs real near duplicates of each other.
    truth: dict[str, list[int]] = {k: [] for k in RATES}
    taken = refuse_prompt[group].copy()
    first_fault_row = n // 10  # the first 10% stay clean, so every fault has earlier clean sources
    for kind, rate in RATES.items():
        m = max(1, int(round(n * rate)))
        free = np.flatnonzero(~taken[first_fault_row:]) + first_fault_row
        rows = np.sort(rng.choice(free, size=m, replace=False))
        # one fault per prompt group: two faulty siblings (say, both made identical) could become
        # copies or near copies of each other, which no list here would name
        rows = rows[np.unique(group[rows], return_index=True)[1]]
        taken[np.isin(group, group[rows])] = True
        truth[kind] = np.sort(rows).tolist()

    canned_chosen_row = np.zeros(0, dtype=np.int64)
    if shape == "collections":  # drawn from a stream of their own: the draws above are the plain shape's
        extra = np.random.default_rng([seed, 46])
        canned = pl.Series(CANNED)
        canned_len = canned.str.len_chars().to_numpy().astype(np.float64)
        rejected_canned = extra.integers(0, len(CANNED), size=refusal_row.size)
        faulty_group = np.zeros(n_prompts, dtype=bool)
        tail_fixed = np.full((n_prompts, K), np.nan)
        tail_fixed[group[refusal_row], other[refusal_row]] = canned_len[rejected_canned]
        for kind, rows in truth.items():
            rows = np.asarray(rows, dtype=np.int64)
            faulty_group[group[rows]] = True
            if kind in ("length_ratio", "identical_responses"):  # the rejected reply is no longer its own
                tail_fixed[group[rows], other[rows]] = 0.0
        canned_chosen = ~refuse_prompt & ~faulty_group & (extra.random(n_prompts) < CANNED_CHOSEN_SHARE)
        chosen_canned = extra.integers(0, len(CANNED), size=n_prompts)
        lengths = completions.str.len_chars().to_numpy().reshape(n_prompts, K).astype(np.float64)
        chosen_len = np.where(canned_chosen, canned_len[chosen_canned], lengths[:, 0])
        stem = _shared_prefixes(comp, lengths, prompts.str.len_chars().to_numpy().astype(np.float64), chosen_len,
                                canned_chosen, tail_fixed, extra)
        completions = _join(phrases, comp_offsets, _with_prefixes(comp_offsets, comp_picks, stem))
        canned_chosen_row = np.flatnonzero(canned_chosen[group])
        chosen = completions.gather(chosen_idx).scatter(canned_chosen_row,
                                                         canned.gather(chosen_canned[group[canned_chosen_row]]))
        rejected = completions.gather(rejected_idx).scatter(refusal_row, canned.gather(rejected_canned))
        frame = frame.with_columns(chosen=chosen, rejected=rejected)
    del completions

    cols = {c: frame[c].to_list() for c in ("prompt", "chosen", "rejected")}
    faulty = np.zeros(n, dtype=bool)
    faulty[np.concatenate([np.asarray(v, dtype=np.int64) for v in truth.values()])] = True
    clean_sources = np.flatnonzero(~faulty)
    for r in truth["exact_duplicates"]:
        s = int(rng.choice(clean_sources[clean_sources < r]))
        for c in cols:
            cols[c][r] = _messy_case(cols[c][s], rng)
    vocab_list = vocab.to_list()
    for r in truth["near_duplicates"]:
        while True:
            s = int(rng.choice(clean_sources[clean_sources < r]))
            column = "prompt" if rng.random() < 0.5 else "chosen"
            parts = cols[column][s].split(" ")
            for _ in range(int(rng.integers(1, 4))):
                parts[int(rng.integers(0, len(parts)))] = vocab_list[int(rng.integers(0, VOCAB))]
            new = {c: cols[c][s] for c in cols}
            new[column] = " ".join(parts)
            a = "\n".join(cols[c][s] for c in cols)
            b = "\n".join(new[c] for c in cols)
            if a.lower() != b.lower() and _jaccard(a, b) >= NEAR_MIN_JACCARD:
                break
        for c in cols:
            cols[c][r] = new[c]
    for r in truth["length_ratio"]:
        chosen = cols["chosen"][r]
        cols["rejected"][r] = cols["rejected"][r][: max(5, len(chosen) // 4)].rstrip() or "no"
    for r in truth["answer_leakage"]:
        cols["prompt"][r] = cols["prompt"][r] + "\n" + cols["chosen"][r]
    for r in truth["identical_responses"]:
        cols["rejected"][r] = cols["chosen"][r]
    for r in truth["empty_prompt"]:
        cols["prompt"][r] = ""

    ids = pl.Series("id", np.arange(first_id, first_id + n)).cast(pl.String).str.zfill(7)
    frame = pl.DataFrame({
        "id": "u" + ids,
        "prompt": cols["prompt"], "chosen": cols["chosen"], "rejected": cols["rejected"],
        "score_chosen": score_chosen, "score_rejected": score_rejected,
        "source": pl.Series(["ultrachat", "evol_instruct", "sharegpt", "flan", "truthful_qa"]).gather(group % 5),
    })
    lengths = frame.select(
        c=pl.col("chosen").str.len_chars(), r=pl.col("rejected").str.len_chars())
    ratio = np.maximum(lengths["c"], lengths["r"]) / np.maximum(1, np.minimum(lengths["c"], lengths["r"]))
    id_list = frame["id"]
    out = {k: id_list.gather(v).to_list() for k, v in truth.items()}
    out["length_ratio_all"] = id_list.filter(pl.Series(ratio > 2.0)).to_list()
    out["refusal_rows"] = id_list.gather(refusal_row).to_list()  # a canned rejected reply
    out["canned_chosen_rows"] = id_list.gather(canned_chosen_row).to_list()
    return frame, out


# Above this many pairs the file is written in parts of this size (each its own seed, ids running
# on), so that 10M pairs are made in the memory of 1M. Duplicates are injected within a part.
PART_ROWS = 1_000_000


def write_realistic(path: Path, n: int, seed: int = 0, shape: str = "collections") -> dict[str, list[str]]:
    """Write the pairs to `path` (Parquet) and the truth to `path` with suffix .truth.json."""
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if n <= PART_ROWS:
        frame, truth = make_realistic_pairs(n, seed, shape=shape)
        frame.write_parquet(path)
    else:
        truth: dict[str, list[str]] = {}
        writer = None
        for part, start in enumerate(range(0, n, PART_ROWS)):
            frame, part_truth = make_realistic_pairs(min(PART_ROWS, n - start), seed * 1000 + part, start + 1,
                                                    shape=shape)
            table = frame.to_arrow()
            writer = writer or pq.ParquetWriter(path, table.schema, compression="zstd")
            writer.write_table(table, row_group_size=125_000)
            for k, v in part_truth.items():
                truth.setdefault(k, []).extend(v)
        writer.close()
    path.with_suffix(".truth.json").write_text(json.dumps(truth))
    return truth


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Write realistic pairs to Parquet (and a .truth.json).")
    parser.add_argument("path", type=Path)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shape", choices=SHAPES, default="collections")
    args = parser.parse_args()
    t = write_realistic(args.path, args.n, args.seed, args.shape)
    print({k: len(v) for k, v in t.items()})
