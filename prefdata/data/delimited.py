"""CSV and TSV for the columnar import: a file's records, a batch of lines at a time, as frames of text.

The records come from the row reader's own CSV reader (readers.csv_records: Python's csv module over
a decompressed stream, each record bounded), so quoting, newlines inside quoted fields, a BOM, blank
lines, every value as text and the row numbers are the row path's by construction; only records
the row path would quarantine (a wrong number of fields, text that is not UTF-8, a record over the
limit) leave the frame, as the row reader's rows. Polars' own CSV reader is ~8x faster (100k
realistic pairs: 0.18 s against 1.4 s) but reads some files otherwise (a quote inside an unquoted
field, a line ended by a lone "\\r", a field with a NUL), so it is not used: exact first.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from prefdata.data.readers import RawRow, _open_data, _stream_error, csv_header, csv_records, csv_row

BLOCK_BYTES = 32 << 20
CHUNK_ROWS = 20_000  # records held as Python lists before they become a frame


def count_lines(path: Path) -> int:
    """The file's physical lines as the CSV reader numbers them ("\\n", "\\r\\n" or a lone "\\r" ends
    one; a last line without a newline counts): one pass of bytearray.count, into one buffer
    (ndjson.count_lines)."""
    lines, last = 0, ord("\n")
    block = bytearray(BLOCK_BYTES)
    with _open_data(path) as handle:
        try:
            while read := handle.readinto(block):
                lines += block.count(b"\n", 0, read) + block.count(b"\r", 0, read) - block.count(b"\r\n", 0, read)
                if last == ord("\r") and block[0] == ord("\n"):
                    lines -= 1  # a "\r\n" cut in two by the blocks
                last = block[read - 1]
        except (OSError, EOFError, zlib.error) as exc:
            raise _stream_error(path, handle, exc) from None
    return lines + (last not in (ord("\n"), ord("\r")))


def batches(path: Path, delimiter: str, limit: int, batch_lines: int, n_batches: int
            ) -> Iterator[tuple[pl.DataFrame, list[RawRow]]]:
    """(frame, rows the row reader reads) for each `batch_lines` physical lines of the file (a record
    is in the batch of its first line), exactly `n_batches` of them (the last takes what is left).
    The frame has the header's columns as text and `__row`, the record's first line."""
    records = csv_records(path, delimiter, limit)
    header = csv_header(path, next(records)[1])  # the caller read the header already: it is usable
    width = len(header)
    boundary, made = 1 + batch_lines, 0
    numbers: list[int] = []
    fields: list[list[str]] = []
    frames: list[pl.DataFrame] = []
    odd: list[RawRow] = []
    for record in records:
        number = record.number if isinstance(record, RawRow) else record[0]
        while number >= boundary and made < n_batches - 1:
            yield _batch(header, frames, numbers, fields, odd, delimiter), odd
            numbers, fields, frames, odd, made, boundary = [], [], [], [], made + 1, boundary + batch_lines
        if isinstance(record, RawRow):
            odd.append(record)
        elif len(record[1]) == width:
            numbers.append(number)
            fields.append(record[1])
            if len(fields) == CHUNK_ROWS:  # Python's strings cost ~2x the text: into Arrow memory now
                frames.append(_frame(header, numbers, fields, odd, delimiter))
                numbers, fields = [], []
        else:
            odd.append(csv_row(number, record[1], header, delimiter))
    while made < n_batches:
        yield _batch(header, frames, numbers, fields, odd, delimiter), odd
        numbers, fields, frames, odd, made = [], [], [], [], made + 1


def _batch(header: list[str], frames: list[pl.DataFrame], numbers: list[int], fields: list[list[str]],
           odd: list[RawRow], delimiter: str) -> pl.DataFrame:
    frames.append(_frame(header, numbers, fields, odd, delimiter))
    odd.sort(key=lambda row: row.number)
    return pl.concat(frames) if len(frames) > 1 else frames[0]


def _frame(header: list[str], numbers: list[int], fields: list[list[str]], odd: list[RawRow],
           delimiter: str) -> pl.DataFrame:
    """The records as a frame of text columns; a record with text that is not UTF-8 (a lone
    surrogate, which polars cannot hold) goes to `odd` as the row reader's invalid_utf8 row."""
    try:
        return _columns(header, numbers, fields)
    except UnicodeEncodeError:  # rare: find the records, in this batch only
        bad = [i for i, row in enumerate(fields) if csv_row(numbers[i], row, header, delimiter).data is None]
        odd += [csv_row(numbers[i], fields[i], header, delimiter) for i in bad]
        skip = set(bad)
        keep = [i for i in range(len(fields)) if i not in skip]
        return _columns(header, [numbers[i] for i in keep], [fields[i] for i in keep])


def _columns(header: list[str], numbers: list[int], fields: list[list[str]]) -> pl.DataFrame:
    columns = list(zip(*fields)) if fields else [()] * len(header)
    frame = pl.DataFrame([pl.Series(name, column, dtype=pl.String) for name, column in zip(header, columns)])
    return frame.with_columns(pl.Series("__row", numbers, dtype=pl.Int64))
