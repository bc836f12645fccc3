"""Duplicate checks: exact duplicates after normalisation, and MinHash-LSH near duplicates.

Deduplication is one of the seed's three filters ("去重 + 长度过滤": dedup + length filtering).

Exact duplicates (`check_exact_duplicates`) compare texts after the same normalisation as
`prefdata.data.records.normalise_text` (unicode NFKC, Unicode case folding, whitespace collapsed and
stripped), through its polars twin `records.normalise_series`: identical results, so rows with one
`pair_id` are exact duplicates here.

Near duplicates (`check_near_duplicates`, `find_near_duplicates`) use MinHash-LSH over shingles of
the normalised text; the engine (signatures, banding, candidates, screen, Jaccard verification)
is checks/minhash.py, whose docstring describes steps 2-6. This module prepares the rows for it:

1. Normalise; collapse exact duplicates (identical normalised text) to one representative, so LSH
   runs on unique texts only and exact copies never form huge candidate buckets. Texts are
   normalised (and, for whole pairs, joined) a block of rows (BLOCK_BYTES) at a time and hashed
   there (64-bit hash for exact duplicates, signatures below), so a normalised copy of a whole
   column is never held; rows whose hashes match are compared on their real texts, and the few
   texts verification needs are normalised again. Within a block each distinct text is normalised
   once (`_normalise_reused`: replies shared by sibling pairs, canned refusals). In a checklist run
   the exact check reuses this pass: `check_near_duplicates` hashes the normalised blocks for it
   too (`derived`, EXACT_KEYS), and hash-equal rows whose raw texts are equal need no comparison.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Literal, Sequence

import numpy as np
import polars as pl

from prefdata.data import records

from .base import CheckResult, default, skip
from .frames import BLOCK_BYTES, len_bytes, per_distinct, row_blocks

# the engine; its public names (and the tunables tests shrink) are re-exported here
from .minhash import (  # noqa: F401
    DEFAULT_NGRAM, DEFAULT_NUM_PERM, VERIFY_BYTES, NearDuplicates, _find_near_duplicates, _lsh_split,
    _sorted_unique, lsh_params,
)


# Defaults. Jaccard 0.8 over 5-gram shingles with ~128 MinHash values is the common near-duplicate
# setting: datatrove's MinhashConfig defaults to 5-grams and 14 buckets x 8 hashes, which its source
# documents as "probability of inclusion for s=0.8: 0.924"; Lee et al. 2022 ("Deduplicating Training
# Data Makes Language Models Better", NearDup) use MinHash over 5-grams with a 0.8 similarity cut-off,
# and the Pile's MinHash dedup is cited for the same range (those two not re-checked here). Any
# duplicate fails by default (share threshold 0.0): dedup is one of the seed's three filters,
# "去重 + 长度过滤" (dedup + length filtering).
# All set in checks/checklist.yaml (base.default); num_perm and ngram are read by checks/minhash.py.
DEFAULT_JACCARD = default("near_duplicates", "threshold")
DEFAULT_SCOPE = default("near_duplicates", "scope")
DEFAULT_SEED = default("near_duplicates", "seed")
NEAR_MAX_SHARE = default("near_duplicates", "max_share")
FAIL_ON_REPEATED_PROMPTS = default("exact_duplicates", "fail_on_repeated_prompts")
EXACT_MAX_SHARE = default("exact_duplicates", "max_share")
EXACT_ID, NEAR_ID = "exact_duplicates", "near_duplicates"
PAIR_COLUMNS = ("prompt", "chosen", "rejected")
MAX_SAMPLE_CLUSTERS = 20
MAX_SAMPLE_MEMBERS = 20
MAX_EXAMPLES = 3  # offending rows named with the row they repeat, in details["examples"]



# ----------------------------------------------------------------------------------------------
# normalisation


# the one normaliser (prefdata.data.records): NFKC, Unicode case folding, whitespace; re-exported here
# as the duplicate checks' block normaliser
normalise_series = records.normalise_series


def _hash_key(columns: Sequence[pl.Series], seed: int = 0) -> np.ndarray:
    """One uint64 per row: each column's 64-bit polars hash (seed + i), combined by a struct hash
    when there are several. A function of the row's values alone, so it can be computed in blocks."""
    hashes = pl.DataFrame({f"h{i}": c.hash(seed + i) for i, c in enumerate(columns)})
    combined = pl.struct(hashes.columns).hash(seed) if len(columns) > 1 else pl.col("h0")
    return hashes.select(combined).to_series().to_numpy()


def _first_by_key(key: np.ndarray) -> np.ndarray:
    """For each row, the index of the first row with the same key."""
    frame = pl.DataFrame({"h": key}).with_row_index("i")
    return frame.select(pl.col("i").min().over("h")).to_series().to_numpy().astype(np.int64)


def _verified_prefix(rep: np.ndarray, verified: tuple[int, np.ndarray, np.ndarray] | None) -> int:
    """How many leading rows need no comparing of their texts with their first copies' (`rep`): n_old
    when `verified` = (n_old, rows, firsts), an earlier run's first copies over rows 0..n_old-1 that it
    compared on their texts (row rows[i]'s is firsts[i], every other row its own), gives the same
    first copies as `rep` there; else 0 (a hash collision among them, or other rows: all compared)."""
    if verified is None:
        return 0
    n_old, rows, firsts = verified
    if n_old > rep.size:
        return 0
    theirs = np.arange(n_old, dtype=np.int64)
    theirs[rows] = firsts
    return n_old if np.array_equal(rep[:n_old], theirs) else 0


def _first_by_text(columns: Sequence[pl.Series]) -> np.ndarray:
    """For each row, the index of the first row whose texts are identical in every column."""
    frame = pl.DataFrame({f"t{i}": c for i, c in enumerate(columns)}).with_row_index("i")
    return frame.select(pl.col("i").min().over(frame.columns[1:])).to_series().to_numpy().astype(np.int64)


# Raw text bytes are normalised a block (BLOCK_BYTES, checks/frames.py) at a time: a whole column's
# normalised copy is never held at once. Rows compared per batch when hash-equal rows are checked for real.
COMPARE_ROWS = 1 << 16

def _normalise_reused(texts: pl.Series) -> pl.Series:
    """`normalise_series`, with each distinct text normalised once (frames.per_distinct)."""
    return per_distinct(texts.cast(pl.String), normalise_series).alias(texts.name)


class _Texts:
    """The texts of some string columns, normalised (`normalise_series`) or only null-filled, made
    on demand for a block or a selection of rows, so that a whole normalised copy of the columns is
    never needed. `text` joins the columns with "\\n" (normalised text has no newlines, so the join is
    unambiguous)."""

    def __init__(self, columns: Sequence[pl.Series], normalise: bool = True):
        self.columns = [c.cast(pl.String) for c in columns]
        self.normalise = normalise
        self.n = len(self.columns[0])

    def _prepare(self, raw: list[pl.Series]) -> list[pl.Series]:
        if not self.normalise:
            return [c.fill_null("") for c in raw]
        if len(raw) == 1:
            return [_normalise_reused(raw[0])]
        with ThreadPoolExecutor(len(raw)) as pool:  # polars releases the GIL: columns in parallel
            return list(pool.map(_normalise_reused, raw))

    def parts(self, rows: np.ndarray | tuple[int, int]) -> list[pl.Series]:
        """The prepared columns at `rows`: an index array, or a (start, stop) range."""
        if isinstance(rows, tuple):
            return self._prepare([c.slice(rows[0], rows[1] - rows[0]) for c in self.columns])
        return self._prepare([c.gather(rows) for c in self.columns])

    def text(self, rows: np.ndarray | tuple[int, int]) -> pl.Series:
        return self.join(self.parts(rows))

    @staticmethod
    def join(parts: list[pl.Series]) -> pl.Series:
        if len(parts) == 1:
            return parts[0]
        frame = pl.DataFrame({f"c{i}": c for i, c in enumerate(parts)})
        return frame.select(pl.concat_str(frame.columns, separator="\n")).to_series()

    def blocks(self) -> list[tuple[int, int]]:
        """Row ranges of about BLOCK_BYTES bytes of text, all columns together."""
        return row_blocks(sum(len_bytes(c) for c in self.columns), BLOCK_BYTES)

    # what the MinHash engine (checks/minhash.py RowTexts) needs besides the texts
    @staticmethod
    def hash(block: pl.Series, seed: int) -> np.ndarray:
        return _hash_key([block], seed)

    def first_copies(self, key: np.ndarray) -> np.ndarray:
        """For each row, the first row whose joined prepared text is identical (hash `key`, then texts)."""
        return _first_occurrence_blocked(key, lambda r, e: _same_joined(self, r, e),
                                         lambda: [self.text((0, self.n))])


def _raw_differ(texts: _Texts, rows: np.ndarray, reps: np.ndarray) -> np.ndarray:
    """Per row: do its raw texts differ from its representative's in some column? Raw-equal rows are
    equal once prepared too, so only the others need preparing (reused text: most of them)."""
    differ = np.zeros(rows.size, dtype=bool)
    for column in texts.columns:
        differ |= ~column.gather(rows).eq_missing(column.gather(reps)).to_numpy()
    return differ


def _same_texts(texts: _Texts) -> Callable[[np.ndarray, np.ndarray], bool]:
    """A `same` for `_first_occurrence_blocked`: rows equal their representatives in every column."""

    def same(rows: np.ndarray, reps: np.ndarray) -> bool:
        differ = _raw_differ(texts, rows, reps)
        rows, reps = rows[differ], reps[differ]
        return all(bool((x == y).all()) for x, y in zip(texts.parts(rows), texts.parts(reps)))

    return same


# `derived` (CheckInputs.derived: one dict per checklist run) key under which check_near_duplicates
# leaves the exact check's row hashes, made in its own normalisation pass: (pairs, prompt_key, pair_key)
EXACT_KEYS = "dedup.exact_keys"
# and under which check_exact_duplicates leaves the keys it grouped by, (pairs, prompt_key, pair_key): what
# publish stores for a version of one data file, checked in memory (checks/batched.py whole_file_keys)
EXACT_KEYS_USED = "dedup.exact_keys_used"
# and under which check_near_duplicates leaves what it signed, (pairs, scratch file: checks/batched.py
# `near_file`), likewise stored for a version of one data file (batched.py whole_file_near)
NEAR_SIGNED = "dedup.near_signed"
# set (True) by a run whose caller stores those values (publish): ~335 bytes a row, so a check that
# stores nothing writes none
KEEP_NEAR = "dedup.keep_near"
# and under which it then leaves its clusters and exact copies, (pairs, meta, NearDuplicates.cluster,
# NearDuplicates.exact): what publish stores for a version's grown children to start from
# (checks/batched.py near_clusters)
NEAR_FOUND = "dedup.near_found"
# and under which check_exact_duplicates leaves the copies it found, compared on their texts, (pairs,
# prompt_first, pair_first): stored likewise, so that a child compares only its new rows' (batched.exact_copies)
EXACT_FIRST = "dedup.exact_first"


def _exact_keys(parts: Sequence[pl.Series]) -> tuple[np.ndarray, np.ndarray]:
    """The exact check's hashes of a block's normalised (prompt, chosen, rejected): prompt, whole pair."""
    return _hash_key(parts[:1]), _hash_key(parts)


def _first_occurrence_blocked(key: np.ndarray, same: Callable[[np.ndarray, np.ndarray], bool],
                              everything: Callable[[], list[pl.Series]],
                              verified: tuple[int, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """For each row, the index of the first row whose texts are identical: rows are grouped on their
    precomputed keys (`_hash_key`), then `same(rows, reps)` compares the texts of the rows that share
    a key with an earlier row against that row (in batches of COMPARE_ROWS); on a hash collision,
    `everything()` gives all the texts and rows are grouped on them directly. `verified`: an earlier
    run's first copies over the leading rows, compared then (`_verified_prefix`): not compared again."""
    rep = _first_by_key(key)
    rows = np.flatnonzero(rep != np.arange(rep.size))
    rows = rows[rows >= _verified_prefix(rep, verified)]
    for s0 in range(0, rows.size, COMPARE_ROWS):
        batch = rows[s0 : s0 + COMPARE_ROWS]
        if not same(batch, rep[batch]):
            return _first_by_text(everything())
    return rep


def near_columns(scope: str) -> tuple[str, ...]:
    """The text columns near_duplicates compares under `scope`."""
    if scope not in ("prompt", "pair"):
        raise ValueError(f"scope must be 'prompt' or 'pair', got {scope!r}")
    return ("prompt",) if scope == "prompt" else PAIR_COLUMNS


def unusable(check_id: str, columns: Sequence[str], rows: int, needed: Sequence[str],
             max_share: float) -> CheckResult | None:
    """The skip a duplicate check gives rows it cannot judge (a column missing, no rows); None when it
    can. Every engine (in memory, shards, Dask) asks here before it finds anything."""
    missing = [c for c in needed if c not in columns]
    if missing:
        return skip(check_id, f"missing columns: {', '.join(missing)}", max_share)
    if rows == 0:
        return skip(check_id, "no rows", max_share)
    return None


# ----------------------------------------------------------------------------------------------
# exact duplicates


def check_exact_duplicates(
    pairs: pl.DataFrame,
    *,
    max_share: float = EXACT_MAX_SHARE,
    fail_on_repeated_prompts: bool = FAIL_ON_REPEATED_PROMPTS,
    derived: dict | None = None,
) -> CheckResult:
    """Repeated pairs (same normalised prompt, chosen and rejected) and repeated prompts.

    Offending: the ids of every row after the first (frame order) of each repeated-pair group, plus
    of each repeated-prompt group when `fail_on_repeated_prompts`. Several pairs per prompt with
    different responses are normal in preference data, so repeated prompts are only reported in
    `details` by default. Metric: offending rows / rows; fails when above `max_share`.

    `derived`: the checklist run's shared dict; when check_near_duplicates already hashed this very
    frame's normalised texts there (EXACT_KEYS), those hashes are used (same results, one pass less).
    """
    cannot = unusable(EXACT_ID, pairs.columns, pairs.height, ("id", *PAIR_COLUMNS), max_share)
    if cannot is not None:
        return cannot

    # normalised in blocks: only 64-bit hashes of the texts are kept, and rows whose hashes match an
    # earlier row's are compared again on their real texts
    texts = _Texts([pairs["prompt"], pairs["chosen"], pairs["rejected"]])
    shared = (derived or {}).get(EXACT_KEYS)
    if shared is not None and shared[0] is pairs:
        prompt_key, pair_key = shared[1].copy(), shared[2].copy()
    else:
        prompt_key = np.empty(pairs.height, dtype=np.uint64)
        pair_key = np.empty(pairs.height, dtype=np.uint64)
        for a, b in texts.blocks():
            prompt_key[a:b], pair_key[a:b] = _exact_keys(texts.parts((a, b)))

    if derived is not None:
        derived[EXACT_KEYS_USED] = (pairs, prompt_key, pair_key)  # only read below, never changed
    everything = (0, pairs.height)
    prompts = _Texts(texts.columns[:1])
    prompt_first = _first_occurrence_blocked(prompt_key, _same_texts(prompts), lambda: prompts.parts(everything))
    pair_first = _first_occurrence_blocked(pair_key, _same_texts(texts), lambda: texts.parts(everything))
    if derived is not None:
        derived[EXACT_FIRST] = (pairs, prompt_first, pair_first)
    return exact_duplicates_result(pairs["id"], prompt_first, pair_first, max_share=max_share,
                                   fail_on_repeated_prompts=fail_on_repeated_prompts)


def exact_duplicates_result(ids: pl.Series, prompt_first: np.ndarray, pair_first: np.ndarray, *, max_share: float,
                            fail_on_repeated_prompts: bool) -> CheckResult:
    """check_exact_duplicates' result from each row's first copy of its prompt and of its whole
    pair (row numbers; the row itself when it is the first). A batched run (checks/batched.py)
    finds those over shards and builds its result here too."""
    ids = ids.cast(pl.String)
    rows = np.arange(ids.len())
    dup_pair = pair_first != rows
    dup_prompt = prompt_first != rows
    offending_mask = dup_pair | dup_prompt if fail_on_repeated_prompts else dup_pair
    offending = tuple(ids.filter(pl.Series(offending_mask)).to_list())

    n = ids.len()
    n_dup_pairs = int(dup_pair.sum())
    n_dup_prompts = int(dup_prompt.sum())
    metric = len(offending) / n
    status = "fail" if metric > max_share else "pass"
    details = {
        "n_rows": n,
        "n_offending": len(offending),
        "n_duplicate_pairs": n_dup_pairs,
        "n_duplicate_prompts": n_dup_prompts,
        "n_repeated_prompt_groups": int(_sorted_unique(prompt_first[dup_prompt]).size),
        "fail_on_repeated_prompts": fail_on_repeated_prompts,
        # the first few offending rows, each with the row it repeats (the report shows them side by side)
        "examples": [{"id": str(ids[int(i)]),
                      "duplicate_of": str(ids[int(pair_first[i] if dup_pair[i] else prompt_first[i])])}
                     for i in np.flatnonzero(offending_mask)[:MAX_EXAMPLES]],
    }
    message = (
        f"{n_dup_pairs} repeated pair(s) and {n_dup_prompts} repeated prompt(s) "
        f"(after normalisation) in {n} rows"
    )
    return CheckResult(EXACT_ID, status, metric, max_share, offending, message, details)

def find_near_duplicates(
    texts: pl.Series | Sequence[str],
    *,
    threshold: float = DEFAULT_JACCARD,
    num_perm: int = DEFAULT_NUM_PERM,
    ngram: int = DEFAULT_NGRAM,
    seed: int = DEFAULT_SEED,
    bands_rows: tuple[int, int] | None = None,
    n_threads: int | None = None,
    normalise: bool = True,
) -> NearDuplicates:
    """Cluster texts whose byte `ngram`-shingle sets (of the normalised text) have Jaccard >= threshold.

    `num_perm` is the signature length (one-permutation hashing bins); `bands_rows` overrides the
    (bands, rows) LSH split, otherwise `lsh_params(threshold, num_perm)`. Exact duplicates (after
    normalisation) are always in one cluster.
    """
    bands, rows = _lsh_split(threshold, num_perm, ngram, bands_rows)
    series = texts if isinstance(texts, pl.Series) else pl.Series("text", list(texts), dtype=pl.String)
    return _find_near_duplicates(
        _Texts([series], normalise), threshold=threshold, num_perm=num_perm, ngram=ngram, seed=seed,
        bands_rows=(bands, rows), n_threads=n_threads, verify_bytes=VERIFY_BYTES,
    )



def _same_joined(texts: _Texts, rows: np.ndarray, reps: np.ndarray) -> bool:
    """Are the joined prepared texts of `rows` equal to those of `reps`? (raw-equal rows are)"""
    differ = _raw_differ(texts, rows, reps)
    return bool((texts.text(rows[differ]) == texts.text(reps[differ])).all())




def check_near_duplicates(
    pairs: pl.DataFrame,
    threshold: float = DEFAULT_JACCARD,
    num_perm: int = DEFAULT_NUM_PERM,
    ngram: int = DEFAULT_NGRAM,
    scope: Literal["prompt", "pair"] = DEFAULT_SCOPE,
    *,
    max_share: float = NEAR_MAX_SHARE,
    seed: int = DEFAULT_SEED,
    derived: dict | None = None,
) -> CheckResult:
    """Near-duplicate whole pairs (scope="pair": prompt, chosen and rejected) or prompts alone
    (scope="prompt"). Pairs is the default because several pairs per prompt is normal preference
    data; scope="prompt" suits one-pair-per-prompt sets. (Not called `on`: YAML reads that as true.)

    Rows whose normalised texts have byte-`ngram` shingle Jaccard >= `threshold` are clustered
    (transitively); every member after the first of each cluster is offending. Metric: offending
    rows / rows; fails when above `max_share` (the `threshold` argument is the Jaccard, recorded in
    details with the LSH parameters).

    `derived`: the checklist run's shared dict; with scope="pair", the normalised texts this check
    makes anyway are also hashed for check_exact_duplicates and left there (EXACT_KEYS).
    """
    needed = ("id", *near_columns(scope))
    cannot = unusable(NEAR_ID, pairs.columns, pairs.height, needed, max_share)
    if cannot is not None:
        return cannot

    # the normalised prompt, or prompt, chosen and rejected normalised and joined by "\n" (normalised
    # text has no newlines, so it separates the three parts unambiguously); made a block at a time
    on_block = None
    if derived is not None and scope == "pair":
        prompt_key = np.empty(pairs.height, dtype=np.uint64)
        pair_key = np.empty(pairs.height, dtype=np.uint64)

        def on_block(a: int, b: int, parts: list[pl.Series]) -> None:
            prompt_key[a:b], pair_key[a:b] = _exact_keys(parts)

    bands_rows = _lsh_split(threshold, num_perm, ngram, None)
    on_signed = None
    if derived is not None and derived.get(KEEP_NEAR):

        def on_signed(signed) -> None:  # to a file, not held: publish may store them
            from .minhash import near_scratch

            values = (signed.key, signed.band_keys, signed.sketch, signed.screenable)  # every row's: no `known`
            derived[NEAR_SIGNED] = (pairs, near_scratch(values, threshold=threshold, num_perm=num_perm, ngram=ngram,
                                                        scope=scope, seed=seed, bands_rows=bands_rows))

    found = _find_near_duplicates(
        _Texts([pairs[c] for c in needed[1:]]), threshold=threshold, num_perm=num_perm, ngram=ngram,
        seed=seed, bands_rows=bands_rows, n_threads=None, on_block=on_block,
        verify_bytes=VERIFY_BYTES, on_signed=on_signed,
    )
    if on_block is not None:
        derived[EXACT_KEYS] = (pairs, prompt_key, pair_key)
    if on_signed is not None:
        from .minhash import _near_meta

        derived[NEAR_FOUND] = (pairs, _near_meta(threshold=threshold, num_perm=num_perm, ngram=ngram, scope=scope,
                                                 seed=seed, bands=bands_rows[0], rows=bands_rows[1]), found.cluster,
                             found.exact)
    return near_duplicates_result(pairs["id"], found, threshold=threshold, num_perm=num_perm, ngram=ngram,
                                  scope=scope, max_share=max_share)


def near_duplicates_result(ids: pl.Series, found: NearDuplicates, *, threshold: float, num_perm: int, ngram: int,
                           scope: str, max_share: float) -> CheckResult:
    """check_near_duplicates' result from the engine's clusters (a batched run builds it here too)."""
    ids = ids.cast(pl.String)
    flagged = found.flagged
    offending = tuple(ids.filter(pl.Series(flagged)).to_list())
    clusters = found.clusters()
    sample = sorted(clusters, key=lambda c: (-c.size, c[0]))[:MAX_SAMPLE_CLUSTERS]
    n = ids.len()
    metric = len(offending) / n
    details = {
        "n_rows": n,
        "n_offending": len(offending),
        "n_clusters": len(clusters),
        "clusters_sample": [
            {"size": int(c.size), "ids": ids.gather(c[:MAX_SAMPLE_MEMBERS]).to_list()} for c in sample
        ],
        "scope": scope,
        "jaccard_threshold": threshold,
        "num_perm": num_perm,
        "ngram": ngram,
        "shingles": f"byte {ngram}-grams of the normalised text",
        "bands": found.bands,
        "rows": found.rows,
        "n_unique_texts": found.n_unique_texts,
        "n_candidate_pairs": found.n_candidate_pairs,
        "n_verified_pairs": found.n_verified_pairs,
        # the work reuse creates, bounded: LSH candidates, and those the signature screen dropped
        "n_lsh_candidates": found.n_lsh_candidates,
        "n_screened_out": found.n_screened_out,
    }
    message = (
        f"{len(offending)} of {n} rows are near duplicates ({scope}, Jaccard >= {threshold}) "
        f"in {len(clusters)} cluster(s)"
    )
    status = "fail" if metric > max_share else "pass"
    return CheckResult(NEAR_ID, status, metric, max_share, offending, message, details)
