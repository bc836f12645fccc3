"""JSON Lines for the columnar import: a file's lines in batches, each parsed by polars, and the lines
polars could read differently from the row reader handed to the row reader itself.

The row reader (readers._jsonl_rows) is the reference. Polars reads a line differently when the line
is not UTF-8, holds a surrogate escape (the reference refuses a lone one), gives a key twice (polars
keeps one value, the reference refuses the row), gives a text field a non-text value (polars turns
5 into "5"), gives a score as text, or is not one JSON object (polars refuses the whole block). Each
is found by a cheap test that flags a superset of them (a line whose text merely quotes
`"prompt": 5` is flagged too, and read by the reference to the same result), so only flagged lines,
a few per thousand in real files, pay for the row reader.

Speed: a block of plain lines (none blank, over the limit or starting with a space) is parsed as the
file holds it, never split into Python objects (Arrow splits it for the tests, polars parses it),
and with the columns polars inferred for the block before declared (_Declared): told its columns,
polars parses ~3x faster than when it infers them from every line. What a declaration cannot hold (a
value of another type, a key it does not name) sends the block back to inference; a column typed
differently in two blocks of a batch sends the minority's rows to the reference (_joined), so a
quarantined row shows its values as its line wrote them.

Memory: the file is read a block at a time (BLOCK_BYTES; one block ahead, to know where it ends);
a line over `max_line_bytes` is never held whole (a `row_too_large` row); a batch holds the parsed
frames of its blocks, not their bytes.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.base.errors import UnusableInput
from prefdata.data.readers import BOM, RAW_TEXT_CHARS, RawRow, _jsonl_rows, _open_data

BLOCK_BYTES = 32 << 20  # read and parsed at a time
# a surrogate's escape (\ud800 to \udfff, either case): the row reader checks such lines for lone surrogates
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_KEY_SEPARATOR = r'"\s*:'  # after every key; inside a text that quotes JSON too (a harmless flag)
_NULL_VALUE = r'\s*:\s*null'  # after a key's closing quote
_ESCAPED_KEY = r'\\[^"]*"\s*:'  # a key written with an escape: the per-key tests below match keys as written


@dataclass
class _Oversized:
    """A line over the limit: its first bytes (for the quarantine file) and its size."""

    head: bytes
    size: int


def _corrupt(path: Path, exc: Exception) -> UnusableInput:
    """A compressed stream that breaks off: gzip's errors do not say what they are, zstd's
    (readers._Zstd) do."""
    return UnusableInput(f"{path}: {exc}" if str(exc).startswith("corrupt zstd") else f"{path}: corrupt gzip data ({exc})")


def count_lines(path: Path) -> int:
    """The file's physical lines, as the row reader numbers them (a last line without a newline
    counts): one pass of bytearray.count, into one buffer (a fresh block each read cost twice the
    time: 1.4 GB of new pages to fault in)."""
    lines, last = 0, ord("\n")
    block = bytearray(BLOCK_BYTES)
    with _open_data(path) as handle:
        try:
            while read := handle.readinto(block):
                lines += block.count(b"\n", 0, read)
                last = block[read - 1]
        except (OSError, EOFError, zlib.error) as exc:
            raise _corrupt(path, exc) from None
    return lines + (last != ord("\n"))


def columns_given(path: Path, optional_columns: tuple[str, ...], written_columns: tuple[str, ...]) -> set[str]:
    """The columns some row of the file gives: `written_columns` when a row has the key, the other
    `optional_columns` when a row gives it a value other than null (a superset: a text quoting
    `"split": "x"` counts too). A pass over the file's bytes: only a file of several batches needs it
    (their shards must have the same columns)."""
    found: set[str] = set()
    keys = {name: re.compile(rb'"' + re.escape(name.encode()) + rb'"\s*:' + (b"" if name in written_columns else rb"\s*[^n\s]"))
            for name in optional_columns}
    tail = b""  # the previous block's end: a key cut between two blocks is still found
    with _open_data(path) as handle:
        try:
            while len(found) < len(keys) and (block := handle.read(BLOCK_BYTES)):
                window = tail + block
                for name, key in keys.items():  # find() first: a key absent from the block costs one search
                    at = -1 if name in found else window.find(b'"' + name.encode() + b'"')
                    if at >= 0 and key.search(window, at):
                        found.add(name)
                tail = block[-256:]
        except (OSError, EOFError, zlib.error) as exc:
            raise _corrupt(path, exc) from None
    return found


@dataclass
class _Lines:
    """A run of whole lines as the file holds them, joined by newlines (no last newline): `count`
    lines, none over the limit, none blank or starting with a space (what the fast path needs)."""

    data: bytes
    count: int


def _plain_run(body: bytes, max_line_bytes: int) -> _Lines | None:
    """`body` (whole lines) as one _Lines, or None when a line is over the limit, blank, or starts
    with a space byte: those take the line-by-line path. Found from the newlines' positions with
    numpy, without splitting the block into Python objects."""
    import numpy as np

    if not body:
        return None
    newlines = np.flatnonzero(np.frombuffer(body, np.uint8) == 10)
    starts = np.concatenate(([0], newlines + 1))
    lengths = np.concatenate((newlines, [len(body)])) - starts
    if lengths.max() > max_line_bytes or not lengths.min():
        return None
    first_bytes = np.frombuffer(body, np.uint8)[starts]
    if np.isin(first_bytes, _SPACE).any():
        return None
    return _Lines(body, len(starts))


def _physical_lines(path: Path, max_line_bytes: int) -> Iterator[_Lines | list[bytes | _Oversized]]:
    """The file's lines, about a block's worth at a time, without their newlines: as one _Lines when
    the block's lines are plain, else as a list; a line over `max_line_bytes` is an _Oversized, never
    held whole."""
    carry = b""
    oversized: _Oversized | None = None
    first = True
    with _open_data(path) as handle:
        try:
            while block := handle.read(BLOCK_BYTES):
                if first:
                    block, first = block.removeprefix(BOM), False
                lines: list[bytes | _Oversized] = []
                if oversized is not None:  # inside a line already over the limit: skip to its end
                    end = block.find(b"\n")
                    if end < 0:
                        oversized.size += len(block)
                        continue
                    oversized.size += end
                    lines.append(oversized)
                    oversized, block = None, block[end + 1:]
                cut = block.rfind(b"\n")  # the lines before it are whole; one copy makes them a run
                body, carry = (carry + memoryview(block)[:cut], block[cut + 1:]) if cut >= 0 else (b"", carry + block)
                run = None if lines else _plain_run(body, max_line_bytes)
                if run is not None:
                    yield run
                elif cut >= 0:
                    lines += [p if len(p) <= max_line_bytes else _Oversized(p[:RAW_TEXT_CHARS], len(p))
                              for p in body.split(b"\n")]
                if len(carry) > max_line_bytes:
                    oversized, carry = _Oversized(carry[:RAW_TEXT_CHARS], len(carry)), b""
                if lines:
                    yield lines
        except (OSError, EOFError, zlib.error) as exc:
            raise _corrupt(path, exc) from None
    if oversized is not None:
        yield [oversized]
    elif carry:
        yield [carry]


def _reference_row(number: int, line: bytes | _Oversized, max_line_bytes: int) -> RawRow:
    """The row reader's row for one non-blank line."""
    item = (number, None, line.head, line.size) if isinstance(line, _Oversized) else (number, line, b"", len(line))
    return next(_jsonl_rows(iter([item]), max_line_bytes))


def _read_with_polars(numbers: list[int], lines: list[bytes]) -> tuple[list[pl.DataFrame], list[int]]:
    """The lines as frames (`__row`: their numbers), and the numbers of the lines polars refuses,
    found by halving: one refused line fails its whole block, and real files have few."""
    if not lines:
        return [], []
    try:
        frame = pl.read_ndjson(io.BytesIO(b"\n".join(lines)), infer_schema_length=None)
        if frame.height == len(lines):
            return [frame.with_columns(pl.Series("__row", numbers, pl.Int64))], []
    except (pl.exceptions.PolarsError, OverflowError):
        pass
    if len(lines) == 1:
        return [], numbers
    half = len(lines) // 2
    left, refused_left = _read_with_polars(numbers[:half], lines[:half])
    right, refused_right = _read_with_polars(numbers[half:], lines[half:])
    return left + right, refused_left + refused_right


_NOT_TEXT = r'\s*:\s*[^"\s]'  # a number, true, null or an object where a text belongs
_NOT_NUMBER = r'\s*:\s*["tf{\[]'  # a text, true/false, an object or a list where a score belongs
_NOT_INTEGER_OR_TEXT = r'\s*:\s*(?:t|f|\{|\[|-?\d+[.eE])'  # true/false, an object, a list, a fraction
# A value whose type the row reader keeps and a column of another type would not: a quarantined row
# shows its values as written (the row path's 7 and 5, not 7.0 and "5").
_INTEGER = r'\s*:\s*-?\d+\s*[,}]'
_NUMBER = r'\s*:\s*-?\d'


def _line_texts(lines: list[bytes] | bytes) -> pl.Series | None:
    """The lines as a text column (a list of lines, or lines joined by newlines, split by Arrow without
    a Python object per line), or None when one is not UTF-8."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(lines, bytes):
        # one value over the bytes as they are (no copy), built from buffers: pa.array([lines]) would
        # copy them, and import pandas (~0.3 s) to check what it was given
        offsets = pa.py_buffer(np.array([0, len(lines)], dtype=np.int64))
        whole = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(lines)])
        column = pl.from_arrow(pc.split_pattern(whole, b"\n").flatten())
    else:
        column = pl.Series(lines, dtype=pl.Binary)
    try:
        return column.cast(pl.String)
    except pl.exceptions.ComputeError:  # invalid utf8
        return None


def _read_differently(frame: pl.DataFrame, texts: pl.Series, text_columns: tuple[str, ...],
                      score_columns: tuple[str, ...]) -> pl.Series:
    """True for each parsed line (`texts`) polars may have read differently from the row reader: the
    row path's rules for a value's type are Python's (a text must be a str, a score a number, another
    column's value becomes its str()), polars' are its column's. One pass of one pattern per line
    for the types (the rules as alternatives), one for the keys."""
    values = [c for c in frame.columns if c != "__row"]
    rules: dict[str, list[str]] = {}
    for name in values:
        if name in text_columns:
            rule = _NOT_TEXT
        elif name in score_columns:  # and an integer a float column holds as a float (7 read as 7.0)
            rule = _NOT_NUMBER + ("|" + _INTEGER if frame.schema[name].is_float() else "")
        else:  # and a number a text column holds as text (5 read as "5")
            rule = _NOT_INTEGER_OR_TEXT + ("|" + _NUMBER if frame.schema[name] == pl.String else "")
        rules.setdefault(f"(?:{rule})", []).append(re.escape(name))
    odd_value = "|".join([_ESCAPED_KEY] + [f'"(?:{"|".join(names)})"' + rule for rule, names in rules.items()])
    line = pl.lit(texts)
    # one select: polars makes the passes over the lines on several threads at once (~30% faster)
    found = frame.select(
        # a key given twice: more keys written than values read (a text's `":` only adds flags);
        # nulls counted for the frame's own columns: a key polars was not told of, written as null, is flagged
        keys_read=pl.sum_horizontal([pl.col(c).is_not_null() for c in values]) if values else pl.lit(0),
        nulls=line.str.count_matches(f'"(?:{"|".join(map(re.escape, values))})"' + _NULL_VALUE) if values else pl.lit(0),
        keys_written=line.str.count_matches(_KEY_SEPARATOR),
        odd_value=line.str.contains(odd_value),
    )
    return (found["keys_written"] > found["keys_read"] + found["nulls"]) | found["odd_value"]


def _unflagged_types(frame: pl.DataFrame, score_columns: tuple[str, ...]) -> pl.DataFrame:
    """The columns' types once the flagged lines are out: a score column polars made text for one
    text score holds numbers again, a column of integers polars made float for one fraction holds
    integers, and a column left with nulls only is of no type (as polars reads one)."""
    casts = {}
    for name, dtype in frame.schema.items():
        if name == "__row":
            continue
        if frame[name].null_count() == frame.height:
            casts[name] = pl.Null
        elif name in score_columns and dtype == pl.String:
            casts[name] = pl.Float64
        elif name not in score_columns and dtype.is_float():
            casts[name] = pl.Int64
    return frame.with_columns(pl.col(name).cast(dtype) for name, dtype in casts.items()) if casts else frame


EXPLICIT_NULL = "__null:"  # a column prefix: True where the line wrote the key with null (not left it out)


def _with_explicit_nulls(frame: pl.DataFrame, texts: pl.Series) -> pl.DataFrame:
    """`__null:KEY` columns, True where a line wrote `"KEY": null`: a frame's null is an absent key
    otherwise. The row path keeps a score key written as null, and quarantines a row's keys as written."""
    nulls = [c for c in frame.columns if c != "__row" and frame[c].null_count()]
    if not nulls or not texts.str.contains("null", literal=True).any():
        return frame
    marks = {EXPLICIT_NULL + c: texts.str.contains(f'"{re.escape(c)}"' + r'\s*:\s*null') for c in nulls}
    return frame.with_columns(pl.Series(name, mark) for name, mark in marks.items() if mark.any())


_SPACE = tuple(b" \t\r\f\v")  # bytes.strip() removes these (and newlines): a line of them only is blank


def _checked(frame: pl.DataFrame, texts: pl.Series, text_columns: tuple[str, ...], score_columns: tuple[str, ...]
             ) -> tuple[pl.DataFrame, list[int]]:
    """A frame polars read from the lines `texts`: its rows polars read as the row reader would, and
    the numbers of the others (flagged by _read_differently)."""
    flags = _read_differently(frame, texts, text_columns, score_columns)
    frame = _with_explicit_nulls(frame, texts)
    if not flags.any():
        return frame, []
    return _unflagged_types(frame.filter(~flags), score_columns), frame.filter(flags)["__row"].to_list()


class _Declared:
    """The columns polars is told for a file's next block: the schema it inferred for the block before.
    Told the columns, polars parses a block ~3x faster than when it infers them from every line;
    what the declaration cannot hold (a value of another type, a key it does not name) sends the
    block back to inference, so a block's frame is what inference gives, as far as the rows go."""

    def __init__(self) -> None:
        self.schema: dict[str, pl.DataType] = {}

    def learn(self, frame: pl.DataFrame) -> None:
        """The columns of a frame polars inferred (a column of nulls only has no type to declare)."""
        self.schema = {c: d for c, d in frame.schema.items() if c != "__row" and d != pl.Null}

    def read(self, run: _Lines, texts: pl.Series) -> pl.DataFrame | None:
        """The run read with the declared columns, as inference would give it, or None when it cannot
        be: a value of another type, a line polars refuses, a key not declared (flagged later)."""
        if not self.schema:
            return None
        try:
            frame = pl.read_ndjson(io.BytesIO(run.data), schema=self.schema)
        except (pl.exceptions.PolarsError, OverflowError):
            return None
        if frame.height != run.count:
            return None
        # inference has a column only where some line wrote its key, of no type when only as null
        unwritten, only_null = [], []
        for name in (c for c in frame.columns if frame[c].null_count() == frame.height):
            written = texts.str.contains(f'"{re.escape(name)}"' + r"\s*:").any()
            (only_null if written else unwritten).append(name)
        return frame.drop(unwritten).with_columns(pl.col(c).cast(pl.Null) for c in only_null)


def _parse_run(first: int, run: _Lines, max_line_bytes: int, text_columns: tuple[str, ...],
               score_columns: tuple[str, ...], declared: _Declared) -> tuple[pl.DataFrame, list[RawRow]]:
    """_parse_block for a run of plain lines (the usual block), parsed as the file holds them: the
    lines become Python objects only when flagged, or when the run is not UTF-8, holds a surrogate
    escape or a line polars refuses (then _parse_block takes it line by line)."""
    texts = None
    if not _SURROGATE_ESCAPE.search(run.data):
        texts = _line_texts(run.data)
    if texts is None:
        return _parse_block(first, run.data.split(b"\n"), max_line_bytes, text_columns, score_columns)
    numbers = pl.int_range(first, first + run.count, dtype=pl.Int64).alias("__row")
    frame = declared.read(run, texts)
    if frame is not None:
        checked, odd = _checked(frame.with_columns(numbers), texts, text_columns, score_columns)
        rows = [_reference_row(n, texts[n - first].encode(), max_line_bytes) for n in odd]
        if all(row.data is None or row.data.keys() <= declared.schema.keys() for row in rows):
            return checked, rows
    try:  # a key the declaration did not name (its lines were flagged): inferred from every line
        frame = pl.read_ndjson(io.BytesIO(run.data), infer_schema_length=None)
    except (pl.exceptions.PolarsError, OverflowError):
        frame = None
    if frame is None or frame.height != run.count:
        return _parse_block(first, run.data.split(b"\n"), max_line_bytes, text_columns, score_columns)
    declared.learn(frame)
    frame, odd = _checked(frame.with_columns(numbers), texts, text_columns, score_columns)
    return frame, [_reference_row(n, texts[n - first].encode(), max_line_bytes) for n in odd]


def _parse_block(first: int, lines: list[bytes | _Oversized], max_line_bytes: int, text_columns: tuple[str, ...],
                 score_columns: tuple[str, ...]) -> tuple[pl.DataFrame, list[RawRow]]:
    """A block's lines (the first numbered `first`) -> a frame of those polars reads as the row
    reader would (`__row`: their numbers), and the row reader's rows for the other non-blank ones."""
    numbers, good, odd = [], [], []
    for offset, line in enumerate(lines):
        if isinstance(line, _Oversized) or _SURROGATE_ESCAPE.search(line):
            odd.append(first + offset)
        elif line.strip():  # blank lines are not rows
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:  # the reference names the lines that are not UTF-8
                odd.append(first + offset)
                continue
            numbers.append(first + offset)
            good.append(line)
    frames, refused = _read_with_polars(numbers, good)
    odd += refused
    kept = []
    for frame in frames:
        at = numbers.index(frame["__row"][0])
        frame, flagged = _checked(frame, _line_texts(good[at:at + frame.height]), text_columns, score_columns)
        odd += flagged
        kept.append(frame)
    rows = [_reference_row(n, lines[n - first], max_line_bytes) for n in sorted(odd)]
    frame = pl.concat(kept, how="diagonal_relaxed") if kept else pl.DataFrame(schema={"__row": pl.Int64})
    return frame, rows


@dataclass
class LinesRead:
    """What `batches` has read when it yields a batch: the file's physical lines so far (as
    count_lines numbers them) and whether the file ends there."""

    lines: int = 0
    ended: bool = False


_NO_BLOCK = object()


def _with_last(blocks: Iterator[Any]) -> Iterator[tuple[Any, bool]]:
    """(block, is it the last?) for each block: one block read ahead."""
    block = next(blocks, _NO_BLOCK)
    while block is not _NO_BLOCK:
        after = next(blocks, _NO_BLOCK)
        yield block, after is _NO_BLOCK
        block = after


def batches(path: Path, batch_lines: int, max_line_bytes: int, text_columns: tuple[str, ...],
            score_columns: tuple[str, ...], read: LinesRead | None = None,
            parsed: Callable[[pl.DataFrame], None] | None = None) -> Iterator[tuple[pl.DataFrame, list[RawRow]]]:
    """(frame, reference rows) for each `batch_lines` physical lines of the file, in order: as many
    batches as `count_lines` / batch_lines, rounded up. A batch's rows read are its frame's rows
    plus its reference rows. `read`, when given, says at each batch how many lines are read and
    whether the file ends with that batch (columnar: a file that ends in its first batch needs no
    line count). `parsed`, when given, is called with each block's frame as soon as it is parsed (the
    importer starts work on its rows while the next block parses)."""
    read = read if read is not None else LinesRead()
    first, boundary = 1, 1 + batch_lines  # the next line's number; the first line of the next batch
    frames: list[pl.DataFrame] = []
    rows: list[RawRow] = []
    declared = _Declared()
    for lines, last_block in _with_last(_physical_lines(path, max_line_bytes)):
        if isinstance(lines, _Lines):
            frame, block_rows = _parse_run(first, lines, max_line_bytes, text_columns, score_columns, declared)
            first += lines.count
        else:
            frame, block_rows = _parse_block(first, lines, max_line_bytes, text_columns, score_columns)
            first += len(lines)
        if parsed is not None and frame.height:
            parsed(frame)
        while first >= boundary:  # every line of this batch is read
            inside = frame["__row"] < boundary
            frames.append(frame.filter(inside))
            rows += [r for r in block_rows if r.number < boundary]
            read.lines, read.ended = boundary - 1, last_block and first == boundary
            yield _joined(frames, rows)
            frame, block_rows = frame.filter(~inside), [r for r in block_rows if r.number >= boundary]
            frames, rows = [], []
            boundary += batch_lines
        frames.append(frame)
        rows += block_rows
    read.lines, read.ended = first - 1, True
    if first > boundary - batch_lines:  # the last batch, shorter
        yield _joined(frames, rows)


def _joined(frames: list[pl.DataFrame], rows: list[RawRow]) -> tuple[pl.DataFrame, list[RawRow]]:
    """One frame of a batch's parts, aligned by column name, and its reference rows. A column polars
    typed differently in two parts (5 in one block, "x" in another) takes the type of most of its
    rows; concatenated, the others' values would change form (5 as "5", 7 as 7.0), so their rows
    join the reference rows, as read."""
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema={"__row": pl.Int64}), rows
    if len(frames) == 1:
        return frames[0], rows
    rows_by_type: dict[str, dict[pl.DataType, int]] = {}
    for frame in frames:
        for name, dtype in frame.schema.items():
            if dtype != pl.Null:
                counts = rows_by_type.setdefault(name, {})
                counts[dtype] = counts.get(dtype, 0) + frame.height
    parts = []
    for frame in frames:
        odd = [c for c, d in frame.schema.items() if d != pl.Null and len(rows_by_type[c]) > 1
               and d != max(rows_by_type[c], key=rows_by_type[c].get)]
        if odd:
            moved = pl.any_horizontal(pl.col(c).is_not_null() for c in odd)
            rows = rows + [RawRow(row.pop("__row"), as_written(row)) for row in frame.filter(moved).to_dicts()]
            frame = frame.filter(~moved).drop(odd)
        parts.append(frame)
    return pl.concat(parts, how="diagonal_relaxed"), rows


def as_written(row: dict[str, Any]) -> dict[str, Any]:
    """A row of a frame read here as its line gave it: a null is a key the line left out, unless the
    frame marks it written as null (EXPLICIT_NULL)."""
    written = {k[len(EXPLICIT_NULL):] for k, v in row.items() if k.startswith(EXPLICIT_NULL) and v}
    return {k: v for k, v in row.items() if not k.startswith("__") and (v is not None or k in written)}
