"""JSON files (an array of rows, `{"data": [...]}`, one object, JSON Lines saved as .json) for the
columnar import: the row reader's own rows, a batch at a time, and of each batch a frame of the rows
whose values the columnar converter reads as the row path does.

The rows come from readers.read_rows (a stream: a block of text and one row in memory), so their
numbers (the element of the array, from 1), the rows it cannot read (not an object, a key given
twice, too deep, over the limit) and a broken document's one line are the row path's by
construction. A row goes into the frame only when every value the converter reads is one the frame
holds as the row path reads it: text where a text belongs, a number (not a bool) for a score, a
scalar for an id or an optional column (held as the text the converter makes of it, `str(5)`).
Every other row (a number where a text belongs, a score written as text, a list, an object, a long
text in a column the frame does not hold) stays a row, and the reference converter gives its record
or its reason in its place. The batch's rows as the reader gave them (`originals`) are what the
reference converts and the quarantine shows: the frame's values are for the vectorised checks and
ids only.

Memory: a batch's rows and its frame. A file's batches are counted first (`survey`: one pass of the
row reader, which keeps the rows when the file is a single batch, so such a file is parsed once).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.data.formats import SCORE_COLUMNS, optional_text, source_id
from prefdata.data.ndjson import EXPLICIT_NULL
from prefdata.data.readers import RawRow, read_rows
from prefdata.data.records import OPTIONAL_COLUMNS

TEXT_ONLY = ("prompt", "chosen", "rejected", "split")  # a value other than text (or null) is the converter's to refuse
ID_KEYS = ("id", "idx")
# optional columns the frame holds as the converter's text of a scalar (prompt_messages is trl-chat's, made, not read)
AS_TEXT = tuple(c for c in OPTIONAL_COLUMNS if c not in SCORE_COLUMNS and c not in TEXT_ONLY and c != "prompt_messages")


@dataclass
class Survey:
    """One pass over a JSON file's rows: the last row's number, the keys rows give, the columns a kept
    row could carry (a score's key, any other key with a value: the row path's rule), and the rows
    themselves when they fit in one batch."""

    last: int = 0
    keys: set[str] = field(default_factory=set)
    given: set[str] = field(default_factory=set)
    rows: list[RawRow] | None = field(default_factory=list)


def survey(path: Path, max_row_bytes: int, batch_rows: int) -> Survey:
    """The file's rows, read once: what a batched import needs before its first batch (how many
    batches; of several, the columns every one of them gets). The rows are kept while their numbers
    stay within one batch, and let go at the first one past it."""
    found = Survey()
    for row in read_rows(path, max_row_bytes):
        found.last = row.number
        if row.data is not None:
            found.keys.update(row.data)
            found.given.update(k for k, v in row.data.items() if v is not None or k in SCORE_COLUMNS)
        if found.rows is not None:
            if row.number <= batch_rows:
                found.rows.append(row)
            else:
                found.rows = None
    return found


def _fits(data: dict[str, Any], max_text_bytes: int) -> bool:
    """True when the frame holds every value of the row the converter reads as the converter reads
    it; False sends the row to the converter itself (which also finds the texts over the limit in
    the columns the frame leaves out: any list, or a long text)."""
    for key, value in data.items():
        if value is None:
            continue
        if key in TEXT_ONLY:
            fits = isinstance(value, str)
        elif key in SCORE_COLUMNS:
            fits = isinstance(value, (int, float)) and not isinstance(value, bool) and _as_float(value) is not None
        elif key in ID_KEYS or key in AS_TEXT:
            fits = isinstance(value, (str, int, float, bool))
        else:  # a column no converter reads: only the size limit (rows._too_large) looks at it
            fits = not isinstance(value, list) and not (isinstance(value, str) and len(value) > max_text_bytes // 4)
        if not fits:
            return False
    return True


def _as_float(value: int | float) -> float | None:
    try:
        return float(value)  # formats.parse_score's own conversion
    except OverflowError:  # an integer too big for a float: the converter's to say
        return None


def split(rows: Iterable[RawRow], max_text_bytes: int) -> tuple[list[RawRow], list[RawRow]]:
    """A batch's rows: those the frame holds, and the others (unreadable, or values it does not hold)."""
    framed, others = [], []
    for row in rows:
        (framed if row.data is not None and _fits(row.data, max_text_bytes) else others).append(row)
    return framed, others


def frame(rows: list[RawRow]) -> pl.DataFrame:
    """The rows `split` frames, as the columnar converter takes them: `__row`, the texts, an `id`
    (formats.source_id: `id`, else `idx`, blank as none), the optional columns the rows give (scores
    as floats, `__null:<score>` where a row wrote the score's key as null; the others as the
    converter's text of their value)."""
    given = set().union(*(row.data for row in rows))
    texts = [c for c in TEXT_ONLY if c != "split" or c in given]  # prompt, chosen, rejected always
    scores = [c for c in SCORE_COLUMNS if c in given]
    others = [c for c in AS_TEXT if c in given]
    columns: dict[str, list[Any]] = {"__row": [row.number for row in rows],
                                     "id": [source_id(row.data) for row in rows]}
    for name in texts:
        columns[name] = [row.data.get(name) for row in rows]
    for name in others:
        columns[name] = [None if (v := row.data.get(name)) is None else optional_text(v) for row in rows]
    for name in scores:
        columns[name] = [None if (v := row.data.get(name)) is None else float(v) for row in rows]
        written_null = [name in row.data and row.data[name] is None for row in rows]
        if any(written_null):  # a score key written as null is still a column of the pairs (the row path's)
            columns[EXPLICIT_NULL + name] = written_null
    schema = {name: pl.Int64 if name == "__row" else pl.Float64 if name in scores
              else pl.Boolean if name.startswith(EXPLICIT_NULL) else pl.String for name in columns}
    return pl.DataFrame(columns, schema=schema)
