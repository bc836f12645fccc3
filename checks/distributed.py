"""The checklist over a Dask DataFrame (docs/scaling.md): the checks whose registry entry's `engines`
include DASK (checks/registry.py), each result equal to the one-process check's: the row-local checks
that need nothing but the pairs, partition by partition, and the others by the code their entry names
(`dask_engine`: exact and near duplicates, split isolation and agreement here, each `(run: DaskRun,
**params)`). Those find their statistics on Dask (copies, clusters, vote counts) and give them to the
check's own result function in its rule module (dedup.py `exact_duplicates_result`,
`near_duplicates_result`, isolation.py `split_isolation_result`, agreement.py `agreement_result`):
the verdict, threshold and message are decided in one place for every engine.

Row-local checks judge each row on its own, so each partition runs the very same check function
(`prefdata.checks.*`) on its rows and the results combine as the shard-by-shard run's do
(checks/batched.py `combine`): the offending ids in partition order (= frame order), metric =
offending rows / rows, the status from the same threshold rule, details merged (counts summed, the
check's parameters as given), and the message the check's own message function (its registry
`merge`) builds from the merged details: the in-memory run's message. `partition_checks()` are the
registry's row-local checks that need nothing but the pairs and run on Dask: `length_ratio`,
`degenerate_pairs` (its tie labels and the rows lost at read given beside), `answer_leakage` and
`safety` (the lexicon); template_fit needs the trainer's tokenizer, which a Dask run has not. What
the merged details cannot give as one process does: each partition's first examples (not the first
overall), and length_ratio's `median_ratio` / `p95_ratio`, left out (`structure.length_ratio_merged`).

Checks that compare rows with rows run the one-process engine's own pure functions where the rows
are, and bring back only verdicts; the one-process result functions then build the result, so the
status, metric, message and offending ids are equal by construction:
- exact copies (exact_duplicates, and the copies near_duplicates collapses): each row's normalised
  text (`dedup._Texts`, the one normaliser) is hashed in its partition and shuffled on the hash with
  the text, so that copies meet and a hash collision is never taken for a copy; only the later
  copies (position, first position) come back (`_first_copies`).
- near duplicates (`_near_clusters`, checks/minhash.py's steps on Dask): signatures and band keys
  per partition (`minhash._sign_blocks`), one (band key, band, position) record per band of every
  row that is not a later copy, shuffled on the key; each bucket's candidate edges by the
  one-process rule (`minhash._band_edges`); each edge routed to the partition holding its first row
  (a set_index shuffle, one division per partition), which attaches that row's text, then to the
  partition holding its second row, which screens it on the signatures and verifies its exact
  Jaccard (`minhash._Screen`, `minhash._verify_mask`). Only verified edges come back; their connected
  components (`minhash._components`: smallest position) are the clusters, as in one process. The
  one-process engine skips an edge whose rows are already connected; here every distinct candidate
  is screened, so details' work counts (n_lsh_candidates, n_screened_out, n_candidate_pairs,
  n_verified_pairs) are larger; the clusters are the same, since a skipped edge joins nothing new.
- split isolation: the same two stages over the prompts of the train rows, then the eval rows, at
  the positions the one-process check gives them; annotators and sources are small distinct sets.
- agreement: the votes (the client's table, a few short columns a vote) shuffled on pair id, so that
  each partition holds every vote of its pairs; each partition sends back only counts over its pairs
  (checks/agreement.py `vote_stats`: vote profiles for alpha, Fleiss and raw agreement, confusion
  counts for the Cohen kappas, majority counts, the histogram of vote patterns that Dawid-Skene's EM
  needs, and its disagreeing pair ids), which add up exactly to the whole table's; the one-process
  result function (`agreement_result`) builds the result from them, so it is equal float for float.

Partitions are pandas frames (what Dask DataFrame holds); each is turned into polars for the checks.
"""

from __future__ import annotations

import inspect
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import polars as pl

from .base import CheckResult, skip
from .batched import combine
from .dedup import (DEFAULT_JACCARD, DEFAULT_SCOPE, DEFAULT_SEED, EXACT_ID, EXACT_MAX_SHARE, FAIL_ON_REPEATED_PROMPTS,
                    NEAR_ID, NEAR_MAX_SHARE, PAIR_COLUMNS, near_columns, unusable)
from .minhash import DEFAULT_NGRAM, DEFAULT_NUM_PERM
from .isolation import NEAR_THRESHOLD
from .registry import CHECKS, DASK, CheckInputs


def on_dask() -> list[str]:
    """Every check this module runs (the registry's `engines` include DASK), in registry order."""
    return [c for c, check in CHECKS.items() if check.runs_on(DASK)]


def partition_checks() -> list[str]:
    """The checks run partition by partition: row-local ones a partition of pairs is enough for."""
    return [c for c in on_dask() if CHECKS[c].row_local and not CHECKS[c].needs]


@dataclass(frozen=True)
class _Shard:
    """A Parquet shard that the task comparing its rows reads itself (checks/shards.py's paths or
    fsspec URLs), for the stages of a check that compares rows with rows. Given to each task as an
    argument, not as the Dask DataFrame's partition task: a partition task that several stages of one
    graph depend on stays in worker memory until the last of them runs, after the shuffles, so every
    partition of the file was held at once (3.4 GB a worker at 10M pairs on 4 workers)."""

    path: str
    fs: Any = None

    def read(self, columns: list[str] | None = None) -> pl.DataFrame:
        if self.fs is None:
            return pl.read_parquet(self.path, columns=columns)
        with self.fs.open(self.path, "rb") as handle:
            return pl.read_parquet(handle.read(), columns=columns)

    def height(self) -> int:
        if self.fs is None:
            return pl.scan_parquet(self.path).select(pl.len()).collect().item()
        return self.read(["id"]).height


def _polars(part: Any, columns: list[str] | None = None) -> pl.DataFrame:
    if isinstance(part, _Shard):
        return part.read(columns)
    return part if isinstance(part, pl.DataFrame) else pl.from_pandas(part)


def _partition_verdict(part: Any, check_id: str, params: dict[str, Any], ties: pl.DataFrame | None = None,
                       lost: pl.DataFrame | None = None) -> tuple[int, CheckResult]:
    """One partition: (rows, the check's own result on these rows, bound as the registry binds it).
    `ties`: the comparisons labelled tie (degenerate_pairs' tie_label); `lost`: the rows lost at read,
    given with the last partition as the shard-by-shard run gives them to its last shard."""
    frame = _polars(part)
    check = CHECKS[check_id]
    bound = check.bind(CheckInputs(pairs=frame, comparisons=ties, lost=lost))
    result = check.function(**bound, **params)
    lost_rows = bound.get("lost")
    return frame.height + (lost_rows.height if lost_rows is not None else 0), result


def _combine(check_id: str, parts: list[tuple[int, CheckResult]]) -> CheckResult:
    """The partitions' verdicts as one result, by batched.py `combine` over the partitions that have
    rows (an empty one's skip is left out): the check's own threshold, metric = offending / rows,
    merged details and the check's own message; `details["partitions"]` counts every partition."""
    n = sum(rows for rows, _ in parts)
    results = [result for rows, result in parts if rows]
    if n == 0 or not results:
        return skip(check_id, "no rows")
    check = CHECKS[check_id]
    combined = combine(check_id, results, n, check.merge.message, tuple(inspect.signature(check.function).parameters),
                       check.merge.derive)
    if combined.status in ("error", "skip"):  # a partition's own result, as it gave it
        return combined
    details = {k: v for k, v in combined.details.items() if k != "shards"}
    details["partitions"] = len(parts)
    return CheckResult(check_id, combined.status, combined.metric, combined.threshold, combined.offending,
                       combined.message, details)


def row_local(ddf: Any, check_ids: list[str], checks: dict[str, Any], comparisons: pl.DataFrame | None = None,
              lost: pl.DataFrame | None = None) -> dict[str, CheckResult]:
    """The row-local checks `check_ids`, every partition at once (one Dask compute)."""
    import dask

    ties = None
    if comparisons is not None and {"id", "label"} <= set(comparisons.columns):
        ties = comparisons.filter(pl.col("label").cast(pl.String) == "tie").select("id", "label")
    parts = ddf.to_delayed()
    last = len(parts) - 1
    tasks = {c: [dask.delayed(_partition_verdict)(p, c, _params(checks.get(c)), ties, lost if k == last else None)
                 for k, p in enumerate(parts)] for c in check_ids}
    computed = dask.compute(tasks)[0]
    return {c: _combine(c, list(computed[c])) for c in check_ids}
# ----------------------------------------------------------------------------------------------
# rows compared with rows: exact copies, near duplicates, split isolation
#
# A `_Source` is the rows of one partition that a check compares (all of them, or its train or its
# eval rows), at consecutive *positions*: the index each row has in the one-process check's frame
# (pairs: the row number; split_isolation: train rows first, then eval rows, as it concatenates
# them). Every stage is a task on one source's partition, so the workers read the rows themselves
# (a Parquet partition, or one the client persisted), and only verdicts come back: which position
# is a later copy of which, which candidate pairs verified, the ids of the rows that offend.


@dataclass(frozen=True)
class _Source:
    part: Any    # a delayed pandas frame: one partition
    kind: str    # which of its rows: "all", "train" or "eval" (isolation.split_train_eval)
    first: int   # the position of its first selected row
    count: int


def _rows(part: Any, kind: str, columns: list[str] | None = None) -> pl.DataFrame:
    """The partition's rows of `kind`, in order (`columns`: at least those, when kind is all)."""
    from .isolation import split_train_eval

    frame = _polars(part, columns if kind == "all" else None)
    if kind != "all":
        train, held_out = split_train_eval(frame)
        frame = train if kind == "train" else (held_out if held_out is not None else frame.clear())
    return frame


def _selected(part: Any, kind: str, columns: list[str]) -> pl.DataFrame:
    return _rows(part, kind, columns).select(columns)


def _count(part: Any, kind: str) -> int:
    if kind != "all":
        return _rows(part, kind).height
    return part.height() if isinstance(part, _Shard) else len(part)


def _sources(parts: list[tuple[Any, str]], start: int = 0) -> list[_Source]:
    """(partition, kind) pairs as sources at consecutive positions from `start`; empty ones left out."""
    import dask

    counts = dask.compute(*[dask.delayed(_count)(p, k) for p, k in parts])
    out, first = [], start
    for (part, kind), count in zip(parts, counts):
        if count:
            out.append(_Source(part, kind, first, int(count)))
        first += int(count)
    return out


def _texts_of(part: Any, kind: str, columns: list[str]) -> Any:
    from .dedup import _Texts

    frame = _selected(part, kind, columns)
    return _Texts([frame[c] for c in columns])


def _keyed(part: Any, kind: str, first: int, columns: list[str]) -> Any:
    """The exact-copy shuffle's input: position, 64-bit hash and the prepared text (the columns
    normalised and joined by "\\n", as checks/dedup.py `_Texts.text` makes it), so that a hash
    collision is never taken for a copy."""
    texts = _texts_of(part, kind, columns)
    text = texts.text((0, texts.n)) if texts.n else pl.Series("t", [], dtype=pl.String)
    return pl.DataFrame({"pos": pl.int_range(first, first + texts.n, dtype=pl.Int64, eager=True),
                         "h": text.hash(0).reinterpret(signed=True),  # int64: what pandas shuffles best
                         "t": text.alias("t")}).to_pandas()


def _later_copies(part: Any) -> Any:
    """Positions whose text equals that of a smaller position, with that first position."""
    import pandas as pd

    if len(part) == 0:
        return pd.DataFrame({"pos": np.zeros(0, np.int64), "first": np.zeros(0, np.int64)})
    first = part.groupby("t", sort=False, dropna=False)["pos"].transform("min")
    later = (part["pos"] != first).to_numpy()
    return pd.DataFrame({"pos": part["pos"].to_numpy()[later], "first": first.to_numpy()[later]})


def _first_copies(sources: list[_Source], columns: list[str], n: int) -> np.ndarray:
    """For each position, the first position with the identical prepared text (checks/dedup.py
    `first_copies`): a shuffle on the text's hash brings copies into one partition; only the later
    copies come back."""
    import dask
    import dask.dataframe as dd

    first = np.arange(n, dtype=np.int64)
    if not sources:
        return first
    empty = pl.DataFrame({c: pl.Series([], dtype=pl.String) for c in columns}).to_pandas()
    keyed = dd.from_delayed([dask.delayed(_keyed)(s.part, s.kind, s.first, columns) for s in sources],
                            meta=_keyed(empty, "all", 0, columns))
    copies = keyed.shuffle(on="h", npartitions=len(sources)).map_partitions(
        _later_copies, meta=_later_copies(keyed._meta)).compute()
    first[copies["pos"].to_numpy()] = copies["first"].to_numpy()
    return first


def _band_keys_of(part: Any, kind: str, columns: list[str], num_perm: int, ngram: int, seed: int,
                  bands: int, rows: int) -> np.ndarray:
    """(bands, rows of the source) LSH band keys, by the one-process engine's own signing
    (checks/minhash.py `_sign_blocks`): signatures are per text, so partitions do not change them."""
    from .minhash import _sign_blocks

    texts = _texts_of(part, kind, columns)
    if texts.n == 0:
        return np.zeros((bands, 0), dtype=np.uint64)
    return _sign_blocks(texts, num_perm, ngram, seed, bands, rows, None, None).band_keys


def _band_records_of(part: Any, kind: str, columns: list[str], num_perm: int, ngram: int, seed: int, bands: int,
                     rows: int, first: int, later: np.ndarray) -> Any:
    """The near-duplicate shuffle's input for one source: its rows signed and their band records.
    One task, so a partition's band keys live only until its records are made (persisted for every
    partition at once they were 25 bands x 8 bytes a row held on the workers through the shuffle:
    0.5 GB a worker at 10M pairs on 4)."""
    return _band_records(_band_keys_of(part, kind, columns, num_perm, ngram, seed, bands, rows), first, later)


def _band_records(band_keys: np.ndarray, first: int, later: np.ndarray) -> Any:
    """One (key, band, position) record per band of every row that is not a later exact copy: LSH
    runs on distinct texts, as in one process."""
    import pandas as pd

    keep = np.ones(band_keys.shape[1], dtype=bool)
    keep[later - first] = False
    at = np.flatnonzero(keep)
    bands = band_keys.shape[0]
    return pd.DataFrame({"key": band_keys[:, at].reshape(-1).view(np.int64),
                         "band": np.repeat(np.arange(bands, dtype=np.int16), at.size),
                         "pos": np.tile(at.astype(np.int64) + first, bands)})


def _bucket_edges(part: Any) -> Any:
    """A shuffled partition's LSH buckets (rows sharing a band's key) as candidate edges a < b, by
    the one-process rule (checks/minhash.py `_band_edges`: all pairs of a bucket's smallest positions, a
    star from the smallest to the rest). Positions are in frame order, as unique-text indices are there."""
    import pandas as pd

    from .minhash import _band_edges

    frame = pl.from_pandas(part[["key", "band", "pos"]]) if len(part) else None
    if frame is None:
        return pd.DataFrame({"a": np.zeros(0, np.int64), "b": np.zeros(0, np.int64)})
    buckets = (frame.group_by("band", "key").agg("pos").filter(pl.col("pos").list.len() > 1)
               .with_row_index("k").explode("pos"))
    a, b = _band_edges(buckets["pos"].to_numpy().astype(np.int64), buckets["k"].to_numpy().astype(np.int64))
    return pd.DataFrame({"a": a, "b": b})


def _source_of(part: Any, column: str, firsts: np.ndarray) -> Any:
    """The edges with the index of the source holding `column`'s position (the shuffle's target)."""
    return part.assign(s=np.searchsorted(firsts, part[column].to_numpy(), side="right") - 1)


def _with_text_a(edges: Any, part: Any, kind: str, first: int, columns: list[str]) -> Any:
    """Edges whose `a` lives in this partition: each distinct edge once (a pair meets in many
    bands), with a's prepared text attached, to travel to where `b` lives."""

    e = pl.from_pandas(edges.reset_index(drop=True)[["a", "b"]]).unique().sort("a", "b")
    if e.height == 0:
        return _edges_with_text(np.zeros(0, np.int64), np.zeros(0, np.int64), pl.Series([], dtype=pl.String))
    texts = _texts_of(part, kind, columns)
    return _edges_with_text(e["a"].to_numpy(), e["b"].to_numpy(), texts.text(e["a"].to_numpy() - first))


def _edges_with_text(a: np.ndarray, b: np.ndarray, ta: pl.Series) -> Any:
    return pl.DataFrame({"a": a.astype(np.int64), "b": b.astype(np.int64), "ta": ta}).to_pandas()


def _sketches(texts: pl.Series, num_perm: int, ngram: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The signature screen's inputs for `texts` (low 8 bits of each signature value, and whether
    the text is long enough to screen), computed as checks/minhash.py `_sign_blocks` computes them."""
    from .minhash import (SCREEN_MIN_BYTES_PER_VALUE, _chunk_bounds, _Densifier, _signature_chunk,
                          _texts_buffer)

    n = len(texts)
    sketch, screenable = np.empty((n, num_perm), dtype=np.uint8), np.empty(n, dtype=bool)
    data, offsets = _texts_buffer(texts)
    bounds = _chunk_bounds(offsets)
    densify = _Densifier(num_perm, seed)
    for d0, d1 in zip(bounds[:-1], bounds[1:]):
        sketch[d0:d1] = _signature_chunk(data, offsets, d0, d1, ngram, num_perm, seed, densify).astype(np.uint8)
        screenable[d0:d1] = offsets[d0 + 1:d1 + 1] - offsets[d0:d1] >= SCREEN_MIN_BYTES_PER_VALUE * num_perm + ngram
    return sketch, screenable


def _verify_here(edges: Any, part: Any, kind: str, first: int, columns: list[str], threshold: float,
                 num_perm: int, ngram: int, seed: int) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int, int]]:
    """Candidate edges whose `b` lives in this partition, screened on their signatures and verified
    by exact Jaccard (checks/minhash.py `_Screen`, `_verify_mask`: the one-process decisions, made
    where the rows are). Returns the verified edges and (candidates, screened out, verified by
    exact Jaccard, found similar)."""
    from .minhash import VERIFY_BYTES, _Screen, _verify_mask

    a, b = edges["a"].to_numpy().astype(np.int64), edges["b"].to_numpy().astype(np.int64)
    if a.size == 0:
        return a, b, (0, 0, 0, 0)
    texts = _texts_of(part, kind, columns)
    both = pl.concat([pl.Series(edges["ta"].tolist(), dtype=pl.String), texts.text(b - first)])
    sketch, screenable = _sketches(both, num_perm, ngram, seed)
    left, right = np.arange(a.size), a.size + np.arange(a.size)
    screened = _Screen(sketch, screenable, threshold)(left, right)
    ok, exact = _verify_mask(both.gather, left[screened], right[screened], ngram, threshold, VERIFY_BYTES)
    kept = np.flatnonzero(screened)[ok]
    return a[kept], b[kept], (int(a.size), int(a.size - exact.sum()), int(exact.sum()), int(ok.sum()))


def _routed(frame: Any, column: str, sources: list[_Source]) -> list[Any]:
    """`frame`'s rows sent to the partition of the source that holds `column`'s position: a Dask
    shuffle (set_index on the source's index with one division per source); one delayed per source."""
    firsts = np.array([s.first for s in sources], dtype=np.int64)
    tagged = frame.map_partitions(_source_of, column, firsts, meta=_source_of(frame._meta, column, firsts))
    routed = tagged.set_index("s", divisions=list(range(len(sources) + 1)))
    parts = routed.to_delayed()
    if len(parts) != len(sources):
        raise RuntimeError(f"routed to {len(parts)} partitions, expected one per source ({len(sources)})")
    return parts


def _near_clusters(sources: list[_Source], columns: list[str], n: int, first: np.ndarray, *, threshold: float,
                   num_perm: int, ngram: int, seed: int) -> Any:
    """checks/minhash.py `_find_near_duplicates` over the sources' rows (positions 0..n-1), on Dask:
    band keys per partition (signed in the task that makes its records), later exact copies left out,
    records shuffled on their band key, each bucket's candidate edges routed to the partition of `a`
    (its text attached) and then of `b` (screened and verified there); only verified edges come back,
    and their connected components are taken here as in one process (labels = smallest position).
    `first`: `_first_copies`."""
    import dask
    import dask.dataframe as dd

    from .minhash import NearDuplicates, _components, _lsh_split

    bands, rows = _lsh_split(threshold, num_perm, ngram, None)
    m = int((first == np.arange(n)).sum())
    if not sources or n == 0:
        return NearDuplicates(first.copy(), bands, rows, m, 0, 0, first)
    later = np.flatnonzero(first != np.arange(n))
    records = dd.from_delayed(
        [dask.delayed(_band_records_of)(s.part, s.kind, columns, num_perm, ngram, seed, bands, rows, s.first,
                                        later[(later >= s.first) & (later < s.first + s.count)])
         for s in sources],
        meta=_band_records(np.zeros((bands, 0), np.uint64), 0, np.zeros(0, np.int64)))
    edges = records.shuffle(on="key", npartitions=len(sources)).map_partitions(
        _bucket_edges, meta=_bucket_edges(records._meta))
    with_a = dd.from_delayed(
        [dask.delayed(_with_text_a)(e, s.part, s.kind, s.first, columns)
         for e, s in zip(_routed(edges, "a", sources), sources)],
        meta=_edges_with_text(np.zeros(0, np.int64), np.zeros(0, np.int64), pl.Series([], dtype=pl.String)))
    verified = dask.compute(*[dask.delayed(_verify_here)(e, s.part, s.kind, s.first, columns, threshold, num_perm,
                                                         ngram, seed)
                              for e, s in zip(_routed(with_a, "b", sources), sources)])
    a = np.concatenate([v[0] for v in verified]) if verified else np.zeros(0, np.int64)
    b = np.concatenate([v[1] for v in verified]) if verified else np.zeros(0, np.int64)
    candidates, screened_out, checked, similar = (int(sum(v[2][k] for v in verified)) for k in range(4))
    label = _components(n, a, b)  # the smallest position of each component; copies join their first
    return NearDuplicates(label[first], bands, rows, m, checked, similar, first, n_lsh_candidates=candidates,
                          n_screened_out=screened_out)


def _ids_at(part: Any, kind: str, local: np.ndarray, column: str = "id") -> list[str]:
    frame = _selected(part, kind, [column])
    return frame[column].cast(pl.String).gather(local).to_list()


def _ids(sources: list[_Source], positions: np.ndarray, n: int) -> pl.Series:
    """A length-n series of ids with those of `positions` read from their partitions (null
    elsewhere): what a one-process result function reads of the ids, fetched by position only."""
    import dask

    positions = np.unique(np.asarray(positions, dtype=np.int64))
    firsts = np.array([s.first for s in sources], dtype=np.int64)
    owner = np.searchsorted(firsts, positions, side="right") - 1
    wanted = [(s, positions[owner == k]) for k, s in enumerate(sources) if (owner == k).any()]
    found = dask.compute(*[dask.delayed(_ids_at)(s.part, s.kind, at - s.first) for s, at in wanted])
    at = np.concatenate([a for _, a in wanted]) if wanted else np.zeros(0, np.int64)
    values = pl.Series("id", [v for found_ids in found for v in found_ids], dtype=pl.String)
    ids = pl.Series("id", [None] * n, dtype=pl.String)
    return ids.scatter(at, values) if at.size else ids


# ----------------------------------------------------------------------------------------------
# the checks


class _Pairs:
    """The pairs' partitions as sources (every row, at its row number) and the exact copies found so
    far, which exact_duplicates and near_duplicates (scope pair) share: one shuffle, not two."""

    def __init__(self, ddf: Any, shards: list[_Shard] | None = None):
        self.ddf = ddf
        # the stages that compare rows read each shard themselves (`_Shard`); else the partitions
        self.parts = shards or ddf.to_delayed()
        self.sources = _sources([(p, "all") for p in self.parts])
        self.n = sum(s.count for s in self.sources)
        self._first: dict[tuple[str, ...], np.ndarray] = {}

    def first_copies(self, columns: list[str]) -> np.ndarray:
        if tuple(columns) not in self._first:
            self._first[tuple(columns)] = _first_copies(self.sources, columns, self.n)
        return self._first[tuple(columns)]


def _as_pairs(pairs: Any) -> _Pairs:
    return pairs if isinstance(pairs, _Pairs) else _Pairs(pairs)


def exact_duplicates(ddf: Any, *, max_share: float = EXACT_MAX_SHARE,
                     fail_on_repeated_prompts: bool = FAIL_ON_REPEATED_PROMPTS) -> CheckResult:
    """`check_exact_duplicates` over a Dask DataFrame: each row's first copy of its prompt and of
    its whole pair by two shuffles on the texts' hashes, then the one-process result function
    (dedup.py `exact_duplicates_result`) on those, with the ids it names fetched by position."""
    from .dedup import MAX_EXAMPLES, exact_duplicates_result

    pairs = _as_pairs(ddf)
    cannot = unusable(EXACT_ID, list(pairs.ddf.columns), pairs.n, ("id", *PAIR_COLUMNS), max_share)
    if cannot is not None:
        return cannot
    pair_first, prompt_first = pairs.first_copies(list(PAIR_COLUMNS)), pairs.first_copies(["prompt"])
    rows = np.arange(pairs.n)
    dup_pair = pair_first != rows
    offending = np.flatnonzero(dup_pair | (prompt_first != rows) if fail_on_repeated_prompts else dup_pair)
    examples = offending[:MAX_EXAMPLES]
    named = np.concatenate([offending, np.where(dup_pair[examples], pair_first[examples], prompt_first[examples])])
    return exact_duplicates_result(_ids(pairs.sources, named, pairs.n), prompt_first, pair_first,
                                   max_share=max_share, fail_on_repeated_prompts=fail_on_repeated_prompts)


def near_duplicates(ddf: Any, threshold: float = DEFAULT_JACCARD, num_perm: int = DEFAULT_NUM_PERM,
                    ngram: int = DEFAULT_NGRAM, scope: str = DEFAULT_SCOPE, *, max_share: float = NEAR_MAX_SHARE,
                    seed: int = DEFAULT_SEED) -> CheckResult:
    """`check_near_duplicates` over a Dask DataFrame (`_near_clusters`), its result made by the
    one-process result function (dedup.py `near_duplicates_result`) from the clusters."""
    from .dedup import near_duplicates_result

    columns = list(near_columns(scope))
    pairs = _as_pairs(ddf)
    cannot = unusable(NEAR_ID, list(pairs.ddf.columns), pairs.n, ["id", *columns], max_share)
    if cannot is not None:
        return cannot
    found = _near_clusters(pairs.sources, columns, pairs.n, pairs.first_copies(columns), threshold=threshold,
                           num_perm=num_perm, ngram=ngram, seed=seed)
    in_clusters = np.flatnonzero(np.isin(found.cluster, found.cluster[found.flagged]))
    return near_duplicates_result(_ids(pairs.sources, in_clusters, pairs.n), found, threshold=threshold,
                                  num_perm=num_perm, ngram=ngram, scope=scope, max_share=max_share)


def _side_sets(part: Any, kind: str, annotators: bool, sources: bool) -> tuple[set[str], set[Any]]:
    """A source's annotators (its `annotators` column, isolation.py `_annotators`) and sources."""
    from .isolation import _annotators

    frame = _selected(part, kind, [c for c, on in (("annotators", annotators), ("source", sources)) if on])
    return (_annotators(frame, None) if annotators else set(),
            set(frame["source"].drop_nulls().to_list()) if sources else set())


def _side_ids(part: Any, kind: str, side: str) -> Any:
    frame = _selected(part, kind, ["id"])
    return frame.select(pl.col("id").cast(pl.String), side=pl.lit(side)).to_pandas()


def _eval_flags(part: Any, kind: str, voted: set[str] | None, shared_sources: list[Any]) -> np.ndarray:
    """Per eval row of the source: labelled by an annotator train shares, or from a shared source."""
    columns = ["id"] + (["source"] if shared_sources else [])
    frame = _selected(part, kind, columns)
    flags = np.zeros(frame.height, dtype=bool)
    if voted:
        flags |= frame["id"].cast(pl.String).is_in(pl.Series(sorted(voted), dtype=pl.String).implode()).to_numpy()
    if shared_sources:
        flags |= frame["source"].is_in(shared_sources).fill_null(False).to_numpy()
    return flags


def split_isolation(ddf: Any, eval_ddf: Any = None, votes: pl.DataFrame | None = None,
                    near_threshold: float = NEAR_THRESHOLD) -> CheckResult:
    """`check_split_isolation` over Dask DataFrames: train rows (and the eval rows, from `eval_ddf`
    or the `split` column) at the positions the one-process check gives them (train first), their
    prompts' exact copies and near-duplicate clusters found as near_duplicates finds them; an eval
    prompt is exact when its first copy is a train row, near when its cluster holds one. Annotator
    and source overlap are intersections of the small distinct sets each partition sends."""
    import dask
    import dask.dataframe as dd

    from .isolation import check_split_isolation, split_isolation_result

    pairs = ddf.ddf if isinstance(ddf, _Pairs) else ddf
    parts = ddf.parts if isinstance(ddf, _Pairs) else pairs.to_delayed()
    train = _sources([(p, "train") for p in parts])
    n_train = sum(s.count for s in train)
    held_out = eval_ddf if eval_ddf is not None else pairs
    held = _sources([(p, "all" if eval_ddf is not None else "eval") for p in held_out.to_delayed()], n_train)
    n_eval = sum(s.count for s in held)
    if n_eval == 0:
        return check_split_isolation(pl.DataFrame(), None)  # its own skip: no eval set
    sources, n = train + held, n_train + n_eval
    first = _first_copies(sources, ["prompt"], n)
    found = _near_clusters(sources, ["prompt"], n, first, threshold=near_threshold, num_perm=DEFAULT_NUM_PERM,
                           ngram=DEFAULT_NGRAM, seed=DEFAULT_SEED)
    exact = first[n_train:] < n_train
    near = (found.cluster[n_train:] < n_train) & ~exact  # the component's smallest position is a train row

    annotated = {side: "annotators" in frame.columns for side, frame in (("train", pairs), ("eval", held_out))}
    with_source = "source" in pairs.columns and "source" in held_out.columns
    sets = dask.compute(*[dask.delayed(_side_sets)(s.part, s.kind, annotated[side], with_source)
                          for side, group in (("train", train), ("eval", held)) for s in group])
    train_sets, eval_sets = sets[:len(train)], sets[len(train):]
    annotators = {"train": set().union(*(a for a, _ in train_sets)), "eval": set().union(*(a for a, _ in eval_sets))}
    if votes is not None:  # who labelled which side: the votes joined to the rows' ids on the workers
        ids = dd.from_delayed([dask.delayed(_side_ids)(s.part, s.kind, side)
                               for side, group in (("train", train), ("eval", held)) for s in group],
                              meta=pl.DataFrame({"id": [], "side": []}, schema={"id": pl.String, "side": pl.String})
                              .to_pandas())
        table = votes.select(pl.col("pair_id").cast(pl.String), pl.col("annotator").cast(pl.String)).to_pandas()
        who = ids.merge(dd.from_pandas(table, npartitions=max(1, len(sources) // 2)), left_on="id",
                        right_on="pair_id")[["annotator", "side"]].drop_duplicates().compute()
        for side in ("train", "eval"):
            annotators[side] |= set(who.loc[who["side"] == side, "annotator"].dropna().tolist())
    shared_annotators = sorted(annotators["train"] & annotators["eval"])
    shared_sources = (sorted(set().union(*(s for _, s in train_sets)) & set().union(*(s for _, s in eval_sets)))
                      if with_source else [])
    leaky = exact | near
    voted = None
    if shared_annotators and votes is not None:
        voted = set(votes.filter(pl.col("annotator").cast(pl.String).is_in(shared_annotators))["pair_id"]
                    .cast(pl.String).to_list())
    if voted or shared_sources:
        leaky |= np.concatenate(dask.compute(*[dask.delayed(_eval_flags)(s.part, s.kind, voted, shared_sources)
                                              for s in held]))
    offending = _ids(sources, n_train + np.flatnonzero(leaky), n)[n_train:].filter(pl.Series(leaky)).to_list()
    # the one-process check's verdict (isolation.py), from the same figures
    return split_isolation_result(offending, n_train=n_train, n_eval=n_eval, n_exact=int(exact.sum()),
                                  n_near=int(near.sum()), shared_annotators=shared_annotators,
                                  shared_sources=shared_sources)


VOTE_COLUMNS = ["pair_id", "annotator", "vote"]
VOTE_PARTITION_ROWS = 1_000_000  # votes a partition at most (and at least one partition per worker)


def _vote_stats(part: Any, schema: dict[str, Any]) -> Any:
    """One partition of the votes shuffled on pair id, so every vote of its pairs: the agreement
    check's counts over those pairs (agreement.vote_stats), the votes' dtypes as the client's table
    has them (pandas would turn an integer vote with nulls into floats) and their rows in it."""
    from .agreement import vote_stats

    frame = pl.from_pandas(part).cast(schema)
    return vote_stats(frame.select(VOTE_COLUMNS), frame["_row"])


def agreement(votes: pl.DataFrame | None, partitions: int | None = None, **params: Any) -> CheckResult:
    """`check_agreement` on Dask. The votes table (`partitions` slices of rows; default one a worker,
    at most VOTE_PARTITION_ROWS each) is shuffled on pair_id, so that each partition holds every vote
    of its pairs wherever they were; each partition's counts over its pairs (agreement.vote_stats:
    vote profiles, confusion counts, majority counts, the Dawid-Skene pattern histogram) come back,
    add up to the whole table's exactly (merge_vote_stats), and agreement.agreement_result builds the
    result from them as check_agreement does: the same result, float for float. What comes back
    grows with the distinct vote patterns (27 when three annotators vote a/b/tie on every pair; up
    to one a pair when many annotators each vote on a few pairs) and with the offending ids."""
    import dask

    from .agreement import agreement_result, check_agreement, merge_vote_stats

    if votes is None or votes.height == 0:
        return check_agreement(votes, **params)  # its own skip
    ddf, schema = votes_frame(votes, partitions)
    shuffled = ddf.shuffle(on="pair_id", npartitions=ddf.npartitions)
    stats = dask.compute(*[dask.delayed(_vote_stats)(p, schema) for p in shuffled.to_delayed()])
    return agreement_result(merge_vote_stats(list(stats)), **params)


def votes_frame(votes: pl.DataFrame, partitions: int | None = None) -> tuple[Any, dict[str, Any]]:
    """The votes (pair_id, annotator, vote and `_row`, each vote's row in the table) as a Dask
    DataFrame of `partitions` consecutive slices (default one a worker, at most VOTE_PARTITION_ROWS
    votes each), sent to the workers once when a distributed client is current (as pairs_frame sends
    pairs), and the polars dtypes to read its partitions back with."""
    import dask
    import dask.dataframe as dd

    try:
        from distributed import get_client

        client = get_client()
    except (ImportError, ValueError):  # no distributed client: the current local scheduler
        client = None
    table = votes.select(VOTE_COLUMNS).with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64))
    workers = len(client.scheduler_info(n_workers=-1)["workers"]) if client is not None else 1
    parts = partitions or min(max(workers, -(-table.height // VOTE_PARTITION_ROWS)), max(table.height, 1))
    step = -(-table.height // parts) if table.height else 1
    # arrow-backed pandas columns keep nulls and integer votes as they are
    pieces = [table.slice(k, step).to_pandas(use_pyarrow_extension_array=True)
              for k in range(0, max(table.height, 1), step)]
    held = client.scatter(pieces) if client is not None else [dask.delayed(p) for p in pieces]
    return dd.from_delayed(held, meta=pieces[0].iloc[:0]), dict(table.schema)


# ----------------------------------------------------------------------------------------------
# runs


@dataclass
class DaskRun:
    """What a Dask engine (a registry entry's `dask_engine`) is called with, beside its parameters:
    the pairs (their partitions as `_Pairs`, made when first asked for: one count of the rows, and
    the exact copies the duplicate checks share), a separate eval set, the long votes table."""

    ddf: Any
    eval_ddf: Any = None
    votes: pl.DataFrame | None = None
    shards: list[_Shard] | None = None
    _pairs: _Pairs | None = None

    @property
    def pairs(self) -> _Pairs:
        if self._pairs is None:
            self._pairs = _Pairs(self.ddf, self.shards)
        return self._pairs


# each check's Dask engine, as its registry entry names it: the rows its way, the verdict its rule module's
def exact_duplicates_on(run: DaskRun, **params: Any) -> CheckResult:
    return exact_duplicates(run.pairs, **params)


def near_duplicates_on(run: DaskRun, **params: Any) -> CheckResult:
    return near_duplicates(run.pairs, **params)


def split_isolation_on(run: DaskRun, **params: Any) -> CheckResult:
    return split_isolation(run.pairs, run.eval_ddf, run.votes, **params)


def agreement_on(run: DaskRun, **params: Any) -> CheckResult:
    return agreement(run.votes, **params)


def _run_engine(check_id: str, run: DaskRun, params: dict[str, Any]) -> CheckResult:
    """A check that does not run partition by partition, by the code its registry entry names."""
    check = CHECKS[check_id]
    return check.code(check.dask_engine)(run, **params)


def run_distributed(ddf: Any, config: dict[str, Any] | None = None, only: list[str] | None = None, *,
                    eval_ddf: Any = None, votes: pl.DataFrame | None = None, comparisons: pl.DataFrame | None = None,
                    lost: pl.DataFrame | None = None) -> list[CheckResult]:
    """The checks of `on_dask()` (or those in `only`) over `ddf` (a Dask DataFrame of pairs: id, prompt,
    chosen, rejected, and split, source, annotators where there), with the parameters of
    `config["checks"]` (the checklist YAML's shape), in registry order. `eval_ddf`: a separate eval
    set (split_isolation); `votes`: the long votes table (agreement, split_isolation's annotators);
    `comparisons` and `lost`: degenerate_pairs' tie labels and the rows lost at read. Runs on
    whatever Dask scheduler is current (a `distributed.Client` when one is active)."""
    checks = (config or {}).get("checks", {})
    available = on_dask()
    wanted = only or available
    unknown = [c for c in wanted if c not in available]
    if unknown:
        raise ValueError(f"not run on Dask: {', '.join(unknown)} (available: {', '.join(available)})")
    by_partition = partition_checks()
    results = row_local(ddf, [c for c in wanted if c in by_partition], checks, comparisons, lost)
    run = DaskRun(ddf, eval_ddf, votes)
    for check_id in wanted:
        if check_id not in results:
            results[check_id] = _run_engine(check_id, run, _params(checks.get(check_id)))
    return [results[c] for c in wanted]


def run_on_dask(inputs: CheckInputs, config: dict[str, Any], check_ids: list[str], run_one: Callable[..., list],
                partition_rows: int = 250_000) -> dict[str, list[CheckResult]]:
    """The checks `check_ids` (of `on_dask()`, none waived) on the current Dask client over the pairs of
    `inputs` (`pairs_frame`), each as a list of results as checklist.py's `run_checklist_on_dask`
    takes them; `run_one` is checklist.py's (a check that raises reports `error`; its seconds)."""
    ddf, eval_ddf = pairs_frame(inputs, partition_rows)
    checks = config["checks"]
    results: dict[str, list[CheckResult]] = {}
    by_partition = partition_checks()
    rows = [c for c in check_ids if c in by_partition]
    started = time.perf_counter()
    try:  # the row-local checks in one pass over the partitions; their time is shared
        # the rows lost at read as they are: each check's binding takes those it counts (registry.lost_for)
        computed = row_local(ddf, rows, checks, inputs.comparisons, inputs.lost) if rows else {}
    except Exception as exc:
        computed = {c: CheckResult(c, "error", message=f"{type(exc).__name__}: {exc}".splitlines()[0]) for c in rows}
    seconds = round(time.perf_counter() - started, 3)
    for c in rows:
        computed[c].details.setdefault("seconds", seconds)
        results[c] = [computed[c]]
    run = DaskRun(ddf, eval_ddf, inputs.votes, shards_of(inputs))
    for c in check_ids:
        if c not in by_partition:
            results[c] = run_one(c, lambda **p: _run_engine(c, run, p),  # noqa: B023
                                 lambda _i: {}, _params(checks.get(c)), inputs)
    return results


def _read_shard(path: str, fs: Any = None, rows: int | None = None) -> Any:
    """One Parquet shard as a pandas partition, read by the worker that runs the task."""
    if fs is None:
        return pl.read_parquet(path, n_rows=rows).to_pandas()
    with fs.open(path, "rb") as handle:
        return pl.read_parquet(handle.read(), n_rows=rows).to_pandas()


def pairs_frame(inputs: CheckInputs, partition_rows: int = 250_000) -> tuple[Any, Any]:
    """The pairs (and a separate eval set) of a checklist run as Dask DataFrames. Pairs in Parquet
    shards (a sharded version, a big file's temporary shards) are read by the workers, one shard a
    partition, from the same paths (or fsspec URLs): workers must reach them. Pairs in the client's
    memory (a file small enough to import at once) are sent to the workers once and kept there,
    `partition_rows` a partition and at least one partition per worker."""
    import dask.dataframe as dd

    def scattered(frame: pl.DataFrame) -> Any:
        from distributed import get_client

        client = get_client()
        parts = min(max(1, len(client.scheduler_info(n_workers=-1)["workers"]), -(-frame.height // partition_rows)),
                    max(frame.height, 1))
        step = -(-frame.height // parts) if frame.height else 1
        pieces = [frame.slice(k, step).to_pandas() for k in range(0, max(frame.height, 1), step)]
        return dd.from_delayed(client.scatter(pieces), meta=pieces[0].iloc[:0])

    if inputs.shards is not None:
        shards = inputs.shards
        ddf = dd.from_map(_read_shard, shards.paths, fs=shards.fs, meta=_read_shard(shards.paths[0], shards.fs, 0))
    else:
        ddf = scattered(inputs.pairs)
    return ddf, (scattered(inputs.eval_pairs) if inputs.eval_pairs is not None else None)


def shards_of(inputs: CheckInputs) -> list[_Shard] | None:
    """The pairs' Parquet shards as `_Shard`s, when they are in shards (pairs_frame reads them)."""
    if inputs.shards is None:
        return None
    return [_Shard(path, inputs.shards.fs) for path in inputs.shards.paths]


LOCAL = r"local:(\d+)"
ADDRESS = r"(tcp|tls|ws|wss|ucx|inproc)://[^\s/:]+(:\d+)?|[^\s/:]+:\d+"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or `taskset` narrows;
    os.cpu_count() where the platform has no affinity)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_address(spec: str) -> str:
    """`--dask SPEC` (and a flow's `dask`) checked before any work: local:N or a scheduler's address,
    else one line. N is 1 to twice the cores this process may use (usable_cores): each local worker is a
    process of one thread, so workers past the cores add memory (~100 MB each and their partitions), not
    speed; twice lets a worker read while another computes (bench/RESULTS.md's 4 workers on 2 cores)."""
    import re

    from prefdata.base.errors import UnusableInput

    local = re.fullmatch(LOCAL, spec.strip())
    if local is None and not re.fullmatch(ADDRESS, spec.strip()):
        raise UnusableInput(f"--dask {spec!r}: give local:N (N worker processes here) or a scheduler's address, "
                            "tcp://HOST:8786")
    if local is not None and int(local[1]) < 1:
        raise UnusableInput(f"--dask {spec!r}: local:N needs at least one worker")
    most = 2 * usable_cores()
    if local is not None and int(local[1]) > most:
        raise UnusableInput(f"--dask {spec!r}: local:N is at most two workers per core, and this machine gives this "
                            f"process {most // 2} (local:{most}); for more workers, start a Dask cluster and give its "
                            "scheduler's address (tcp://HOST:8786)")
    return spec.strip()


@contextmanager
def connect(spec: str) -> Iterator[Any]:
    """A Dask client for `--dask SPEC`: `local:N` starts a LocalCluster of N worker processes, one
    thread each (a worker's checks use one core; parallelism comes from processes), and stops it at
    the end; anything else is a scheduler's address (tcp://HOST:8786). A bad value or an unreachable
    scheduler is one line (UnusableInput, exit 2)."""
    import logging
    import re

    from prefdata.base.errors import UnusableInput

    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    spec = check_address(spec)
    local = re.fullmatch(LOCAL, spec)
    from distributed import Client, LocalCluster

    if local is not None:
        n = int(local[1])
        # the shuffle extension logs each shuffle's start and end as warnings: kept out of the report
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR) as cluster, \
                Client(cluster) as client:
            yield client
        return
    try:
        client = Client(spec.strip(), timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise UnusableInput(f"--dask {spec}: cannot reach the scheduler ({exc})".replace("\n", " ")) from None
    with client:
        yield client


def _params(section: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (section or {}).items() if k != "waive"}
