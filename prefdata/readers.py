"""Read rows from JSONL, JSON, CSV and Parquet files, gzipped or not.

Readers yield `RawRow`s and never raise for a bad row: a line that is not valid UTF-8 or not JSON
becomes a RawRow with an `error`, so the importer can quarantine it with its row number. Only a
file that cannot be used at all (missing, unreadable, unknown type, corrupt gzip) raises
UnusableInput.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefdata.errors import UnusableInput

GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"
_SURROGATE = re.compile("[\ud800-\udfff]")
KINDS = ("jsonl", "json", "csv", "tsv", "parquet")


@dataclass(frozen=True)
class RawRow:
    number: int  # 1-based: the line in JSONL, the element in a JSON array, the record in CSV/Parquet
    data: dict[str, Any] | None
    error: str | None = None  # a quarantine reason when the row could not be read
    detail: str = ""


def file_kind(path: Path, head: bytes) -> str:
    """The container type, from the extension (ignoring .gz) and, failing that, the first bytes."""
    suffixes = [s.lower() for s in path.suffixes if s.lower() not in (".gz", ".gzip")]
    ext = suffixes[-1].lstrip(".") if suffixes else ""
    if ext in ("jsonl", "ndjson"):
        return "jsonl"
    if ext in ("parquet", "pq"):
        return "parquet"
    if ext in KINDS:
        return ext
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    stripped = head.lstrip()
    if stripped.startswith(b"["):
        return "json"
    if stripped.startswith(b"{"):
        return "jsonl"
    raise UnusableInput(
        f"{path}: cannot tell the file type from its name or content; "
        "use one of .jsonl, .json, .csv, .tsv, .parquet (optionally .gz)"
    )


def read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UnusableInput(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UnusableInput(f"{path}: is a folder, not a file") from None
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot read it ({exc.strerror})") from None
    if raw.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise UnusableInput(f"{path}: corrupt gzip data ({exc})") from None
    return raw


def has_invalid_text(value: Any) -> bool:
    """True when a decoded value carries lone surrogates, i.e. bytes that were not valid UTF-8."""
    if isinstance(value, str):
        return bool(_SURROGATE.search(value))
    if isinstance(value, dict):
        return any(has_invalid_text(v) for v in value.values()) or any(has_invalid_text(k) for k in value)
    if isinstance(value, list):
        return any(has_invalid_text(v) for v in value)
    return False


def _object_row(number: int, value: Any, check_text: bool = True) -> RawRow:
    if not isinstance(value, dict):
        return RawRow(number, None, "not_an_object", f"got {type(value).__name__}")
    if check_text and has_invalid_text(value):
        return RawRow(number, None, "invalid_utf8", "a text field is not valid UTF-8")
    return RawRow(number, value)


def _jsonl_rows(raw: bytes) -> Iterator[RawRow]:
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue  # blank lines are not rows
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield RawRow(number, None, "invalid_utf8", f"byte {exc.start} of the line")
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            yield RawRow(number, None, "invalid_json", exc.msg)
            continue
        # strict decoding let no bad byte through; only a JSON escape can still make a lone surrogate
        yield _object_row(number, value, check_text="\\ud" in text or "\\uD" in text)


def _json_rows(path: Path, raw: bytes) -> Iterator[RawRow]:
    text = raw.decode("utf-8", errors="surrogateescape")  # bad bytes surface per row, below
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # JSON Lines saved as .json (datasets' to_json does this)
            yield from _jsonl_rows(raw)
            return
        raise UnusableInput(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list)]
        if len(lists) == 1:  # {"data": [...]} or {"rows": [...]}
            value = lists[0]
        else:
            value = [value]
    for number, item in enumerate(value, start=1):
        yield _object_row(number, item)


def _csv_rows(raw: bytes, delimiter: str) -> Iterator[RawRow]:
    text = raw.decode("utf-8-sig", errors="surrogateescape")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        return
    for number, fields in enumerate(reader, start=1):
        if not fields:
            continue
        if len(fields) != len(header):
            yield RawRow(number, None, "malformed_csv_row", f"{len(fields)} fields, header has {len(header)}")
            continue
        yield _object_row(number, dict(zip(header, fields)))


def _parquet_rows(path: Path, raw: bytes) -> Iterator[RawRow]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(raw))
    except (pa.ArrowException, OSError) as exc:
        raise UnusableInput(f"{path}: not a readable Parquet file ({exc})") from None
    for number, item in enumerate(table.to_pylist(), start=1):
        yield _object_row(number, item)


def read_rows(path: str | Path) -> Iterator[RawRow]:
    """Every row of a data file, in order, with its number; bad rows carry an error instead of data."""
    path = Path(path)
    raw = read_bytes(path)
    kind = file_kind(path, raw[:64])
    if kind == "jsonl":
        return _jsonl_rows(raw)
    if kind == "json":
        return _json_rows(path, raw)
    if kind in ("csv", "tsv"):
        return _csv_rows(raw, "\t" if kind == "tsv" else ",")
    return _parquet_rows(path, raw)
