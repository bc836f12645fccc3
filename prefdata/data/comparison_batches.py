"""The `comparisons` format a batch of rows at a time: the same comparisons, pairs, votes, ids and
quarantine as the row-by-row import (importer.import_rows, the reference), in the memory of a batch.

A comparison becomes a chosen/rejected pair only once its label is known, and its votes can be
anywhere in the input: in its own row's wide vote columns, in the rows further on that give the same
source id with the same content (the row path pools the votes of one id), in a `--votes` file keyed
by the ids the whole file gives, and, with `--aggregate dawid-skene`, in every other vote (each
annotator's weight is estimated from all of them). So the import takes two passes:

1. each batch of rows goes through the row path's own loop (rows.convert_rows: the row reader's
   rows, formats.from_comparison, the id rules), with a 16-byte digest of each id's content carried
   from batch to batch instead of its text; the kept comparisons go to a JSON Lines file in a
   scratch folder (SpilledComparisons). What stays in memory has no text: each row's id, its own
   label and which optional fields it has, and the votes;
2. once every row and the --votes file are read, the labels are made from all the votes at once
   (formats.vote_label_frame: the row path's rule), and each batch of comparisons is read back,
   labelled and resolved into pairs (formats.resolve), one batch at a time, every batch with the
   columns the row path's frames have for the whole file.

A file of one batch needs no second pass: its records go to importer._finish as the row path's do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.base.errors import UnusableInput
from prefdata.data.formats import from_comparison, resolve, vote_label_frame
from prefdata.data.readers import (ROW_BYTES_PER_TEXT_BYTE, RawRow, parquet_problem, parquet_rows_in_batches,
                                   read_rows, rows_in_batches)
from prefdata.data.records import COMPARISON_COLUMNS, OPTIONAL_COLUMNS, PAIR_COLUMNS, VOTE_COLUMNS
from prefdata.data.rows import content_digest, convert_rows, given_ids, records_frame

TEXTS = ("prompt", "response_a", "response_b")  # what the checks never read of a comparison
VOTE_SCHEMA = {c: pl.String for c in VOTE_COLUMNS}
PARQUET_READ_ROWS = 10_000  # records pyarrow decodes at a time (a batch is made of several)


@dataclass
class ComparisonBatch:
    """A batch's kept comparisons (ids given, `label` as the file gives it), the votes of their wide
    vote columns (pair_id: the row's id) and its quarantine, in row order."""

    records: list[dict[str, Any]]
    votes: list[dict[str, str]]
    quarantine: list[dict[str, Any]]


@dataclass
class ComparisonBatches:
    """A comparisons file, `n_batches` batches of rows; `read` (rows read) is final once all are taken."""

    format: str
    read: int
    n_batches: int
    batches: Iterator[ComparisonBatch]


def comparison_batches(path: Path, parquet: bool, max_text_bytes: int, batch_rows: int,
                       lines: int, rows: list[RawRow] | None = None) -> ComparisonBatches:
    """A comparisons file of `lines` lines (Parquet: records; JSON: elements) in batches of `batch_rows`
    lines, read by the row reader (a plain Parquet file a few thousand records at a time). `rows`: the
    file's rows, when they are already read (a JSON file of one batch, read once to count them)."""
    n_batches = max(1, -(-lines // batch_rows))
    opened = ComparisonBatches("comparisons", 0, n_batches, iter(()))

    def source():
        return (rows if rows is not None else _parquet_rows(path, min(batch_rows, PARQUET_READ_ROWS)) if parquet
                else read_rows(path, ROW_BYTES_PER_TEXT_BYTE * max_text_bytes))

    def batches() -> Iterator[ComparisonBatch]:
        content_by_id: dict[str, bytes] = {}  # every kept id so far -> its content's digest
        # the whole file's source ids first (one more read when the rows are not in memory already): a row
        # without an id is never numbered onto one, whichever comes first (rows.assign_id)
        reserved = given_ids(source())
        for batch in rows_in_batches(source(), batch_rows, n_batches):
            opened.read += len(batch)
            converted, quarantine = convert_rows(path, batch, from_comparison, max_text_bytes, content_by_id,
                                                 content_digest, reserved)
            votes = [{"pair_id": c.record["id"], "annotator": a, "vote": v} for c in converted for a, v in c.votes]
            yield ComparisonBatch([c.record for c in converted], votes, quarantine)

    opened.batches = batches()
    return opened


def _parquet_rows(path: Path, read_rows_at_a_time: int):
    """readers.parquet_rows_in_batches, a damaged file named as the row path names it."""
    import pyarrow as pa

    try:
        yield from parquet_rows_in_batches(path, read_rows_at_a_time)
    except (pa.ArrowException, OSError) as exc:
        raise UnusableInput(f"{path}: not a readable Parquet file: {parquet_problem(path, exc)}") from None


class SpilledComparisons:
    """A comparisons file's kept rows in `folder`, a JSON Lines file per batch (pass 1 of the module
    docstring); `label` makes the labels from every vote, `shards` gives the batches back labelled and
    resolved (pass 2). In memory meanwhile: `index` (id, the file's label, which optional fields the
    row has), the votes and the quarantine."""

    def __init__(self, opened: ComparisonBatches, folder: Path):
        self.format = opened.format
        self.files: list[Path] = []
        self.quarantine: list[dict[str, Any]] = []
        fields: dict[tuple[str, ...], int] = {}  # each set of optional fields a row has -> its number
        index, votes = [], []
        for k, batch in enumerate(opened.batches):
            self.files.append(folder / f"comparisons-{k:05d}.jsonl")
            with self.files[-1].open("w", encoding="utf-8") as out:
                # json.dumps escapes every non-ASCII character, so any text (and every float) reads back as it was
                out.writelines(json.dumps(record) + "\n" for record in batch.records)
            index.append(pl.DataFrame(
                {"id": [r["id"] for r in batch.records], "label": [r["label"] for r in batch.records],
                 "fields": [fields.setdefault(tuple(c for c in OPTIONAL_COLUMNS if c in r), len(fields))
                            for r in batch.records]},
                schema={"id": pl.String, "label": pl.String, "fields": pl.UInt32}))
            votes.append(pl.DataFrame(batch.votes, schema=VOTE_SCHEMA))
            self.quarantine.extend(batch.quarantine)
            del batch  # before the next batch is read
        self.read = opened.read
        self.rows_quarantined = len(self.quarantine)  # the --votes file's rows come after
        self.index = pl.concat(index)
        self.row_votes = pl.concat(votes)
        self.fields = list(fields)
        self.comparison_columns = {c for given in self.fields for c in given}
        # set by `label`, which `shards` needs first
        self.votes: pl.DataFrame | None = None
        self.labels: pl.Series | None = None
        self.pair_columns: set[str] = set()

    def ids(self) -> set[str]:
        return set(self.index["id"].to_list())

    def label(self, file_votes: list[dict[str, str]], aggregate: str) -> None:
        """Every comparison's label, as importer._label_comparisons gives it: its votes decide (the rows'
        and `file_votes`, the --votes file's, aggregated by `aggregate`), a label column only counts
        for a comparison without votes. Then the pair columns: those of the comparisons that resolve."""
        self.votes = pl.concat([self.row_votes, pl.DataFrame(file_votes, schema=VOTE_SCHEMA)])
        voted = vote_label_frame(self.votes, aggregate).select(
            pl.col("pair_id").alias("id"), pl.col("label").alias("voted"), pl.lit(True).alias("has_votes"))
        labelled = self.index.join(voted, on="id", how="left", maintain_order="left").select(
            "fields", label=pl.when(pl.col("has_votes")).then("voted").otherwise("label"))
        self.labels = labelled["label"]
        # A pair has the keys `resolve` makes of its comparison's keys and label: one made-up
        # comparison per (fields, label) the file has gives the columns of the row path's frame.
        for given, label in labelled.filter(pl.col("label").is_in(["a", "b"])).unique().iter_rows():
            example = {**dict.fromkeys(self.fields[given], ""), "response_a": "", "response_b": "", "label": label}
            self.pair_columns.update(resolve(example))

    def shards(self) -> Iterator[tuple[pl.DataFrame, pl.DataFrame]]:
        """(pairs, comparisons) of each batch in file order, labelled and resolved as the row path does."""
        if self.labels is None:
            raise RuntimeError("SpilledComparisons.shards before label: the labels need every vote first")
        start = 0
        for file in self.files:
            with file.open(encoding="utf-8") as lines:
                records = [json.loads(line) for line in lines]
            file.unlink()
            for record, label in zip(records, self.labels.slice(start, len(records)).to_list()):
                record["label"] = label
            start += len(records)
            pairs = [pair for pair in map(resolve, records) if pair is not None]
            yield (records_frame(pairs, PAIR_COLUMNS, self.pair_columns),
                   records_frame(records, COMPARISON_COLUMNS, self.comparison_columns))
            del records, pairs
