"""One source row's checks, shared by the row-by-row import (prefdata.data.importer) and the columnar
one (prefdata.data.columnar): the file's format and columns, the size limit and conversion of a row, and
the quarantine entry of a row that cannot be used."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefdata.base.errors import UnusableInput
from prefdata.data.formats import CONVERTERS, FORMATS, Converted, RowRejected, detect_format, required_columns
from prefdata.data.readers import RawRow

QUARANTINE_RAW_CHARS = 2000  # raw values are cut in the quarantine file so it stays readable


def _cut(value: Any) -> Any:
    if isinstance(value, bytes):  # a Parquet binary column: shown, not lost, in a JSON file
        value = value.decode("utf-8", errors="backslashreplace")
    if isinstance(value, str) and len(value) > QUARANTINE_RAW_CHARS:
        return value[:QUARANTINE_RAW_CHARS] + f"... [{len(value)} chars]"
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v) for v in value[:50]]
    return value


def quarantine_entry(path: Path, row: RawRow, reason: str, detail: str) -> dict[str, Any]:
    return {"file": str(path), "row": row.number, "reason": reason, "detail": detail,
            "raw": _cut(row.data) if row.data is not None else row.text}


def _too_large(data: dict[str, Any], limit: int) -> str | None:
    for name, value in data.items():
        if isinstance(value, str) and len(value) > limit // 4 and len(value.encode("utf-8")) > limit:
            return name
        if isinstance(value, list) and sum(len(str(v)) for v in value) > limit:
            return name
    return None


def check_format(path: Path, fmt: str, columns: set[str], all_columns: set[str], sample: dict[str, Any]) -> str:
    """The format (detected from the first rows' columns and the first row when "auto"), once the
    file has the columns it needs; UnusableInput otherwise."""
    if fmt == "auto":
        try:
            fmt = detect_format(columns, sample)
        except ValueError as exc:
            raise UnusableInput(f"{path}: {exc}; pass --format with one of {', '.join(FORMATS[1:])}") from None
    elif fmt not in CONVERTERS:
        raise UnusableInput(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    for alternatives in required_columns(fmt):
        if not all_columns.intersection(alternatives):
            raise UnusableInput(
                f"{path}: missing column {' or '.join(repr(a) for a in alternatives)} "
                f"needed by format {fmt!r} (columns: {', '.join(sorted(all_columns))})"
            )
    return fmt


def convert_row(data: dict[str, Any], convert: Callable[[dict[str, Any]], Converted], max_text_bytes: int) -> Converted:
    """One parsed row as a record (its `id` None when the source has none); RowRejected says why not."""
    big = _too_large(data, max_text_bytes)
    if big:
        raise RowRejected(f"text_too_large:{big}", f"over {max_text_bytes} bytes (--max-text-bytes)")
    return convert(data)
