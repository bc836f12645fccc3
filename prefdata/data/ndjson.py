"""JSON Lines for the columnar import: a file's lines in batches, each parsed by polars, and the lines
polars could read differently from the row reader handed to the row reader itself.

The row reader (readers._jsonl_rows) is the reference. Polars reads a line differently when the line
is not UTF-8, holds a surrogate escape (the reference refuses a lone one), gives a key twice (polars
keeps one value, the reference refuses the row), gives a text field a non-text value (polars turns
5 into "5"), gives a score as text, or is not one JSON object (polars refuses the whole block). Each
is found by a cheap test that flags a superset of them (a line whose text merely quotes
`"prompt": 5` is flagged too, and read by the reference to the same result), so only flagged lines,
a few per thousand in real files, pay for the row reader.

Memory: the file is read a block at a time (BLOCK_BYTES); a line over `max_line_bytes` is never held
whole (a `row_too_large` row); a batch holds the parsed frames of its blocks, not their bytes.
"""

from __future__ import annotations

import io
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from prefdata.base.errors import UnusableInput
from prefdata.data.readers import BOM, RAW_TEXT_CHARS, RawRow, _jsonl_rows, _open_data

BLOCK_BYTES = 32 << 20  # read and parsed at a time
_SURROGATE_ESCAPES = (b"\\ud", b"\\uD")  # the row reader checks such lines for lone surrogates
_KEY_SEPARATOR = r'"\s*:'  # after every key; inside a text that quotes JSON too (a harmless flag)
_NULL_VALUE = r'"\s*:\s*null'
_ESCAPED_KEY = r'\\[^"]*"\s*:'  # a key written with an escape: the per-key tests below match keys as written


@dataclass
class _Oversized:
    """A line over the limit: its first bytes (for the quarantine file) and its size."""

    head: bytes
    size: int


def _corrupt(path: Path, exc: Exception) -> UnusableInput:
    return UnusableInput(f"{path}: corrupt gzip data ({exc})")


def count_lines(path: Path) -> int:
    """The file's physical lines, as the row reader numbers them (a last line without a newline
    counts): one pass of bytes.count."""
    lines, last = 0, b"\n"
    with _open_data(path) as handle:
        try:
            while block := handle.read(BLOCK_BYTES):
                lines += block.count(b"\n")
                last = block[-1:]
        except (OSError, EOFError, zlib.error) as exc:
            raise _corrupt(path, exc) from None
    return lines + (last != b"\n")


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


def _physical_lines(path: Path, max_line_bytes: int) -> Iterator[list[bytes | _Oversized]]:
    """The file's lines, about a block's worth at a time, without their newlines; a line over
    `max_line_bytes` is an _Oversized, never held whole."""
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
                parts = (carry + block).split(b"\n")
                carry = parts.pop()
                lines += [p if len(p) <= max_line_bytes else _Oversized(p[:RAW_TEXT_CHARS], len(p)) for p in parts]
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


def _read_with_polars(numbers: list[int], lines: list[bytes], joined: bytes | None = None
                      ) -> tuple[list[pl.DataFrame], list[int]]:
    """The lines as frames (`__row`: their numbers), and the numbers of the lines polars refuses,
    found by halving: one refused line fails its whole block, and real files have few. `joined`:
    the lines joined by newlines, when the caller has them."""
    if not lines:
        return [], []
    try:
        frame = pl.read_ndjson(io.BytesIO(joined if joined is not None else b"\n".join(lines)), infer_schema_length=None)
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


def _read_differently(frame: pl.DataFrame, lines: list[bytes], text_columns: tuple[str, ...],
                      score_columns: tuple[str, ...]) -> pl.Series:
    """True for each parsed line polars may have read differently from the row reader: the row
    path's rules for a value's type are Python's (a text must be a str, a score a number, another
    column's value becomes its str()), polars' are its column's."""
    texts = pl.Series(lines, dtype=pl.Binary).cast(pl.String)  # UTF-8: checked before parsing
    values = [c for c in frame.columns if c != "__row"]
    keys_read = frame.select(pl.sum_horizontal([pl.col(c).is_not_null() for c in values]) if values else pl.lit(0))
    # a key given twice: more keys written than values read (a text's `":` only adds flags)
    flags = texts.str.count_matches(_KEY_SEPARATOR) > keys_read.to_series() + texts.str.count_matches(_NULL_VALUE)
    flags = flags | texts.str.contains(_ESCAPED_KEY)
    for name in values:
        rule = _NOT_TEXT if name in text_columns else _NOT_NUMBER if name in score_columns else _NOT_INTEGER_OR_TEXT
        flags = flags | texts.str.contains(f'"{re.escape(name)}"' + rule)
    return flags


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


def _with_explicit_nulls(frame: pl.DataFrame, lines: list[bytes]) -> pl.DataFrame:
    """`__null:KEY` columns, True where a line wrote `"KEY": null`: a frame's null is an absent key
    otherwise. The row path keeps a score key written as null, and quarantines a row's keys as written."""
    nulls = [c for c in frame.columns if c != "__row" and frame[c].null_count()]
    if not nulls or not any(b"null" in line for line in lines):
        return frame
    texts = pl.Series(lines, dtype=pl.Binary).cast(pl.String)
    marks = {EXPLICIT_NULL + c: texts.str.contains(f'"{re.escape(c)}"' + r'\s*:\s*null') for c in nulls}
    return frame.with_columns(pl.Series(name, mark) for name, mark in marks.items() if mark.any())


_SPACE = tuple(b" \t\r\f\v")  # bytes.strip() removes these (and newlines): a line of them only is blank


def _parse_block(first: int, lines: list[bytes | _Oversized], max_line_bytes: int, text_columns: tuple[str, ...],
                 score_columns: tuple[str, ...]) -> tuple[pl.DataFrame, list[RawRow]]:
    """A block's lines (the first numbered `first`) -> a frame of those polars reads as the row
    reader would (`__row`: their numbers), and the row reader's rows for the other non-blank ones."""
    joined = None
    if not any(isinstance(line, _Oversized) or not line or line[0] in _SPACE for line in lines):
        joined = b"\n".join(lines)  # the usual block: no line is blank, over the limit or odd at its start
    if joined is not None and _SURROGATE_ESCAPES[0] not in joined and _SURROGATE_ESCAPES[1] not in joined:
        numbers, good, odd = list(range(first, first + len(lines))), lines, []
    else:
        joined, numbers, good, odd = None, [], [], []
        for offset, line in enumerate(lines):
            if isinstance(line, _Oversized) or _SURROGATE_ESCAPES[0] in line or _SURROGATE_ESCAPES[1] in line:
                odd.append(first + offset)
            elif line.strip():  # blank lines are not rows
                numbers.append(first + offset)
                good.append(line)
    try:
        (joined if joined is not None else b"\n".join(good)).decode("utf-8")
    except UnicodeDecodeError:  # the reference names the lines that are not UTF-8
        bad = set()
        for number, line in zip(numbers, good):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                bad.add(number)
        odd += bad
        joined, numbers, good = None, [n for n in numbers if n not in bad], [g for n, g in zip(numbers, good) if n not in bad]
    frames, refused = _read_with_polars(numbers, good, joined)
    odd += refused
    kept = []
    for frame in frames:
        at = numbers.index(frame["__row"][0])
        part = good[at:at + frame.height]
        flags = _read_differently(frame, part, text_columns, score_columns)
        frame = _with_explicit_nulls(frame, part)
        if flags.any():
            odd += frame.filter(flags)["__row"].to_list()
            frame = _unflagged_types(frame.filter(~flags), score_columns)
        kept.append(frame)
    rows = [_reference_row(n, lines[n - first], max_line_bytes) for n in sorted(odd)]
    frame = pl.concat(kept, how="diagonal_relaxed") if kept else pl.DataFrame(schema={"__row": pl.Int64})
    return frame, rows


def batches(path: Path, batch_lines: int, max_line_bytes: int, text_columns: tuple[str, ...],
            score_columns: tuple[str, ...]) -> Iterator[tuple[pl.DataFrame, list[RawRow]]]:
    """(frame, reference rows) for each `batch_lines` physical lines of the file, in order: as many
    batches as `count_lines` / batch_lines, rounded up. A batch's rows read are its frame's rows
    plus its reference rows."""
    first, boundary = 1, 1 + batch_lines  # the next line's number; the first line of the next batch
    frames: list[pl.DataFrame] = []
    rows: list[RawRow] = []
    for lines in _physical_lines(path, max_line_bytes):
        frame, block_rows = _parse_block(first, lines, max_line_bytes, text_columns, score_columns)
        first += len(lines)
        while first >= boundary:  # every line of this batch is read
            inside = frame["__row"] < boundary
            frames.append(frame.filter(inside))
            rows += [r for r in block_rows if r.number < boundary]
            yield _joined(frames), rows
            frame, block_rows = frame.filter(~inside), [r for r in block_rows if r.number >= boundary]
            frames, rows = [], []
            boundary += batch_lines
        frames.append(frame)
        rows += block_rows
    if first > boundary - batch_lines:  # the last batch, shorter
        yield _joined(frames), rows


def _joined(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One frame of a batch's parts; parts of different columns are aligned by name."""
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema={"__row": pl.Int64})
    return pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
