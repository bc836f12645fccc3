"""Synthetic preference pairs with injected faults, for benchmarks and tests.

SYNTHETIC DATA: texts are random sequences of made-up words, not language. Use real data
(../shared/data) for anything about content; use this only where scale or known ground truth
matters (dedup speed, recall). `prompt_id` / `pair_id` here are polars 64-bit hashes written as
20-digit strings, not the sha256 ids of `prefdata.data.records` (computing those for a million rows
would dominate the benchmark).

`make_synthetic_pairs(n, seed)` returns (frame, truth). The frame has the columns
id, pair_id, prompt_id, prompt, chosen, rejected, category, split; prompts are ~200 characters
(29 words) and responses ~400 (7 phrases of 8 words from a pool of 200,000 random phrases), with
words drawn uniformly from a vocabulary of 5,000 random lower-case "words" of 3-9 letters, so two
clean prompts share almost no character 5-grams and are never near duplicates of each other.
About `fault_rate` (1%) of the rows are faults of each kind, and `truth` lists their ids (the four
lists are disjoint; fault rows copy only from clean, earlier rows):

    exact_duplicates  copies of an earlier row (prompt, chosen, rejected, category, split), new id
    near_duplicates   an earlier row's prompt with 1-2 words replaced (responses copied), such that
                      the Jaccard of the two prompts' character 5-gram sets is >= 0.8 (checked here)
    length_ratio      chosen or rejected made ~3x longer than the other (ratio > 2, checked here)
    answer_leakage    the row's chosen response appended to its prompt

ids are "p0000001", "p0000002", ... in row order. 1,000,000 rows take a few seconds.
"""

from __future__ import annotations

import numpy as np
import polars as pl

VOCAB_SIZE = 5_000
PROMPT_WORDS = 29  # x ~7 characters per word and space = ~200 characters
PHRASE_WORDS = 8
PHRASES_PER_RESPONSE = 7  # 56 words = ~400 characters
PHRASE_POOL = 200_000
NEAR_DUP_MIN_JACCARD = 0.8
SHINGLE = 5
CATEGORIES = ("harmless", "helpful", "coding", "math", "writing")
FAULT_KINDS = ("exact_duplicates", "near_duplicates", "length_ratio", "answer_leakage")


def _vocabulary(rng: np.random.Generator, size: int) -> pl.Series:
    words: set[str] = set()
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    while len(words) < size:
        lengths = rng.integers(3, 10, size=size)
        chars = letters[rng.integers(0, 26, size=(size, 9))]
        words.update("".join(row[:k]) for row, k in zip(chars, lengths))
    return pl.Series("w", sorted(words)[:size], dtype=pl.String)


def _join_words(vocab: pl.Series, idx: np.ndarray) -> pl.Series:
    """Rows of word indices (n, w) -> n strings of space-separated words."""
    n, w = idx.shape
    if n == 0:
        return pl.Series([], dtype=pl.String)
    words = vocab.gather(idx.reshape(-1))
    return words.reshape((n, w)).arr.join(" ")


def _shingles(text: str, k: int = SHINGLE) -> set[str]:
    return {text[i : i + k] for i in range(max(1, len(text) - k + 1))}


def jaccard(a: str, b: str, k: int = SHINGLE) -> float:
    """Exact Jaccard of the character k-gram sets of two texts."""
    sa, sb = _shingles(a, k), _shingles(b, k)
    return len(sa & sb) / len(sa | sb)


def make_synthetic_pairs(
    n: int,
    seed: int = 0,
    *,
    fault_rate: float = 0.01,
    vocab_size: int = VOCAB_SIZE,
) -> tuple[pl.DataFrame, dict[str, list[str]]]:
    """n synthetic pairs and the ids of the injected faults (see the module docstring)."""
    rng = np.random.default_rng(seed)
    vocab = _vocabulary(rng, vocab_size)
    prompt_idx = rng.integers(0, vocab_size, size=(n, PROMPT_WORDS), dtype=np.int32)
    prompt = _join_words(vocab, prompt_idx)
    # responses: PHRASES_PER_RESPONSE random phrases from a pool of random 8-word phrases (7x fewer
    # strings to join than drawing every word; two responses share a phrase with probability ~2e-4)
    pool = _join_words(vocab, rng.integers(0, vocab_size, size=(PHRASE_POOL, PHRASE_WORDS), dtype=np.int32))

    def responses(count: int, phrases: int = PHRASES_PER_RESPONSE) -> pl.Series:
        return _join_words(pool, rng.integers(0, PHRASE_POOL, size=(count, phrases), dtype=np.int32))

    chosen = responses(n)
    rejected = responses(n)
    category = pl.Series(CATEGORIES).gather(rng.integers(0, len(CATEGORIES), size=n))
    split = pl.Series(["train", "test"]).gather((rng.random(n) < 0.1).astype(np.int64))

    # disjoint fault rows, never row 0, so every fault row has a clean row before it
    per_kind = int(round(n * fault_rate)) if n >= 10 else 0
    fault_rows = rng.permutation(np.arange(1, n, dtype=np.int64))[: 4 * per_kind]
    kinds = {
        kind: np.sort(fault_rows[i * per_kind : (i + 1) * per_kind]) for i, kind in enumerate(FAULT_KINDS)
    }
    is_clean = np.ones(n, dtype=bool)
    is_clean[fault_rows] = False
    clean = np.nonzero(is_clean)[0]

    def earlier_clean(targets: np.ndarray) -> np.ndarray:
        count = np.searchsorted(clean, targets)  # clean rows before each target (>= 1: row 0 is clean)
        return clean[(rng.random(targets.size) * count).astype(np.int64)]

    columns = {"prompt": prompt, "chosen": chosen, "rejected": rejected, "category": category, "split": split}

    def copy_rows(names: tuple[str, ...], targets: np.ndarray, sources: np.ndarray) -> None:
        for name in names:
            col = columns[name]
            columns[name] = col.scatter(targets, col.gather(sources))

    # exact duplicates: whole copies of an earlier clean row
    t = kinds["exact_duplicates"]
    copy_rows(tuple(columns), t, earlier_clean(t))

    # near duplicates: an earlier clean row's prompt with 1-2 words replaced (responses copied)
    t = kinds["near_duplicates"]
    s = earlier_clean(t)
    words = prompt_idx[s].copy()
    n_changes = rng.integers(1, 3, size=t.size)
    for change in range(2):
        rows = np.nonzero(n_changes > change)[0]
        pos = rng.integers(0, PROMPT_WORDS, size=rows.size)
        words[rows, pos] = (words[rows, pos] + rng.integers(1, vocab_size, size=rows.size)) % vocab_size
    near = _join_words(vocab, words).to_list()
    originals = columns["prompt"].gather(s).to_list()
    for i in range(t.size):
        if jaccard(near[i], originals[i]) < NEAR_DUP_MIN_JACCARD:
            # too many characters changed: keep only one changed word (always >= 0.87 for 29 words)
            one = prompt_idx[s[i]].copy()
            p = int(rng.integers(0, PROMPT_WORDS))
            one[p] = (one[p] + 1 + int(rng.integers(0, vocab_size - 1))) % vocab_size
            near[i] = " ".join(vocab.gather(one).to_list())
            assert jaccard(near[i], originals[i]) >= NEAR_DUP_MIN_JACCARD
    columns["prompt"] = columns["prompt"].scatter(t, pl.Series(near, dtype=pl.String))
    copy_rows(("chosen", "rejected", "category", "split"), t, s)

    # length ratio: one side gets two more responses' worth of words (~3x the other side)
    t = kinds["length_ratio"]
    extra = responses(t.size, 2 * PHRASES_PER_RESPONSE)
    longer = pl.Series(rng.random(t.size) < 0.5)
    c, r = columns["chosen"].gather(t), columns["rejected"].gather(t)
    grown = pl.DataFrame({"c": c, "r": r, "x": extra, "longer": longer}).select(
        pl.when("longer").then(pl.col("c") + " " + pl.col("x")).otherwise("c").alias("c"),
        pl.when("longer").then("r").otherwise(pl.col("r") + " " + pl.col("x")).alias("r"),
    )
    lengths = grown.select(pl.col("c").str.len_chars(), pl.col("r").str.len_chars())
    assert lengths.select((pl.max_horizontal("c", "r") > 2 * pl.min_horizontal("c", "r")).all()).item()
    columns["chosen"] = columns["chosen"].scatter(t, grown["c"])
    columns["rejected"] = columns["rejected"].scatter(t, grown["r"])

    # answer leakage: the chosen response pasted into the prompt
    t = kinds["answer_leakage"]
    leaked = columns["prompt"].gather(t) + " " + columns["chosen"].gather(t)
    columns["prompt"] = columns["prompt"].scatter(t, leaked)

    width = max(7, len(str(n)))
    ids = "p" + pl.int_range(1, n + 1, eager=True).cast(pl.String).str.zfill(width)
    # synthetic ids: polars 64-bit hashes (fast), not records.prompt_id / records.pair_id
    hp = columns["prompt"].hash(seed=11)
    hc, hr = columns["chosen"].hash(seed=12), columns["rejected"].hash(seed=12)
    hc, hr = hc.to_numpy(), hr.to_numpy()
    hashes = pl.DataFrame({"p": hp, "lo": np.minimum(hc, hr), "hi": np.maximum(hc, hr)})  # side-independent
    pair_hash = hashes.select(pl.struct("p", "lo", "hi").hash(seed=13)).to_series()
    frame = pl.DataFrame(
        {
            "id": ids,
            "pair_id": pair_hash.cast(pl.String).str.zfill(20),
            "prompt_id": hp.cast(pl.String).str.zfill(20),
            **{name: col.alias(name) for name, col in columns.items()},
        }
    )

    ids = frame["id"]
    truth = {kind: ids.gather(rows).to_list() for kind, rows in kinds.items()}
    return frame, truth
