"""Columnar import: a Parquet file in the `trl` or `hh-rlhf` format, checked and given ids as whole
columns.

The row-by-row import (`importer.import_rows`) is the reference; this path gives the same kept
rows, ids, quarantine reasons and row numbers (tests/test_import_columnar.py runs both on the same
files), at a small multiple of `polars.read_parquet`. How:

- every check is first a vectorised *candidate* mask that is a superset of the rows it can reject
  (missing or non-text fields, a prompt with no visible ASCII character, chosen = rejected, a text
  over --max-text-bytes, an odd split, an infinite score, a blank id);
- only candidate rows (a few per thousand on real data) go through the reference converter, row by
  row, which gives each its exact reason and detail, or keeps it when the candidate was harmless;
- ids: records.normalise_series once per distinct text (in slices of ID_CHUNK rows), then sha256
  of the same length-prefixed parts as records._digest, fed straight from Arrow's buffers;
- hh-rlhf's prompt split (formats.split_hh) runs row by row: the format needs it;
- the cross-row rules (numbered repeats of a content id, an id reused for other content) are
  window expressions over the kept rows in file order.

Anything this path does not cover exactly returns None and the caller imports row by row: another
format, a gzipped or nested (list, struct) file, bool or float optional columns (their text form
is Python's), `model`/`policy`/`cmp_key` columns, or some rows with an id and some without.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.errors import UnusableInput
from prefdata.formats import CONVERTERS, SCORE_COLUMNS, RowRejected, split_hh
from prefdata.importer import _quarantine_entry, check_format, convert_row
from prefdata.readers import GZIP_MAGIC, RawRow, file_kind
from prefdata.records import OPTIONAL_COLUMNS, PAIR_COLUMNS, normalise_series

TEXT = ("prompt", "chosen", "rejected")
CONVERTERS_COVERED = ("trl", "hh-rlhf")
_VISIBLE_ASCII = "[!-~]"  # a text with one of these is not blank, whatever `str.strip` counts as space
ID_CHUNK = 100_000  # rows per slice when computing ids: bounds the normalised copies to ~250 MB
_SPLIT = r"^[A-Za-z0-9_]+$"  # formats._SPLIT; Python's `$` also allows a final "\n", so this is stricter


@dataclass
class ColumnarImport:
    """What importer._finish needs: the kept pairs (as importer._frame shapes them), the quarantine
    in row order, and the rows read."""

    format: str
    pairs: pl.DataFrame
    quarantine: list[dict[str, Any]]
    read: int


def _plain_parquet(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
        return not head.startswith(GZIP_MAGIC) and file_kind(path, head) == "parquet"
    except (OSError, UnusableInput):
        return False  # the row path says what is wrong with it


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
        if name in SCORE_COLUMNS:  # not Decimal: formats.parse_score refuses what is not int or float
            ok = dtype.is_integer() or dtype.is_float() or dtype == pl.Null
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
    if id_column and schema[id_column] == pl.String:
        flags.append(~pl.col(id_column).str.contains(_VISIBLE_ASCII))
    return pl.any_horizontal([f.fill_null(False) for f in flags])


def normalised(texts: pl.Series) -> pl.Series:
    """records.normalise_text of every value, computed once per distinct value."""
    distinct = texts.unique()
    table = pl.DataFrame({"v": distinct, "n": normalise_series(distinct)})
    return texts.to_frame("v").join(table, on="v", how="left", maintain_order="left")["n"]


def _part(texts: pl.Series) -> tuple[list[int], memoryview, memoryview]:
    """A text column as Arrow bytes: its offsets, its data, and each length as 8 little-endian bytes."""
    import numpy as np
    import pyarrow as pa

    data = texts.to_arrow(compat_level=pl.CompatLevel.oldest()).cast(pa.large_binary())
    if isinstance(data, pa.ChunkedArray):
        data = data.combine_chunks()
    offsets = np.frombuffer(data.buffers()[1], dtype=np.int64)[data.offset:data.offset + len(data) + 1]
    body = data.buffers()[2]
    return (offsets.tolist(), memoryview(body if body is not None else b""),
            memoryview(np.diff(offsets).astype("<u8").tobytes()))


def digests(*parts: pl.Series) -> pl.Series:
    """records._digest(*parts) row by row: sha256 over each part's UTF-8 length (8 bytes, little
    endian) and bytes, first 16 hex digits. Arrow holds the bytes; Python only feeds hashlib."""
    columns = [_part(p.fill_null("")) for p in parts]
    sha256 = hashlib.sha256
    out = []
    for i in range(len(parts[0])):
        h = sha256()
        for offsets, body, lengths in columns:
            h.update(lengths[8 * i:8 * i + 8])
            h.update(body[offsets[i]:offsets[i + 1]])
        out.append(h.hexdigest()[:16])
    return pl.Series(out, dtype=pl.String)


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
    hashes the current one (hashlib, with it).
    """
    from concurrent.futures import ThreadPoolExecutor

    prompt_ids, pair_ids = [], []
    starts = range(0, frame.height, ID_CHUNK)
    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = pool.submit(_normalised_chunk, frame.slice(0, ID_CHUNK))
        for start in starts:
            prompts, first, second = ahead.result()
            if start + ID_CHUNK < frame.height:
                ahead = pool.submit(_normalised_chunk, frame.slice(start + ID_CHUNK, ID_CHUNK))
            distinct = prompts.unique()
            table = pl.DataFrame({"n": distinct, "id": digests(distinct)})
            ids = prompts.to_frame("n").join(table, on="n", how="left", maintain_order="left")["id"]
            prompt_ids.append(ids)
            pair_ids.append(digests(ids, first, second))
    if not prompt_ids:
        return pl.Series([], dtype=pl.String), pl.Series([], dtype=pl.String)
    return pl.concat(prompt_ids), pl.concat(pair_ids)


def _split_hh(frame: pl.DataFrame, candidate: pl.Series) -> tuple[pl.DataFrame, pl.Series]:
    """formats.split_hh on every row that is not already a candidate: the prompt, chosen and
    rejected texts, and which rows the split refuses or leaves with identical responses (new
    candidates, for the reference to give their reason). Row by row: the format needs it."""
    texts: dict[str, list[str | None]] = {name: [] for name in TEXT}
    refused: list[bool] = []
    for chosen, rejected, skip in zip(frame["chosen"].to_list(), frame["rejected"].to_list(), candidate.to_list()):
        split = None
        if not skip:
            try:
                split = split_hh(chosen, rejected)
            except RowRejected:
                pass
        if split is None or split[1] == split[2]:
            refused.append(not skip)
            split = (None, None, None)
        else:
            refused.append(False)
        for name, text in zip(TEXT, split):
            texts[name].append(text)
    return pl.DataFrame(texts, schema={name: pl.String for name in TEXT}), pl.Series(refused, dtype=pl.Boolean)


def convert_columnar(path: Path, fmt: str, max_text_bytes: int) -> ColumnarImport | None:
    """The import of a plain Parquet `trl` or `hh-rlhf` file, or None when the row path must do it."""
    if not _plain_parquet(path):
        return None
    try:
        frame = pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError):
        return None  # the row path reads it with pyarrow and names the problem
    id_column = _supported(frame.schema)
    if id_column is None or frame.height == 0 or "__row" in frame.columns:
        return None
    columns = set(frame.columns)
    fmt = check_format(path, fmt, columns, columns, frame.row(0, named=True))
    if fmt not in CONVERTERS_COVERED:
        return None

    frame = frame.with_row_index("__row", offset=1)
    candidate = frame.select(_candidates(frame.schema, fmt, id_column, max_text_bytes)).to_series()
    if fmt == "hh-rlhf":
        texts, refused = _split_hh(frame, candidate)
        candidate = candidate | refused
    else:
        texts = frame.select(pl.col(c).cast(pl.String) for c in TEXT)
    convert = CONVERTERS[fmt]
    quarantine: list[dict[str, Any]] = []
    accepted: list[dict[str, Any]] = []
    for data in frame.filter(candidate).to_dicts():
        number = data.pop("__row")
        try:
            record = convert_row(data, convert, max_text_bytes).record
        except RowRejected as rejected:
            quarantine.append(_quarantine_entry(path, RawRow(number, data), rejected.reason, rejected.detail))
            continue
        accepted.append({"__row": number, **record})

    optional = [c for c in OPTIONAL_COLUMNS if c in columns and c != "prompt_messages"]
    # Ids for every row (candidates too: cheaper than a second copy of the text), then one filter.
    prompt_ids, pair_ids = _ids(texts)
    kept = frame.select(
        "__row",
        (pl.col(id_column).cast(pl.String) if id_column else pl.lit(None, pl.String)).alias("id"),
        pair_id=pair_ids, prompt_id=prompt_ids,
        **{c: texts[c] for c in TEXT},
        **{c: pl.col(c).cast(pl.Float64).fill_nan(None) if c in SCORE_COLUMNS else pl.col(c).cast(pl.String)
           for c in optional},
    )
    del prompt_ids, pair_ids, texts
    if candidate.any():
        kept = kept.filter(~candidate)
    if accepted:  # candidates the reference kept: its records, in their place
        extra = pl.DataFrame({c: [r.get(c) for r in accepted] for c in kept.columns}, schema=kept.schema)
        kept = pl.concat([kept, extra]).sort("__row")

    with_id = kept["id"].is_not_null()
    if with_id.all():
        # An id used again for other content is quarantined; the first kept row with it wins.
        conflict = kept.select(pl.any_horizontal([pl.col(c) != pl.col(c).first().over("id") for c in TEXT])).to_series()
        if conflict.any():
            for number, row_id in kept.filter(conflict).select("__row", "id").iter_rows():
                data = frame.row(number - 1, named=True)
                data.pop("__row")
                quarantine.append(_quarantine_entry(path, RawRow(number, data), "duplicate_id_conflict",
                                                    f"id {row_id!r} already used for other content"))
            kept = kept.filter(~conflict)
    elif not with_id.any():
        # No source id: the content id, numbered on repeats in file order ("<pair_id>-2", ...).
        repeat = pl.int_range(pl.len()).over("pair_id")
        kept = kept.with_columns(id=pl.when(repeat == 0).then("pair_id")
                                 .otherwise(pl.col("pair_id") + "-" + (repeat + 1).cast(pl.String)))
    else:
        return None  # some rows with an id and some without: the row path settles their collisions

    present = [c for c in optional if c in SCORE_COLUMNS or kept[c].is_not_null().any()] if kept.height else []
    quarantine.sort(key=lambda q: q["row"])
    return ColumnarImport(fmt, kept.select(*PAIR_COLUMNS, *present), quarantine, frame.height)
