"""Columnar import: a Parquet, JSON Lines, JSON, CSV or TSV file (all but Parquet compressed or not) in
the `trl` or `hh-rlhf` format, checked and given ids as whole columns (`trl-chat` rides the same batches
with every row through its reference converter: ROW_CONVERTED; `comparisons` too, in two passes,
since its labels need every vote first: prefdata.data.comparison_batches).

The row-by-row import (`importer.import_rows`) is the reference; this path gives the same kept
rows, ids, quarantine reasons and row numbers (tests/test_import_columnar.py runs both on the same
files), at a small multiple of a polars read of the file. How:

- a JSON Lines file is parsed by polars a block of lines at a time (prefdata.data.ndjson); the few
  lines polars could read differently from the row reader (a duplicate key, a number where a text
  belongs, a line that is not one JSON object...) are read by the row reader itself, in their place;
- a CSV or TSV file is read by the row reader's own CSV reader, a batch of lines at a time
  (prefdata.data.delimited), into text columns; the records it cannot use stay its rows;
- a JSON file (an array of rows, `{"data": [...]}`...) is read by the row reader, as a stream, a
  batch of rows at a time (prefdata.data.jsonarray); the rows whose values a frame holds as the row
  path reads them become a frame, the others (a number where a text belongs, a list...) stay rows;
- every check is first a vectorised *candidate* mask that is a superset of the rows it can reject
  (missing or non-text fields, a prompt with no visible ASCII character, chosen = rejected, a text
  over --max-text-bytes, an odd split, an infinite score, a blank id);
- only candidate rows (a few per thousand on real data) go through the reference converter, row by
  row, which gives each its exact reason and detail, or keeps it when the candidate was harmless;
- ids: records.normalise_series once per run of equal texts (in slices of ID_CHUNK rows), then
  sha256 of the same length-prefixed parts as records._digest, each row's parts joined by Arrow
  into one message and hashed in two threads; for JSON Lines, on a worker while the next blocks
  parse (_IdsAhead);
- hh-rlhf's prompt split into turns (formats.split_hh, hh_turns) runs row by row: the format needs it;
- the cross-row rules (numbered repeats of a content id, an id reused for other content) are
  window expressions over the kept rows in file order, carried from batch to batch.

Anything this path does not cover exactly returns None (or raises MixedIds while the batches are
read) and the caller imports row by row: another container (a compressed Parquet file); and, in
every format but comparisons (whose rows are the row reader's and the converter's throughout),
nested (list, struct) Parquet columns, bool or float optional columns (their text form is
Python's), `model`/`policy`/`cmp_key` columns, or some rows with an id and some without.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain, islice
from operator import methodcaller
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.base import defaults
from prefdata.base.errors import UnusableInput
from prefdata.data.comparison_batches import ComparisonBatches, comparison_batches
from prefdata.data.ndjson import EXPLICIT_NULL, as_written
from prefdata.data.formats import CONVERTERS, SCORE_COLUMNS, RowRejected, hh_turns, split_hh
from prefdata.data.readers import (BOM, GZIP_MAGIC, ROW_BYTES_PER_TEXT_BYTE, RawRow, _open_data, file_kind,
                                   parquet_problem, read_rows, require_regular_file, rows_in_batches)
from prefdata.data.records import OPTIONAL_COLUMNS, PAIR_COLUMNS, messages_json, normalise_series, render_turns
from prefdata.data.rows import check_format, convert_row, quarantine_entry

TEXT = ("prompt", "chosen", "rejected")
# Formats whose every row goes through the reference converter, a batch at a time: their checks are
# not vectorised (trl-chat's message lists are matched and rendered in Python), but the batches
# bound the memory, stream into the store and carry the cross-row rules like the others. (Every
# format has this path: `comparisons` in batches of its own, comparison_batches.)
ROW_CONVERTED = ("trl-chat",)
CONVERSATIONAL = ("trl-chat", "hh-rlhf")  # formats whose records keep the prompt's turns (prompt_messages)
_VISIBLE_ASCII = "[!-~]"  # a text with one of these is not blank, whatever `str.strip` counts as space
DIGEST_THREAD_MIN_ROWS = 10_000  # fewer rows per thread: starting one costs more than it saves
BATCH_ROWS = defaults.BATCH_ROWS  # rows converted at a time (one home: prefdata.base.defaults)
ID_CHUNK = 100_000  # rows per slice when computing ids: bounds the normalised copies to ~250 MB
FORMAT_ROWS = 1000  # the rows the format is told from (importer._choose_format's first 1000)
_SPLIT = r"^[A-Za-z0-9_]+$"  # formats._SPLIT; Python's `$` also allows a final "\n", so this is stricter
_DECIMAL = r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"  # what float() and polars read alike


@dataclass
class ColumnarImport:
    """What importer._finish needs: the kept pairs (as rows.records_frame shapes them), the quarantine
    in row order, and the rows read; of a comparisons file, its kept comparisons and their rows'
    votes, as the row path gives them to _finish."""

    format: str
    pairs: pl.DataFrame
    quarantine: list[dict[str, Any]]
    read: int
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    votes: list[dict[str, str]] = field(default_factory=list)


def _plain_parquet(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
        return not head.startswith(GZIP_MAGIC) and file_kind(path, head) == "parquet"
    except (OSError, UnusableInput):
        return False  # the row path says what is wrong with it


def _optional_columns(fmt: str, given: set[str] | pl.Schema) -> list[str]:
    """The optional record columns a batch carries: those the file gives (prompt_messages is made,
    never read: the trl-chat and hh-rlhf converters write it for every row)."""
    return [c for c in OPTIONAL_COLUMNS if (c in given and c != "prompt_messages")
            or (c == "prompt_messages" and fmt in CONVERSATIONAL)]


def _is_int(dtype: pl.DataType) -> bool:
    return dtype.is_integer() or dtype == pl.Null


def _supported(schema: pl.Schema) -> str | None:
    """The id column (or "") when this path covers the file's columns exactly; None when not."""
    simple = all(d == pl.String or d.is_numeric() or d in (pl.Boolean, pl.Null) for d in schema.values())
    if not simple or {"model", "policy", "cmp_key"} & set(schema):
        return None
    for name in OPTIONAL_COLUMNS:
        if name not in schema or name == "prompt_messages":
            continue
        dtype = schema[name]
        if name in SCORE_COLUMNS:  # not Decimal: formats.parse_score refuses what is not int, float or text
            ok = dtype.is_integer() or dtype.is_float() or dtype in (pl.Null, pl.String)
        elif name == "split":
            ok = dtype in (pl.String, pl.Null)
        else:
            ok = dtype == pl.String or _is_int(dtype)
        if not ok:
            return None
    id_column = "id" if "id" in schema else "idx" if "idx" in schema else ""
    if id_column and not (schema[id_column] == pl.String or _is_int(schema[id_column])):
        return None
    return id_column


def _unsupported(schema: pl.Schema) -> str:
    """Why `_supported` refuses these columns, in words."""
    named = sorted({"model", "policy", "cmp_key", "__row"} & set(schema))
    if named:
        return f"a {named[0]} column (the row path applies its rule)"
    odd = [f"{c}: {d}" for c, d in schema.items() if not (d == pl.String or d.is_numeric() or d == pl.Null)
           or c in OPTIONAL_COLUMNS and not (d == pl.String or _is_int(d) or d == pl.Null or c in SCORE_COLUMNS)]
    return "columns of a type it does not take (" + (", ".join(odd) or ", ".join(f"{c}: {d}" for c, d in schema.items())) + ")"


def _candidates(schema: pl.Schema, fmt: str, id_column: str, max_text_bytes: int) -> pl.Expr:
    """True for every row a reference check might reject (and a few it will not)."""
    flags = [pl.col(c).str.len_bytes() > max_text_bytes for c, d in schema.items() if d == pl.String]
    # trl needs text in all three, and a prompt that is not blank; hh-rlhf two non-blank transcripts
    needed, not_blank = (TEXT, ("prompt",)) if fmt == "trl" else (("chosen", "rejected"), ("chosen", "rejected"))
    for name in needed:
        flags.append(pl.col(name).is_null() if schema[name] == pl.String else pl.lit(True))
    for name in not_blank:
        if schema[name] == pl.String:
            flags.append(~pl.col(name).str.contains(_VISIBLE_ASCII))
    if schema["chosen"] == schema["rejected"] == pl.String:
        flags.append(pl.col("chosen") == pl.col("rejected"))
    if schema.get("split") == pl.String:
        flags.append(~pl.col("split").str.contains(_SPLIT))
    for name in SCORE_COLUMNS:
        if name in schema and schema[name].is_float():
            flags.append(pl.col(name).is_infinite())
        elif schema.get(name) == pl.String:  # a number as text (CSV): only plain decimals, "" is missing
            number = _text_score(name)
            flags.append((pl.col(name) != "") & ~(pl.col(name).str.contains(_DECIMAL) & number.is_finite()).fill_null(False))
    if id_column and schema[id_column] == pl.String:
        flags.append(~pl.col(id_column).str.contains(_VISIBLE_ASCII))
    return pl.any_horizontal([f.fill_null(False) for f in flags])


def _text_score(name: str) -> pl.Expr:
    """A score column of text as numbers: parse_score's float() of a plain decimal (polars and Python
    both round correctly); "" and other text null (other text is a candidate: float() decides it)."""
    return pl.col(name).cast(pl.Float64, strict=False)


def normalised(texts: pl.Series) -> pl.Series:
    """records.normalise_text of every value (nulls as ""), computed once per run of equal values.

    Repeats sit next to each other in real files (the pairs of one prompt share its text and, in
    UltraFeedback-binarized, the chosen reply), and comparing a row with the one before costs no
    hashing: at 200k realistic pairs this takes ~30% less CPU than `unique()` + a join (which hash
    every text twice), and stays as cheap as normalising every row when nothing repeats."""
    return _once_per_run(texts, normalise_series)


def _once_per_run(texts: pl.Series, function) -> pl.Series:
    """function(texts), a column to a column of the same length, computed on the first row of each
    run of equal values only."""
    if texts.is_empty():
        return function(texts)
    starts = texts.ne_missing(texts.shift(1)).scatter(0, True)  # the first row starts a run, null or not
    return function(texts.filter(starts)).gather(starts.cum_sum() - 1).alias(texts.name)


def _with_lengths(texts: pl.Series) -> list:
    """A text column as two Arrow binary arrays: each value's UTF-8 length (8 bytes, little endian),
    and its bytes."""
    import numpy as np
    import pyarrow as pa

    # through polars' Binary, not String: 2.5x faster (checks/frames.py `large_binary`)
    data = texts.fill_null("").cast(pl.Binary).to_arrow(compat_level=pl.CompatLevel.oldest())
    if isinstance(data, pa.ChunkedArray):
        data = data.combine_chunks()
    # from the offsets, not pyarrow.compute.binary_length(...).to_numpy(), which imports pandas (~1 s)
    offsets = np.frombuffer(data.buffers()[1], dtype=np.int64)[data.offset:data.offset + len(data) + 1]
    lengths = np.diff(offsets).astype("<u8")
    prefix = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), len(lengths), [None, pa.py_buffer(lengths)])
    return [prefix.cast(pa.large_binary()), data]


def digests(*parts: pl.Series) -> pl.Series:
    """records._digest(*parts) row by row: sha256 over each part's UTF-8 length (8 bytes, little
    endian) and bytes, first 16 hex digits.

    Arrow joins each row's parts into one message (one buffer for the column), so a row costs one
    sha256 call driven by C iterators (`map`), not six `update`s in a Python loop; two threads share
    the rows, since hashlib releases the GIL while it hashes a message over 2 KB (most pairs); the
    hex digits are made from the raw digests as one column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = len(parts[0])
    if rows == 0:
        return pl.Series([], dtype=pl.String)
    arrays = [array for part in parts for array in _with_lengths(part)]
    # the empty separator built from buffers: pa.scalar(b"") would import pandas (~1 s) to check its type
    empty = [None, pa.py_buffer(np.zeros(2, np.int64)), pa.py_buffer(b"")]
    nothing = pa.Array.from_buffers(pa.large_binary(), 1, empty)[0]
    messages = pc.binary_join_element_wise(*arrays, nothing)
    del arrays
    offsets = np.frombuffer(messages.buffers()[1], dtype=np.int64)[messages.offset:messages.offset + rows + 1]
    starts, ends = offsets[:-1].tolist(), offsets[1:].tolist()
    body = memoryview(messages.buffers()[2] or b"")

    def hashed(lo: int, hi: int) -> bytes:  # the 32-byte digests of rows lo..hi-1, end to end
        views = map(body.__getitem__, map(slice, starts[lo:hi], ends[lo:hi]))
        return b"".join(map(methodcaller("digest"), map(hashlib.sha256, views)))

    half = (rows + 1) // 2
    if rows < 2 * DIGEST_THREAD_MIN_ROWS:
        raw = hashed(0, rows)
    else:
        with ThreadPoolExecutor(max_workers=2) as pool:
            raw = b"".join(pool.map(hashed, (0, half), (half, rows)))
    first = np.frombuffer(raw, dtype=np.uint8).reshape(rows, 32)[:, :8].tobytes()  # 16 hex digits
    column = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8), rows, [None, pa.py_buffer(first)])
    return pl.from_arrow(column.cast(pa.binary())).bin.encode("hex").alias("")


def _normalised_chunk(chunk: pl.DataFrame) -> tuple[pl.Series, pl.Series, pl.Series]:
    """The normalised prompt, and both normalised responses in sorted() order, of a slice of rows."""
    sides = pl.DataFrame({"c": normalised(chunk["chosen"]), "r": normalised(chunk["rejected"])})
    # sorted() order: code points, which is the byte order of UTF-8, which is how polars compares
    ordered = sides.select(first=pl.min_horizontal("c", "r"), second=pl.max_horizontal("c", "r"))
    return normalised(chunk["prompt"]), ordered["first"], ordered["second"]


def _ids(frame: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """prompt_id and pair_id of every row, as records.prompt_id / records.pair_id give them.

    In slices of ID_CHUNK rows, so the normalised copies of the text never exist for the whole file
    at once; a worker thread normalises the next slice (polars, without the GIL) while this one
    hashes the current one.
    """
    prompt_ids, pair_ids = [], []
    starts = range(0, frame.height, ID_CHUNK)
    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = pool.submit(_normalised_chunk, frame.slice(0, ID_CHUNK))
        for start in starts:
            prompts, first, second = ahead.result()
            if start + ID_CHUNK < frame.height:
                ahead = pool.submit(_normalised_chunk, frame.slice(start + ID_CHUNK, ID_CHUNK))
            ids = _once_per_run(prompts, digests)
            prompt_ids.append(ids)
            pair_ids.append(digests(ids, first, second))
    if not prompt_ids:
        return pl.Series([], dtype=pl.String), pl.Series([], dtype=pl.String)
    return pl.concat(prompt_ids), pl.concat(pair_ids)


class _IdsAhead:
    """The ids of a batch's rows (JSON Lines), computed on a worker thread as its blocks are parsed:
    the parse and the ids each keep ~1.5 of two cores busy, so together they take less time than one
    after the other. Ids are row by row, so those of a block's rows are the batch's for those rows."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefdata-ids")
        self.waiting: list[pl.DataFrame] = []  # parsed texts not yet sent: ID_CHUNK rows go at once
        self.pending: list[Any] = []  # futures of (__row, prompt_id, pair_id) frames, in row order
        self.unused = pl.DataFrame(schema={"__row": pl.Int64, "prompt_id": pl.String, "pair_id": pl.String})

    def parsed(self, frame: pl.DataFrame) -> None:
        """A block's frame, as ndjson.batches parses it: its texts as _convert_frame takes them."""
        self.waiting.append(frame.select("__row", *(pl.col(c).cast(pl.String) if c in frame.schema else
                                                    pl.lit(None, pl.String).alias(c) for c in TEXT)))
        if sum(f.height for f in self.waiting) >= ID_CHUNK:
            self._send()

    def _send(self) -> None:
        if self.waiting:
            self.pending.append(self.pool.submit(_ids_of_rows, pl.concat(self.waiting)))
            self.waiting = []

    def take(self, rows: pl.Series) -> tuple[pl.Series, pl.Series]:
        """The ids of a batch's rows (its `__row`, ascending: rows of the blocks parsed so far)."""
        self._send()
        done = pl.concat([self.unused, *(future.result() for future in self.pending)])
        self.pending = []
        last = rows.max() if len(rows) else -1
        self.unused = done.filter(pl.col("__row") > last)
        mine = done.filter(pl.col("__row") <= last)
        if not mine["__row"].equals(rows):  # rows the batch moved to the row reader (ndjson._joined)
            mine = rows.to_frame("__row").join(mine, on="__row", how="left", maintain_order="left")
        return mine["prompt_id"], mine["pair_id"]

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _ids_of_rows(texts: pl.DataFrame) -> pl.DataFrame:
    prompt_ids, pair_ids = _ids(texts)
    return pl.DataFrame({"__row": texts["__row"], "prompt_id": prompt_ids, "pair_id": pair_ids})


def _split_hh(frame: pl.DataFrame, candidate: pl.Series) -> tuple[pl.DataFrame, pl.Series]:
    """formats.from_hh's split on every row that is not already a candidate: the prompt text, chosen
    and rejected replies and the prompt's turns (`prompt_messages`), and which rows the split refuses,
    leaves with identical replies or a blank prompt (new candidates, for the reference to give their
    reason). Row by row: the format needs it."""
    columns = (*TEXT, "prompt_messages")
    texts: dict[str, list[str | None]] = {name: [] for name in columns}
    refused: list[bool] = []
    for chosen, rejected, skip in zip(frame["chosen"].to_list(), frame["rejected"].to_list(), candidate.to_list()):
        split = None
        if not skip:
            try:
                transcript, chosen_reply, rejected_reply = split_hh(chosen, rejected)
                turns = hh_turns(transcript)
                split = (render_turns(turns), chosen_reply, rejected_reply, messages_json(turns))
            except RowRejected:
                pass
        if split is None or split[1] == split[2] or not split[0].strip():
            refused.append(not skip)
            split = (None, None, None, None)
        else:
            refused.append(False)
        for name, text in zip(columns, split):
            texts[name].append(text)
    return pl.DataFrame(texts, schema={name: pl.String for name in columns}), pl.Series(refused, dtype=pl.Boolean)


class MixedIds(Exception):
    """Some kept rows have a source id and some have not: the row path settles their collisions."""


class UnsupportedBatch(MixedIds):
    """A batch of a JSON Lines file holds what this path does not cover (nested values, a column of a
    type it does not take), found only when the batch is read: the row path imports the file."""


class UnreadableBatch(UnusableInput):
    """A batch of the file cannot be read (a damaged page, text that is not UTF-8): an in-memory
    import hands the file to the row path, which quarantines rows whose text is not UTF-8; a
    streamed one stops here, naming the row group."""


@dataclass
class _Earlier:
    """What the cross-row rules need to know of the batches before this one."""

    carry: bool = False                       # more batches follow: keep what they need (one batch: nothing)
    mode: str | None = None                   # "source": every kept row has its id; "content": none has
    first_content: pl.DataFrame | None = None  # source ids: id, h1, h2 (content hash) of the first kept row
    repeats: pl.DataFrame | None = None        # content ids: pair_id, n (kept rows with it so far)


@dataclass
class ColumnarBatches:
    """A file's columnar import, a batch of rows at a time: `batches` yields (kept pairs, quarantine)
    per batch, in file order; `n_batches` of them. `read` (rows read) is final once they are all
    taken (a JSON Lines file counts its rows as it goes)."""

    format: str
    read: int
    n_batches: int
    batches: Iterator[tuple[pl.DataFrame, list[dict[str, Any]]]]


def convert_columnar(path: Path, fmt: str, max_text_bytes: int, why: list[str] | None = None,
                     opened: ColumnarBatches | ComparisonBatches | None = None) -> ColumnarImport | None:
    """The import of a plain Parquet, JSON Lines, JSON, CSV or TSV file, or None when the row path must do
    it (then `why`, when given, gets the reason). `opened`: its batches, if the caller has opened them
    already (convert_batches, none read yet)."""
    if opened is None:
        opened = convert_batches(path, fmt, max_text_bytes, BATCH_ROWS, why)
    if opened is None:
        return None
    if isinstance(opened, ComparisonBatches):  # labels need every vote: the records go to importer._finish
        done = ColumnarImport(opened.format, pl.DataFrame(schema={c: pl.String for c in PAIR_COLUMNS}), [], 0)
        for batch in opened.batches:
            done.comparisons += batch.records
            done.votes += batch.votes
            done.quarantine += batch.quarantine
        done.read = opened.read
        return done
    pairs, quarantine = [], []
    try:
        for kept, rejected in opened.batches:
            pairs.append(kept)
            quarantine.extend(rejected)
    except (MixedIds, UnreadableBatch) as exc:
        return _refused(why, str(exc).removeprefix(f"{path}: "))
    kept = pl.concat(pairs, how="diagonal_relaxed")
    if kept.height == 0:  # nothing kept: no optional column, as when the file is one batch
        kept = kept.select(PAIR_COLUMNS)
    # Batches carry every optional column some row of the file gives; a record has one (other than
    # a score) only with a value, so one that only quarantined rows gave goes, as in the row path.
    # (A streamed import's shards keep it: their columns are fixed before the first batch.)
    kept = kept.drop([c for c in kept.columns if c not in PAIR_COLUMNS and c not in SCORE_COLUMNS
                      and kept[c].null_count() == kept.height])
    return ColumnarImport(opened.format, kept, quarantine, opened.read)


def _refused(why: list[str] | None, reason: str) -> None:
    """None, the answer of a file the row path must import; `why` (when the caller asks) gets the reason."""
    if why is not None:
        why.append(reason)
    return None


def convert_batches(path: Path, fmt: str, max_text_bytes: int, batch_rows: int = BATCH_ROWS,
                    why: list[str] | None = None) -> ColumnarBatches | ComparisonBatches | None:
    """The columnar import of a plain Parquet, JSON Lines, JSON, CSV or TSV file, `batch_rows` rows (lines)
    at a time (so a file of any size converts in the memory of one batch), or None when the row path
    must do it. The batches
    give exactly the rows, ids and quarantine of one pass over the whole file: the cross-row rules
    carry what they need from batch to batch (_Earlier). Iterating raises MixedIds when the file
    turns out to need the row path after all. A comparisons file gives ComparisonBatches: its
    comparisons, whose labels wait for every vote (prefdata.data.comparison_batches)."""
    require_regular_file(path)  # before any of the reads below
    if not _plain_parquet(path):
        kind = _kind(path)
        if kind == "jsonl":
            return _jsonl_batches(path, fmt, max_text_bytes, batch_rows, why)
        if kind in ("csv", "tsv"):
            return _csv_batches(path, "\t" if kind == "tsv" else ",", fmt, max_text_bytes, batch_rows, why)
        if kind == "json":
            return _json_batches(path, fmt, max_text_bytes, batch_rows, why)
        return _refused(why, "only Parquet, JSON Lines, JSON, CSV and TSV files have a columnar path (not a "
                             "compressed Parquet file)")
    try:
        schema = pl.read_parquet_schema(path)
        head = pl.read_parquet(path, n_rows=1)
        rows = pl.scan_parquet(path).select(pl.len()).collect().item()
    except (pl.exceptions.PolarsError, OSError):
        return _refused(why, "polars cannot read it")  # the row path reads it with pyarrow and names the problem
    schema = pl.Schema(schema)
    if rows and _format_or_none(path, fmt, set(schema), head.row(0, named=True)) == "comparisons":
        # read by the row reader and converted row by row: any column type is the row path's
        return comparison_batches(path, True, max_text_bytes, batch_rows, rows)
    id_column = _supported(schema)
    if id_column is None or rows == 0 or "__row" in schema:
        return _refused(why, _unsupported(schema) if rows else "no rows")
    columns = set(schema)
    fmt = check_format(path, fmt, columns, columns, head.row(0, named=True))
    optional = _optional_columns(fmt, columns)
    starts = range(0, rows, batch_rows)
    present = None if optional else []
    if len(starts) > 1 and optional:  # the same columns in every batch: those with a value in some row of the file
        read = [c for c in optional if c in columns]  # not prompt_messages, which trl-chat's converter makes
        given = pl.scan_parquet(path).select([pl.col(c).is_not_null().any() for c in read]).collect().row(
            0, named=True) if read else {}
        present = [c for c in optional if given.get(c) or c in SCORE_COLUMNS or c not in columns]
    earlier = _Earlier(carry=len(starts) > 1)

    def batches() -> Iterator[tuple[pl.DataFrame, list[dict[str, Any]]]]:
        for start in starts:  # no name outlives its batch: two batches never share the memory
            yield _convert_frame(path, _read_batch(path, start, batch_rows), fmt, id_column, optional, present,
                                 max_text_bytes, earlier)

    return ColumnarBatches(fmt, rows, len(starts), batches())


def _format_or_none(path: Path, fmt: str, columns: set[str], sample: dict[str, Any]) -> str | None:
    """check_format's answer, or None where it raises (the path that follows says what is wrong)."""
    try:
        return check_format(path, fmt, columns, columns, sample)
    except UnusableInput:
        return None


def _kind(path: Path) -> str | None:
    """readers.file_kind of a file that is not plain Parquet; None when the row path must say what
    is wrong with it."""
    try:
        with _open_data(path) as handle:
            head = handle.read(64 + len(BOM)).removeprefix(BOM)
        return file_kind(path, head)
    except (OSError, EOFError, zlib.error, UnusableInput):
        return None


def _first_rows(path: Path, fmt: str, max_line_bytes: int, why: list[str] | None) -> tuple[str | None, list[RawRow]]:
    """The format, as the row path chooses it from the first rows (None when this path leaves the
    file to the row path, `why` told), and those rows."""
    head = list(islice((r for r in read_rows(path, max_line_bytes) if r.data is not None), FORMAT_ROWS))
    if not head:
        return _refused(why, "no readable row among its first lines"), head
    columns = set().union(*(r.data.keys() for r in head))
    try:
        fmt = check_format(path, fmt, columns, columns, head[0].data)
    except UnusableInput:  # the row path, over every row, gives the exact message (or finds the columns later on)
        return _refused(why, f"its first {FORMAT_ROWS} rows do not say its format"), head
    return fmt, head


def _csv_batches(path: Path, delimiter: str, fmt: str, max_text_bytes: int, batch_rows: int,
                 why: list[str] | None = None) -> ColumnarBatches | ComparisonBatches | None:
    """The columnar import of a CSV or TSV file (compressed or not), the records of `batch_rows`
    lines at a time (prefdata.data.delimited: the row reader's own CSV reader, so the same records);
    every value is text, as the row path reads it."""
    from prefdata.data import delimited

    limit = ROW_BYTES_PER_TEXT_BYTE * max_text_bytes
    fmt, head = _first_rows(path, fmt, limit, why)
    if fmt is None:
        return None
    if fmt == "comparisons":
        return comparison_batches(path, False, max_text_bytes, batch_rows, delimited.count_lines(path))
    header = list(head[0].data)  # a readable row has every column of the header
    schema = pl.Schema({name: pl.String for name in header})
    id_column = _supported(schema)
    if id_column is None or any(name.startswith("__") for name in header):
        return _refused(why, _unsupported(schema) if id_column is None else "a column named __... (this path's own)")
    lines = delimited.count_lines(path)
    n_batches = max(1, -(-lines // batch_rows))
    optional = _optional_columns(fmt, schema)
    # every row gives every column (as text), so several batches have the columns one batch would
    present = optional if n_batches > 1 else None
    earlier = _Earlier(carry=n_batches > 1)
    opened = ColumnarBatches(fmt, 0, n_batches, iter(()))

    def batches() -> Iterator[tuple[pl.DataFrame, list[dict[str, Any]]]]:
        for frame, rows in delimited.batches(path, delimiter, limit, batch_rows, n_batches):
            opened.read += frame.height + len(rows)
            yield _convert_frame(path, frame, fmt, id_column, optional, present, max_text_bytes, earlier, rows)

    opened.batches = batches()
    return opened


def _jsonl_batches(path: Path, fmt: str, max_text_bytes: int, batch_rows: int,
                   why: list[str] | None = None) -> ColumnarBatches | ComparisonBatches | None:
    """The columnar import of a JSON Lines file (gzipped or not), `batch_rows` lines at a time
    (prefdata.data.ndjson parses them; the lines polars could read differently go through the row
    reader). The format is the row path's choice from the first rows; None when that path must say
    what is wrong with the file. The lines are counted (a pass over the file) only when there are
    more than one batch of them, or when the format reads them all as rows anyway."""
    from prefdata.data import ndjson

    max_line_bytes = ROW_BYTES_PER_TEXT_BYTE * max_text_bytes
    fmt, _ = _first_rows(path, fmt, max_line_bytes, why)
    if fmt is None:
        return None
    source, ids_ahead = None, None
    if fmt == "comparisons" or fmt in ROW_CONVERTED:
        lines = ndjson.count_lines(path)
    else:  # the first batch is parsed now: a file that ends in it (most files) needs no pass to count lines
        read = ndjson.LinesRead()
        ids_ahead = _IdsAhead() if fmt != "hh-rlhf" else None  # hh-rlhf's texts are split from its two columns
        parsed = ndjson.batches(path, batch_rows, max_line_bytes, TEXT, SCORE_COLUMNS, read,
                                ids_ahead.parsed if ids_ahead is not None else None)
        head = next(parsed, None)
        lines = read.lines if read.ended else ndjson.count_lines(path)
        source = chain([] if head is None else [head], parsed)
    if lines == 0:
        return _refused(why, "no rows")
    if fmt == "comparisons":
        return comparison_batches(path, False, max_text_bytes, batch_rows, lines)
    n_batches = -(-lines // batch_rows)
    present = None  # one batch: the columns its kept rows give
    if n_batches > 1:  # the same columns in every batch: those some row of the file gives (as for Parquet)
        given = ndjson.columns_given(path, OPTIONAL_COLUMNS, SCORE_COLUMNS)
        present = _optional_columns(fmt, given)
    earlier = _Earlier(carry=n_batches > 1)
    opened = ColumnarBatches(fmt, 0, n_batches, iter(()))

    # a format whose rows all go to the reference converter skips polars: it would parse them twice
    if source is None:
        source = _row_batches(path, batch_rows, max_line_bytes, n_batches)

    def batches() -> Iterator[tuple[pl.DataFrame, list[dict[str, Any]]]]:
        try:
            yield from converted()
        finally:
            if ids_ahead is not None:
                ids_ahead.close()

    def converted() -> Iterator[tuple[pl.DataFrame, list[dict[str, Any]]]]:
        for frame, rows in source:
            opened.read += frame.height + len(rows)
            schema = pl.Schema({c: d for c, d in frame.schema.items() if not c.startswith("__")})
            id_column = _supported(schema)
            given = set(schema).union(*(r.data for r in rows if r.data is not None))
            if id_column is None or {"model", "policy", "cmp_key"} & given:  # (rows only: the keys they give)
                named = schema if id_column is None else pl.Schema({c: pl.String for c in given})
                raise UnsupportedBatch(f"{path}: {_unsupported(named)}")
            optional = _optional_columns(fmt, given)
            if present is not None:
                optional = sorted(set(optional) | set(present), key=OPTIONAL_COLUMNS.index)
            frame = frame.with_columns(pl.lit(None, pl.String).alias(c) for c in (*TEXT, *optional) if c not in schema)
            yield _convert_frame(path, frame, fmt, id_column, optional, present, max_text_bytes, earlier, rows,
                                 jsonl=True, ids_ahead=ids_ahead)

    opened.batches = batches()
    return opened


def _json_batches(path: Path, fmt: str, max_text_bytes: int, batch_rows: int,
                  why: list[str] | None = None) -> ColumnarBatches | ComparisonBatches | None:
    """The columnar import of a JSON file (an array of rows, `{"data": [...]}`, one object or JSON
    Lines saved as .json; compressed or not): the row reader's rows, a stream, `batch_rows` at a time
    (their numbers: the element, from 1), each batch a frame of the rows whose values it holds as the
    row path reads them, the others through the reference converter (prefdata.data.jsonarray). The
    rows are counted first, in one pass that keeps them when they are one batch."""
    from prefdata.data import jsonarray

    max_row_bytes = ROW_BYTES_PER_TEXT_BYTE * max_text_bytes
    fmt, _ = _first_rows(path, fmt, max_row_bytes, why)
    if fmt is None:
        return None
    read = jsonarray.survey(path, max_row_bytes, batch_rows)  # a broken document raises here, before any batch
    if read.last == 0:
        return _refused(why, "no rows")
    n_batches = -(-read.last // batch_rows)
    if fmt == "comparisons":
        return comparison_batches(path, False, max_text_bytes, batch_rows, read.last, read.rows)
    named = {"model", "policy", "cmp_key"} & read.keys
    if named:
        return _refused(why, _unsupported(pl.Schema({name: pl.String for name in named})))
    present = None  # one batch: the columns its kept rows give
    if n_batches > 1:  # the same columns in every batch: those some row of the file gives
        present = _optional_columns(fmt, read.given)
    earlier = _Earlier(carry=n_batches > 1)
    opened = ColumnarBatches(fmt, 0, n_batches, iter(()))
    source = [read.rows] if read.rows is not None else rows_in_batches(read_rows(path, max_row_bytes), batch_rows,
                                                                       n_batches)
    del read  # the rows go with the batches

    def batches() -> Iterator[tuple[pl.DataFrame, list[dict[str, Any]]]]:
        for rows in source:
            opened.read += len(rows)
            # trl-chat's rows all go to its converter (its message lists are not a frame's)
            framed, others = ([], rows) if fmt in ROW_CONVERTED else jsonarray.split(rows, max_text_bytes)
            frame = jsonarray.frame(framed)
            originals = {row.number: row.data for row in rows if row.data is not None}
            del framed, rows
            optional = _optional_columns(fmt, set().union(*originals.values()))
            if present is not None:
                optional = sorted(set(optional) | set(present), key=OPTIONAL_COLUMNS.index)
            frame = frame.with_columns(pl.lit(None, pl.String).alias(c) for c in optional if c not in frame.columns)
            yield _convert_frame(path, frame, fmt, "id", optional, present, max_text_bytes, earlier, others,
                                 jsonl=True, originals=originals)

    opened.batches = batches()
    return opened


def _row_batches(path: Path, batch_lines: int, max_line_bytes: int, n_batches: int
                 ) -> Iterator[tuple[pl.DataFrame, list[RawRow]]]:
    """The row reader's rows of each `batch_lines` lines, as ndjson.batches gives them (all in the
    rows, none in the frame), exactly `n_batches` batches."""
    empty = pl.DataFrame(schema={"__row": pl.Int64})
    for rows in rows_in_batches(read_rows(path, max_line_bytes), batch_lines, n_batches):
        yield empty, rows


def _read_batch(path: Path, start: int, rows: int) -> pl.DataFrame:
    try:
        return pl.scan_parquet(path).slice(start, rows).collect().with_row_index("__row", offset=start + 1)
    except pl.exceptions.PolarsError as exc:
        raise UnreadableBatch(f"{path}: not a readable Parquet file: {parquet_problem(path, exc)}") from None


def _convert_frame(path: Path, frame: pl.DataFrame, fmt: str, id_column: str, optional: list[str],
                   present: list[str] | None, max_text_bytes: int, earlier: _Earlier,
                   read_by_rows: list[RawRow] | None = None, jsonl: bool = False,
                   originals: dict[int, dict[str, Any]] | None = None, ids_ahead: _IdsAhead | None = None
                   ) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """One batch of rows (`__row`: the file's row numbers): its kept pairs and its quarantine.
    `read_by_rows`: the rows the row reader read instead (JSON Lines: lines polars could read
    differently; CSV: records it cannot use; JSON: rows the frame does not hold), converted as the
    row path converts them. `jsonl`: a null in the frame is a key the line left out (unless marked
    written), not a value. `originals`: the batch's rows as the reader gave them, by number (JSON:
    the frame holds some values as the converter's text), which a frame row's candidate or conflict
    is converted and quarantined as, instead of the frame's values. `ids_ahead`: the ids of the
    frame's rows, when computed while it was read."""
    as_read = frame  # the rows as the file gives them (for the converter and the quarantine)
    frame = frame.with_columns(pl.lit(None, pl.String).alias(c) for c in optional if c not in frame.columns)
    if fmt in ROW_CONVERTED:  # every row is the reference converter's
        candidate = pl.repeat(True, frame.height, dtype=pl.Boolean, eager=True)
    else:
        candidate = frame.select(_candidates(frame.schema, fmt, id_column, max_text_bytes)).to_series()
    if fmt == "hh-rlhf":
        texts, refused = _split_hh(frame, candidate)
        candidate = candidate | refused
    else:
        texts = frame.select(pl.col(c).cast(pl.String) for c in TEXT)
    convert = CONVERTERS[fmt]
    quarantine: list[dict[str, Any]] = []
    accepted: list[dict[str, Any]] = []
    by_rows = {row.number: row.data for row in read_by_rows or ()}
    as_given = as_written if jsonl else dict

    def as_read_row(values: dict[str, Any]) -> RawRow:
        """A row of the frame as the file gave it."""
        number = values.pop("__row")
        return RawRow(number, originals[number] if originals is not None else as_given(values))

    for row in [*(read_by_rows or ()), *map(as_read_row, as_read.filter(candidate).to_dicts())]:
        if row.data is None:
            quarantine.append(quarantine_entry(path, row, row.error or "unreadable", row.detail))
            continue
        try:
            record = convert_row(row.data, convert, max_text_bytes).record
        except RowRejected as rejected:
            quarantine.append(quarantine_entry(path, row, rejected.reason, rejected.detail))
            continue
        accepted.append({"__row": row.number, **record})

    # Ids for every row (candidates too: cheaper than a second copy of the text), then one filter.
    prompt_ids, pair_ids = ids_ahead.take(frame["__row"]) if ids_ahead is not None else _ids(texts)
    kept = frame.select(
        "__row",
        (pl.col(id_column).cast(pl.String) if id_column else pl.lit(None, pl.String)).alias("id"),
        pair_id=pair_ids, prompt_id=prompt_ids,
        **{c: texts[c] for c in TEXT},
        **{c: (_text_score(c) if frame.schema[c] == pl.String else pl.col(c).cast(pl.Float64)).fill_nan(None)
           if c in SCORE_COLUMNS else texts[c] if c in texts.columns else pl.col(c).cast(pl.String)
           for c in optional},
    )
    del prompt_ids, pair_ids, texts
    if candidate.any():
        kept = kept.filter(~candidate)
    if accepted:  # candidates the reference kept: its records, in their place
        extra = pl.DataFrame({c: [r.get(c) for r in accepted] for c in kept.columns}, schema=kept.schema)
        kept = pl.concat([kept, extra]).sort("__row")

    with_id = kept["id"].is_not_null()
    mode = "source" if with_id.all() else "content" if not with_id.any() else "mixed"
    if not kept.height:
        mode = earlier.mode or mode
    if kept.height and earlier.mode is not None and mode != earlier.mode or mode == "mixed":
        raise MixedIds(f"{path}: some rows have an id and some have not")
    if kept.height:
        earlier.mode = mode
    if mode == "source":
        kept, conflicting = _source_id_conflicts(kept, earlier)
        for number, row_id in conflicting:
            data = by_rows.get(number) or as_read_row(as_read.row(as_read["__row"].search_sorted(number), named=True)).data
            quarantine.append(quarantine_entry(path, RawRow(number, data), "duplicate_id_conflict",
                                                f"id {row_id!r} already used for other content"))
    else:
        kept = _numbered_content_ids(kept, earlier)

    if present is None:
        present = [c for c in optional if kept[c].is_not_null().any() or c in SCORE_COLUMNS and (
            not jsonl or _written(c, frame.filter(~candidate), accepted))] if kept.height else []
    quarantine.sort(key=lambda q: q["row"])
    return kept.select(*PAIR_COLUMNS, *present), quarantine


def _written(column: str, frame: pl.DataFrame, accepted: list[dict[str, Any]]) -> bool:
    """Some kept row of a JSON Lines batch has the key: a value, a key written as null (its mark),
    or a key of a row the reference converter kept."""
    mark = EXPLICIT_NULL + column
    in_frame = column in frame.columns and (frame[column].is_not_null().any() or (
        mark in frame.columns and frame[mark].fill_null(False).any()))
    return in_frame or any(column in record for record in accepted)


def _content_hash(frame: pl.DataFrame) -> pl.DataFrame:
    """Two 64-bit hashes of each row's (prompt, chosen, rejected): equal texts, equal hashes. Each
    text is hashed on its own and the three hashes together: a struct of the texts themselves would
    copy them (~2 GB more at peak for a batch of 1M realistic pairs)."""
    def row(seed: int) -> pl.Expr:
        return pl.struct(*(pl.col(c).hash(seed) for c in TEXT)).hash(seed)

    return frame.select("id", h1=row(1), h2=row(2))


def _source_id_conflicts(kept: pl.DataFrame, earlier: _Earlier) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    """An id used again for other content is quarantined; the first kept row with it wins (in this
    batch or an earlier one). Only rows whose id repeats can conflict: the window runs on those
    (usually few), not over a million one-row groups (~3 s at 1M pairs). Returns the rows kept and
    the (row number, id) of the conflicting ones."""
    conflict = kept["id"].is_duplicated()
    if conflict.any():
        reused = kept.filter(conflict)
        differs = reused.select(pl.any_horizontal([pl.col(c) != pl.col(c).first().over("id") for c in TEXT]))
        conflict = conflict.scatter(conflict.arg_true(), differs.to_series())
    if not earlier.carry:  # the only batch: nothing to compare with, nothing to pass on
        conflicting = kept.filter(conflict).select("__row", "id").rows() if conflict.any() else []
        return (kept.filter(~conflict) if conflicting else kept), conflicting
    hashes = _content_hash(kept)
    if earlier.first_content is not None:  # an id of an earlier batch: its first row there wins
        seen = hashes.join(earlier.first_content, on="id", how="left", suffix="_first", maintain_order="left")
        again = seen["h1_first"].is_not_null()
        conflict = (conflict & ~again) | (again & ((seen["h1"] != seen["h1_first"]) | (seen["h2"] != seen["h2_first"])))
    conflicting = kept.filter(conflict).select("__row", "id").rows() if conflict.any() else []
    if conflicting:
        kept, hashes = kept.filter(~conflict), hashes.filter(~conflict)
    firsts = hashes.unique("id", keep="first", maintain_order=True)
    earlier.first_content = firsts if earlier.first_content is None else pl.concat(
        [earlier.first_content, firsts.join(earlier.first_content, on="id", how="anti")])
    return kept, conflicting


def _numbered_content_ids(kept: pl.DataFrame, earlier: _Earlier) -> pl.DataFrame:
    """No source id: the content id, numbered on repeats in file order ("<pair_id>-2", ...),
    counting the repeats of earlier batches."""
    repeat = pl.int_range(pl.len()).over("pair_id")
    if earlier.repeats is not None:
        kept = kept.join(earlier.repeats, on="pair_id", how="left", maintain_order="left")
        repeat = repeat + pl.col("n").fill_null(0)
    kept = kept.with_columns(id=pl.when(repeat == 0).then("pair_id")
                             .otherwise(pl.col("pair_id") + "-" + (repeat + 1).cast(pl.String))).drop("n", strict=False)
    if not earlier.carry:
        return kept
    counts = kept.group_by("pair_id").agg(n=pl.len().cast(pl.Int64))
    earlier.repeats = counts if earlier.repeats is None else pl.concat([earlier.repeats, counts]).group_by(
        "pair_id").agg(pl.col("n").sum())
    return kept
