"""One source row's checks, shared by the row-by-row import (prefdata.data.importer) and the columnar
one (prefdata.data.columnar): the file's format and columns, the size limit and conversion of a row, and
the quarantine entry of a row that cannot be used."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.base.errors import UnusableInput
from prefdata.data.formats import (CONVERTERS, FORMATS, SCORE_COLUMNS, Converted, RowRejected, detect_format,
                                   required_columns, source_id)
from prefdata.data.readers import RawRow
from prefdata.data.records import OPTIONAL_COLUMNS

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


CONTENT_FIELDS = ("prompt", "chosen", "rejected", "response_a", "response_b")  # what makes two rows the same


def record_content(record: dict[str, Any]) -> tuple:
    """The texts that make a row's content: a source id used again must come with the same ones."""
    return tuple(record.get(k) for k in CONTENT_FIELDS)


def content_digest(record: dict[str, Any]) -> bytes:
    """record_content as 16 bytes (BLAKE2b over each field's length and UTF-8, None marked apart from
    ""): what an import that must not hold every row's text keeps of it (a batched import)."""
    digest = hashlib.blake2b(digest_size=16)
    for value in record_content(record):
        if value is None:
            digest.update(b"\0")
        else:
            data = value.encode("utf-8", "surrogatepass")
            digest.update(b"\1" + len(data).to_bytes(8, "little") + data)
    return digest.digest()


def given_ids(rows: Iterable[RawRow]) -> set[str]:
    """Every source id the rows give (formats.source_id: `id`, or `idx`), whatever else is wrong with
    them: the ids a row without one must not be numbered onto (assign_id's `reserved`)."""
    return {i for row in rows if isinstance(row.data, dict) and (i := source_id(row.data)) is not None}


def assign_id(record: dict[str, Any], content_by_id: dict[str, Any],
              content: Callable[[dict[str, Any]], Any] = record_content,
              reserved: set[str] | frozenset[str] = frozenset()) -> None:
    """Give `record` its row id and note it in `content_by_id` (id -> content(record) of the rows so
    far); RowRejected when a source id is reused for other content.

    `reserved`: the source ids of the whole file (given_ids). A row without one takes its content id,
    numbered past every id taken so far *and* every reserved one, so a source id equal to another
    row's content id stays the source row's, whichever row comes first: the row without an id becomes
    "<content id>-2" in either order, both are kept, and the outcome does not depend on row order."""
    seen = content(record)
    if record["id"] is None:
        # No source id: the content id, numbered on repeats so rows (and their votes)
        # stay apart; re-importing the same file gives the same ids.
        record["id"] = record["pair_id"]
        repeat = 1
        while record["id"] in content_by_id or record["id"] in reserved:
            repeat += 1
            record["id"] = f"{record['pair_id']}-{repeat}"
    elif content_by_id.get(record["id"], seen) != seen:
        raise RowRejected("duplicate_id_conflict", f"id {record['id']!r} already used for other content")
    content_by_id[record["id"]] = seen


def convert_rows(path: Path, rows: Iterable[RawRow], convert: Callable[[dict[str, Any]], Converted],
                 max_text_bytes: int, content_by_id: dict[str, Any],
                 content: Callable[[dict[str, Any]], Any] = record_content,
                 reserved: set[str] | frozenset[str] = frozenset(),
                 ) -> tuple[list[Converted], list[dict[str, Any]]]:
    """Each row as its record with its id (assign_id, `content_by_id` carrying the rows before,
    `reserved` the file's source ids: given_ids), or its quarantine entry: the row-by-row import's
    loop, which a batched import runs a batch at a time."""
    converted: list[Converted] = []
    quarantine: list[dict[str, Any]] = []
    for row in rows:
        if row.data is None:
            quarantine.append(quarantine_entry(path, row, row.error or "unreadable", row.detail))
            continue
        try:
            item = convert_row(row.data, convert, max_text_bytes)
            assign_id(item.record, content_by_id, content, reserved)
        except RowRejected as rejected:
            quarantine.append(quarantine_entry(path, row, rejected.reason, rejected.detail))
            continue
        converted.append(item)
    return converted, quarantine


def records_frame(records: list[dict[str, Any]], leading: tuple[str, ...],
                  given: Iterable[str] | None = None) -> pl.DataFrame:
    """Records as a frame: the `leading` columns, then the optional ones some record has (or, when
    `given`, those named there: one schema for every batch of a file)."""
    present = set(given) if given is not None else {k for r in records for k in r}
    columns = list(leading) + [c for c in OPTIONAL_COLUMNS if c in present and c not in leading]
    return pl.DataFrame(
        {c: [r.get(c) for r in records] for c in columns},
        schema={c: pl.Float64 if c in SCORE_COLUMNS else pl.String for c in columns},
    )
