"""Pairs as Parquet shards, read a shard at a time: the input of a batched checklist run
(checks/batched.py) when the pairs do not fit in memory, e.g. a store version of 10M pairs.

`Shards` reads whole shards (a few columns of them) and gathers chosen rows; `ShardTexts` is the
duplicate engines' RowTexts (checks/minhash.py) over shards: blocks never cross a shard, the shard
being read is cached, and the rows that verification needs again (LSH candidates, rows whose hash
equals an earlier row's) are fetched once, in one pass over the shards, and kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import polars as pl

from .dedup import COMPARE_ROWS, _first_by_key, _first_by_text, _Texts, _verified_prefix

BLOCK_ROWS = 1 << 14  # rows a duplicate engine prepares at a time: ~20 MB of realistic pair text


class Shards:
    """Parquet files of pairs with the same columns, in order; row r of the whole is row
    r - offsets[k] of shard k. `fs`: an fsspec filesystem for remote paths (None: local files)."""

    def __init__(self, paths: Sequence[str], fs: Any = None, keys: Sequence[str] | None = None):
        """`keys`: each file's content hash (a store version's manifest sha256), by which a row-local
        check's result on a file is stored and found again (checks/batched.py, a growing version)."""
        import pyarrow.parquet as pq

        self.paths, self.fs = list(paths), fs
        self.keys = list(keys) if keys is not None else None
        self.rows = []
        for path in self.paths:
            if fs is None:
                self.rows.append(pq.ParquetFile(path).metadata.num_rows)
            else:
                with fs.open(path, "rb") as handle:
                    self.rows.append(pq.ParquetFile(handle).metadata.num_rows)
        self.offsets = np.concatenate([[0], np.cumsum(self.rows, dtype=np.int64)]).astype(np.int64)
        self.n = int(self.offsets[-1])

    def read(self, k: int, columns: Sequence[str] | None = None, n_rows: int | None = None) -> pl.DataFrame:
        columns = list(columns) if columns is not None else None
        if self.fs is None:
            return pl.read_parquet(self.paths[k], columns=columns, n_rows=n_rows)
        with self.fs.open(self.paths[k], "rb") as handle:
            return pl.read_parquet(handle.read(), columns=columns, n_rows=n_rows)

    def columns(self, k: int) -> list[str]:
        """Shard k's column names, from its schema (nothing else read)."""
        import pyarrow.parquet as pq

        if self.fs is None:
            return pq.read_schema(self.paths[k]).names
        with self.fs.open(self.paths[k], "rb") as handle:
            return pq.ParquetFile(handle).schema_arrow.names

    def head(self, n: int) -> pl.DataFrame:
        """The first `n` rows of the first shard (all of it when it has fewer)."""
        return self.read(0, n_rows=n)

    def frames(self, columns: Sequence[str] | None = None) -> Iterator[tuple[int, pl.DataFrame]]:
        """(first row, frame) of each shard in order."""
        for k in range(len(self.paths)):
            yield int(self.offsets[k]), self.read(k, columns)

    def gather(self, rows: np.ndarray, columns: Sequence[str]) -> pl.DataFrame:
        """The rows `rows` (any order, repeats allowed), one pass over the shards that hold them."""
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        shard_of = np.searchsorted(self.offsets, ordered, side="right") - 1
        pieces = []
        for k in np.unique(shard_of):
            local = ordered[shard_of == k] - self.offsets[k]
            pieces.append(self.read(int(k), columns).gather(local))
        found = pl.concat(pieces) if pieces else pl.DataFrame(schema={c: pl.String for c in columns})
        return found.gather(np.argsort(order, kind="stable"))


class ShardTexts:
    """checks/minhash.py RowTexts over `Shards`: the texts of `columns`, prepared as dedup._Texts
    prepares them (normalised, or only null-filled), never all in memory at once."""

    def __init__(self, shards: Shards, columns: Sequence[str], normalise: bool = True):
        self.shards, self.names, self.normalise = shards, list(columns), normalise
        self.n = shards.n
        self._shard: tuple[int, _Texts] | None = None       # the shard being read, as _Texts
        self._fetched_rows = np.zeros(0, dtype=np.int64)    # sorted row numbers fetched again
        self._fetched: _Texts | None = None

    def blocks(self) -> list[tuple[int, int]]:
        out = []
        for k, rows in enumerate(self.shards.rows):
            start = int(self.shards.offsets[k])
            out += [(start + a, start + min(a + BLOCK_ROWS, rows)) for a in range(0, rows, BLOCK_ROWS)]
        return out

    def _shard_texts(self, k: int) -> _Texts:
        if self._shard is None or self._shard[0] != k:
            self._shard = None  # the previous shard's text goes before the next is read
            frame = self.shards.read(k, self.names)
            self._shard = (k, _Texts([frame[c] for c in self.names], self.normalise))
        return self._shard[1]

    def prefetch(self, rows: np.ndarray) -> None:
        """Keep the raw texts of `rows` in memory (with those fetched before): what `parts(rows)` serves."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        new = np.setdiff1d(rows, self._fetched_rows, assume_unique=True)
        if new.size == 0:
            return
        frame = self.shards.gather(new, self.names)
        if self._fetched is not None:
            old = pl.DataFrame({c: col for c, col in zip(self.names, self._fetched.columns)})
            merged = np.concatenate([self._fetched_rows, new])
            order = np.argsort(merged, kind="stable")
            frame = pl.concat([old, frame]).gather(order)
            new = merged[order]
        self._fetched_rows = new
        self._fetched = _Texts([frame[c] for c in self.names], self.normalise)

    def parts(self, rows: np.ndarray | tuple[int, int]) -> list[pl.Series]:
        if isinstance(rows, tuple):  # a block: inside one shard
            k = int(np.searchsorted(self.shards.offsets, rows[0], side="right") - 1)
            start = int(self.shards.offsets[k])
            return self._shard_texts(k).parts((rows[0] - start, rows[1] - start))
        rows = np.asarray(rows, dtype=np.int64)
        self.prefetch(rows)
        return self._fetched.parts(np.searchsorted(self._fetched_rows, rows))

    def text(self, rows: np.ndarray | tuple[int, int]) -> pl.Series:
        return self.join(self.parts(rows))

    join = staticmethod(_Texts.join)
    hash = staticmethod(_Texts.hash)

    def first_copies(self, key: np.ndarray, verified: tuple[int, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """For each row, the first row whose prepared texts are identical: rows grouped on their
        64-bit hash `key`, then every row that shares a key with an earlier one compared with it on
        its texts (fetched once); on a hash collision, the rows whose key repeats are grouped on
        their texts instead (the others have no copy). `verified` = (n_old, rows, firsts): an earlier
        run's first copies over rows 0..n_old-1 (a grown version's parent's, compared on their texts
        then): where the keys give the same, those rows are not compared again."""
        rep = _first_by_key(key)
        rows = np.flatnonzero(rep != np.arange(rep.size))
        rows = rows[rows >= _verified_prefix(rep, verified)]
        self.prefetch(np.concatenate([rows, rep[rows]]))
        same = all(bool((self.text(rows[s:s + COMPARE_ROWS]) == self.text(rep[rows[s:s + COMPARE_ROWS]])).all())
                   for s in range(0, rows.size, COMPARE_ROWS))
        if same:
            return rep
        members = np.flatnonzero(pl.Series(key).is_duplicated().to_numpy())
        first = _first_by_text(self.parts(members))
        out = np.arange(key.size, dtype=np.int64)
        out[members] = members[first]
        return out

