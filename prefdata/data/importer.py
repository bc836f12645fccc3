"""Import a source file into canonical frames, quarantining every row that cannot be used.

Invariant, checked before returning: rows read = rows kept + rows quarantined (the same for votes).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from prefdata.data.columnar import BATCH_ROWS, FORMAT_ROWS, ColumnarBatches, MixedIds, convert_batches, convert_columnar
from prefdata.base import defaults
from prefdata.base.errors import UnusableInput
from prefdata.data.comparison_batches import TEXTS, ComparisonBatches, SpilledComparisons
from prefdata.data.formats import CONVERTERS, RowRejected, parse_vote, resolve, unresolved_reason, vote_labels
from prefdata.data.readers import ROW_BYTES_PER_TEXT_BYTE, RawRow, read_rows
from prefdata.data.records import COMPARISON_COLUMNS, PAIR_COLUMNS, VOTE_COLUMNS
from prefdata.data.rows import check_format, convert_rows, given_ids, quarantine_entry, records_frame

if TYPE_CHECKING:
    from prefdata.data.onto import Onto
    from prefdata.data.store import Store, Version

DEFAULT_MAX_TEXT_BYTES = defaults.MAX_TEXT_BYTES  # 1 MiB per text field (one home: prefdata.base.defaults)

Track = Callable[[Iterable[Any], str, int], Iterable[Any]]


@dataclass
class ImportResult:
    format: str
    pairs: pl.DataFrame
    comparisons: pl.DataFrame | None
    votes: pl.DataFrame | None
    quarantine: list[dict[str, Any]]
    read: int
    kept: int
    quarantined: int
    votes_read: int = 0
    votes_kept: int = 0
    votes_quarantined: int = 0
    sources: list[dict[str, Any]] = field(default_factory=list)
    row_by_row: str | None = None  # why the file was imported row by row, when it was (not in the summary)

    @property
    def unresolved(self) -> dict[str, int]:
        """Kept comparisons that did not become pairs, by reason (tie, no_majority)."""
        if self.comparisons is None:
            return {}
        reasons = Counter(unresolved_reason(r) for r in self.comparisons.iter_rows(named=True))
        reasons.pop(None, None)
        return dict(reasons.most_common())

    @property
    def reasons(self) -> dict[str, int]:
        return dict(Counter(q["reason"] for q in self.quarantine).most_common())

    def summary(self) -> dict[str, Any]:
        summary = {
            "format": self.format,
            "read": self.read,
            "kept": self.kept,
            "quarantined": self.quarantined,
            "pairs": self.pairs.height,
            "unresolved": self.unresolved,
            "reasons": self.reasons,
        }
        if self.votes_read:
            summary.update(votes_read=self.votes_read, votes_kept=self.votes_kept,
                           votes_quarantined=self.votes_quarantined)
        return summary


def _sha256(path: Path) -> str:
    """The file's sha256 for the lineage: the one `hash_ahead` computed, if it is of this very
    file (same size and mtime), else computed now."""
    ahead = _AHEAD.pop(str(path), None)
    if ahead is not None:
        thread, stamp, digest = ahead
        thread.join()
        if digest and stamp == _stamp(path):
            return digest[0]
    return _sha256_now(path)


def _sha256_now(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# Files whose sha256 a thread is computing while the import reads them: hashlib and file reads
# release the GIL, so the lineage's digest (1 s a 1.4 GB file) costs the second core's time while
# the first counts and parses lines, not wall time after the import.
_AHEAD: dict[str, tuple[Any, tuple[int, int] | None, list[str]]] = {}


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def hash_ahead(path: Path) -> None:
    """Start the sha256 of a regular file in a daemon thread (never /dev/zero or a pipe, which never
    end; a daemon, so that an import that stops on bad input exits without waiting for it)."""
    import threading

    if not path.is_file() or str(path) in _AHEAD:
        return
    digest: list[str] = []

    def run() -> None:
        try:
            digest.append(_sha256_now(path))
        except OSError:
            pass  # _sha256 computes it again, and says what is wrong

    thread = threading.Thread(target=run, name="prefdata-source-sha256", daemon=True)
    _AHEAD[str(path)] = (thread, _stamp(path), digest)
    thread.start()


def _looks_utf16(path: Path) -> bool:
    """A UTF-16 byte-order mark, or the NUL of every other byte that UTF-16 gives ASCII text."""
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
    except OSError:
        return False
    return head[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(head) >= 8 and head[1::2].count(0) >= len(head) // 4)


def _choose_format(path: Path, rows: list[RawRow], fmt: str) -> str:
    good = [r for r in rows if r.data is not None]
    if not good:
        why = Counter(r.error for r in rows).most_common(3)
        hint = ""
        if _looks_utf16(path):
            hint = "; it looks like UTF-16 text: save it as UTF-8 (e.g. `iconv -f UTF-16 -t UTF-8`)"
        raise UnusableInput(f"{path}: no readable rows ({len(rows)} rows, none parsed"
                            + "".join(f"; {reason} {n}" for reason, n in why) + f"){hint}")
    columns = set().union(*(r.data.keys() for r in good[:FORMAT_ROWS]))
    all_columns = set().union(*(r.data.keys() for r in good))
    return check_format(path, fmt, columns, all_columns, good[0].data)


def _read_votes(path: Path, known_ids: set[str], quarantine: list[dict[str, Any]]) -> tuple[list[dict], int]:
    """The long votes table: pair_id, annotator, vote. Returns kept votes and the rows read."""
    rows = list(read_rows(path))
    good = [r for r in rows if r.data is not None]
    columns = set().union(*(r.data.keys() for r in good)) if good else set()
    missing = [c for c in VOTE_COLUMNS if c not in columns]
    if missing:
        raise UnusableInput(f"{path}: votes table lacks column(s) {', '.join(missing)}; it needs pair_id, annotator, vote")
    kept: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        if row.data is None:
            quarantine.append(quarantine_entry(path, row, row.error or "unreadable", row.detail))
            continue
        try:
            pid, annotator = row.data.get("pair_id"), row.data.get("annotator")
            if pid is None or str(pid).strip() == "":
                raise RowRejected("missing_field:pair_id")
            if annotator is None or str(annotator).strip() == "":
                raise RowRejected("missing_field:annotator")
            vote = parse_vote(row.data.get("vote"))
            if vote is None:
                raise RowRejected("missing_field:vote")
            pid, annotator = str(pid), str(annotator)
            if pid not in known_ids:
                raise RowRejected("unknown_pair_id", f"{pid!r} is not an id in the data")
            previous = kept.get((pid, annotator))
            if previous is not None and previous["vote"] != vote:
                raise RowRejected("conflicting_vote", f"{annotator} voted {previous['vote']} and {vote} on {pid}")
            if previous is not None:
                raise RowRejected("duplicate_vote", f"{annotator} voted twice on {pid}")
        except RowRejected as rejected:
            quarantine.append(quarantine_entry(path, row, rejected.reason, rejected.detail))
            continue
        kept[(pid, annotator)] = {"pair_id": pid, "annotator": annotator, "vote": vote}
    return list(kept.values()), len(rows)


def import_file(
    src: str | Path,
    fmt: str = defaults.IMPORT_FORMAT,
    votes: str | Path | None = None,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    track: Track | None = None,
    columnar: bool = True,
    aggregate: str = "majority",
    opened: ColumnarBatches | ComparisonBatches | None = None,
) -> ImportResult:
    """Import a file. Parquet, JSON Lines, JSON, CSV and TSV go through the columnar path (prefdata.data.columnar:
    the same rows, ids, reasons and row numbers, in batches; `trl` and `hh-rlhf` at a small multiple
    of a plain read); every other file, or `columnar=False`, goes row by row, the reference the
    columnar path is tested against (`row_by_row` says why). `opened`: the file's batches as
    convert_batches opened them (none read yet), which spares a second pass over the file."""
    path = Path(src)
    why: list[str] = []
    hash_ahead(path)
    if columnar:
        done = convert_columnar(path, fmt, max_text_bytes, why, opened)
        if done is not None:
            return _finish(path, done.format, done.pairs, done.comparisons, done.votes, done.quarantine, done.read,
                           votes, aggregate)
    result = import_rows(path, fmt, votes, max_text_bytes, track, aggregate)
    result.row_by_row = why[0] if why else "asked for (columnar=False)"
    return result


def import_rows(
    src: str | Path,
    fmt: str = defaults.IMPORT_FORMAT,
    votes: str | Path | None = None,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    track: Track | None = None,
    aggregate: str = "majority",
) -> ImportResult:
    """The row-by-row import: every row through its format's converter, in order."""
    path = Path(src)
    rows = list(read_rows(path, ROW_BYTES_PER_TEXT_BYTE * max_text_bytes))
    fmt = _choose_format(path, rows, fmt)
    tracked = track(rows, f"importing {path.name}", len(rows)) if track else rows
    # the file's source ids reserved: a row without one is never numbered onto one (rows.assign_id), so
    # which row keeps an id does not depend on row order
    converted, quarantine = convert_rows(path, tracked, CONVERTERS[fmt], max_text_bytes, {}, reserved=given_ids(rows))
    pairs = records_frame([c.record for c in converted if c.kind == "pair"], PAIR_COLUMNS)
    comparisons = [c.record for c in converted if c.kind == "comparison"]
    vote_rows = [{"pair_id": c.record["id"], "annotator": a, "vote": v} for c in converted for a, v in c.votes]
    return _finish(path, fmt, pairs, comparisons, vote_rows, quarantine, len(rows), votes, aggregate)


def _label_comparisons(comparisons: list[dict[str, Any]], vote_rows: list[dict[str, Any]], aggregate: str) -> None:
    """Set each voted comparison's `label` from its votes (in place), aggregated by `aggregate`
    (formats.vote_labels). Votes decide; a label column only counts without votes."""
    labels = vote_labels(vote_rows, aggregate)
    for record in comparisons:
        if record["id"] in labels:
            record["label"] = labels[record["id"]]


def _finish(path: Path, fmt: str, pairs: pl.DataFrame, comparisons: list[dict[str, Any]],
            vote_rows: list[dict[str, Any]], quarantine: list[dict[str, Any]], read: int,
            votes: str | Path | None, aggregate: str = "majority") -> ImportResult:
    """Votes, majority labels and the counts, from the kept rows of either path."""
    data_quarantined = len(quarantine)
    votes_read = len(vote_rows)
    if votes is not None:
        known = set(pairs["id"].to_list()) | {c["id"] for c in comparisons}
        long_votes, votes_read_long = _read_votes(Path(votes), known, quarantine)
        vote_rows.extend(long_votes)
        votes_read += votes_read_long
    kept = pairs.height + len(comparisons)
    if comparisons:
        _label_comparisons(comparisons, vote_rows, aggregate)
        resolved = [p for p in map(resolve, comparisons) if p is not None]
        pairs = records_frame(pairs.to_dicts() + resolved, PAIR_COLUMNS)
    return _result(path, fmt, pairs, records_frame(comparisons, COMPARISON_COLUMNS) if comparisons else None,
                   records_frame(vote_rows, VOTE_COLUMNS) if vote_rows else None, quarantine, read, kept,
                   data_quarantined, votes_read, votes)


def _result(path: Path, fmt: str, pairs: pl.DataFrame, comparisons: pl.DataFrame | None, vote_frame: pl.DataFrame | None,
            quarantine: list[dict[str, Any]], read: int, kept: int, data_quarantined: int, votes_read: int,
            votes: str | Path | None) -> ImportResult:
    """The ImportResult of an import, once its counts reconcile: rows read = kept + quarantined,
    and the same for votes (the quarantine holds the data rows' entries first, then the --votes file's)."""
    if read != kept + data_quarantined:
        raise RuntimeError(f"import counts do not reconcile: read {read} != kept {kept} + quarantined {data_quarantined}")
    result = ImportResult(
        format=fmt,
        pairs=pairs,
        comparisons=comparisons,
        votes=vote_frame,
        quarantine=quarantine,
        read=read,
        kept=kept,
        quarantined=data_quarantined,
        votes_read=votes_read,
        votes_kept=vote_frame.height if vote_frame is not None else 0,
        votes_quarantined=len(quarantine) - data_quarantined,
        sources=[{"path": str(path), "sha256": _sha256(path), "role": "data", "format": fmt}]
        + ([{"path": str(votes), "sha256": _sha256(Path(votes)), "role": "votes"}] if votes else []),
    )
    if result.votes_read != result.votes_kept + result.votes_quarantined:
        raise RuntimeError(f"vote counts do not reconcile: {result.summary()}")
    return result


def version_tables(result: ImportResult) -> dict[str, dict[str, pl.DataFrame]]:
    """The tables a store version of this import holds."""
    from prefdata.data.store import tables_for

    return tables_for(result.pairs, result.comparisons, result.votes)


def require_kept(result: ImportResult, where: str = "") -> None:
    """An import that kept no row is the user's to fix, never an empty version: UnusableInput (exit 2)
    naming the source, the rows read and the commonest reasons."""
    if result.pairs.height or (result.comparisons is not None and result.comparisons.height):
        return
    source = result.sources[0]["path"] if result.sources else "the input"
    reasons = ", ".join(f"{reason} {n}" for reason, n in list(result.reasons.items())[:3]) or "none"
    raise UnusableInput(f"{source}: no row could be imported (read {result.read} = quarantined {result.quarantined}; "
                        f"reasons: {reasons}){where}: fix the rows, or check --format")


def import_to_store(result: ImportResult, name: str, store: Store, guidelines: str | None = None,
                    onto: Onto | None = None) -> Version:
    """An import as a draft version of `name`: its tables, quarantine and counts, and where it came
    from (the source files with their sha256, the format that read them). The same content imported
    again is the same version, its status kept. `onto`: the parent whose rows come first (a growing
    dataset, prefdata.data.onto)."""
    require_kept(result)
    lineage = {"parent": None, "sources": result.sources, "flow_run": None, "components": {"importer": result.format}}
    if onto is None:
        return store.create(name, version_tables(result), quarantine=result.quarantine, counts=result.summary(), lineage=lineage,
                            guidelines=guidelines)
    return store.create_sharded(name, [onto.tables(version_tables(result))],
                                lambda: ({}, result.quarantine, result.summary(), onto.lineage(lineage)),
                                guidelines=guidelines, onto=onto.parent)


def import_file_to_store(
    src: str | Path,
    name: str,
    store: Store,
    *,
    fmt: str = defaults.IMPORT_FORMAT,
    votes: str | Path | None = None,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    track: Track | None = None,
    aggregate: str = "majority",
    guidelines: str | None = None,
    batch_rows: int | None = None,
    onto: str | None = None,
) -> tuple[ImportResult, Version]:
    """`import_file`, then `import_to_store`; a file the columnar path takes, of more than one batch of rows
    (columnar.BATCH_ROWS) goes into the store a batch at a time, so its size is bounded by the disk,
    not by memory. The result of such a streamed import holds only the kept rows' ids in `pairs`:
    their text is in the version's shards (and its `comparisons` hold no text either).
    `batch_rows` (default BATCH_ROWS): rows per batch. `onto`: NAME@VERSION of this store whose rows
    the new draft holds before the file's (a growing dataset: prefdata.data.onto)."""
    from prefdata.data.onto import Onto, resolve

    path = Path(src)
    why: list[str] = []
    onto = resolve(store, name, onto) if onto is not None else None
    parent = Onto.open(store, onto) if onto is not None else None  # a parent that fails verify: before any read
    hash_ahead(path)
    opened = convert_batches(path, fmt, max_text_bytes, batch_rows or BATCH_ROWS, why)
    if isinstance(opened, ComparisonBatches) and opened.n_batches > 1:
        if parent is not None:
            raise UnusableInput(f"--onto: {path} is a comparisons file of more than one batch ({opened.n_batches}); "
                                "grow a version by comparisons files of at most --batch-rows rows, or import it as a "
                                "version of its own")
        return _import_comparisons_streamed(path, opened, name, store, votes, aggregate, guidelines)
    if opened is not None and opened.n_batches > 1:
        try:
            return _import_streamed(path, opened, name, store, votes, aggregate, guidelines, parent)
        except MixedIds as exc:  # ids on some rows only: the row path settles their collisions, in memory
            why.append(str(exc).removeprefix(f"{path}: "))
    result = import_file(path, fmt, votes, max_text_bytes, track, aggregate=aggregate, columnar=not why,
                         opened=opened if opened is not None and opened.n_batches == 1 else None)
    if why:
        result.row_by_row = why[0]
    return result, import_to_store(result, name, store, guidelines, parent)


def _import_streamed(path: Path, opened: ColumnarBatches, name: str, store: Store, votes: str | Path | None,
                     aggregate: str, guidelines: str | None, onto: Onto | None = None) -> tuple[ImportResult, Version]:
    from prefdata.data.store import tables_for

    ids: list[pl.Series] = []
    quarantine: list[dict[str, Any]] = []
    finished: list[ImportResult] = []

    def batches() -> Iterable[dict[str, dict[str, pl.DataFrame]]]:
        for kept, rejected in opened.batches:
            quarantine.extend(rejected)
            ids.append(kept["id"])  # as the file names them: --votes do
            tables = tables_for(kept) if onto is None else onto.tables(tables_for(kept))
            del kept  # before the next batch is read: one batch in memory at a time
            yield tables
            del tables

    def ending():
        kept_ids = pl.DataFrame({"id": pl.concat(ids)})
        result = _finish(path, opened.format, kept_ids, [], [], quarantine, opened.read, votes, aggregate)
        finished.append(result)
        if onto is None:
            return _last_tables(result)
        # --votes name the rows by their ids in the file, which a repeat of the parent's rows changed
        extra, quarantined, counts, lineage = _last_tables(result)
        return onto.tables(extra), quarantined, counts, onto.lineage(lineage)

    version = store.create_sharded(name, batches(), ending, n_batches=opened.n_batches, guidelines=guidelines,
                                   onto=onto.parent if onto is not None else None)
    return finished[0], version


def _last_tables(result: ImportResult):
    """What store.create_sharded's `ending` gives of a streamed import, once it kept a row: the votes
    table, the quarantine, the counts and the lineage."""
    require_kept(result)
    lineage = {"parent": None, "sources": result.sources, "flow_run": None, "components": {"importer": result.format}}
    extra = {"votes": {"train": result.votes}} if result.votes is not None else {}
    return extra, result.quarantine, result.summary(), lineage


def _spill_comparisons(opened: ComparisonBatches, folder: Path, votes: str | Path | None,
                       aggregate: str) -> tuple[SpilledComparisons, int]:
    """A comparisons file of several batches, its first pass (comparison_batches: each batch's kept
    comparisons to `folder`), the --votes file read against every kept id as the row path reads it,
    and the labels from all the votes: the spilled comparisons, and the --votes rows read."""
    spilled = SpilledComparisons(opened, folder)
    file_votes, file_votes_read = ([], 0) if votes is None else _read_votes(Path(votes), spilled.ids(), spilled.quarantine)
    spilled.label(file_votes, aggregate)
    return spilled, file_votes_read


def _comparisons_result(path: Path, spilled: SpilledComparisons, kept: list[tuple[pl.Series, pl.DataFrame]],
                        votes: str | Path | None, file_votes_read: int) -> ImportResult:
    """The ImportResult of a comparisons file imported in batches, from each batch's (pair ids,
    comparisons without their texts): `pairs` holds only the ids, `comparisons` every column the
    checks read (id, label, models...)."""
    comparisons = pl.concat([c for _, c in kept])
    return _result(path, spilled.format, pl.DataFrame({"id": pl.concat([ids for ids, _ in kept])}),
                   comparisons if comparisons.height else None, spilled.votes if spilled.votes.height else None,
                   spilled.quarantine, spilled.read, spilled.index.height, spilled.rows_quarantined,
                   spilled.row_votes.height + file_votes_read, votes)


def _import_comparisons_streamed(path: Path, opened: ComparisonBatches, name: str, store: Store,
                                 votes: str | Path | None, aggregate: str,
                                 guidelines: str | None) -> tuple[ImportResult, Version]:
    """A comparisons file of several batches into the store: every row first (the labels need every
    vote), then a shard of pairs and of comparisons per batch (comparison_batches' two passes)."""
    from prefdata.base.scratch import scratch
    from prefdata.data.store import tables_for

    kept: list[tuple[pl.Series, pl.DataFrame]] = []
    finished: list[ImportResult] = []
    with scratch("comparisons") as folder:
        spilled, file_votes_read = _spill_comparisons(opened, folder, votes, aggregate)

        def batches() -> Iterable[dict[str, dict[str, pl.DataFrame]]]:
            for pairs, comparisons in spilled.shards():
                kept.append((pairs["id"], comparisons.drop(TEXTS)))
                tables = tables_for(pairs, comparisons)
                del pairs, comparisons  # before the next batch is read back
                yield tables
                del tables

        def ending():
            finished.append(_comparisons_result(path, spilled, kept, votes, file_votes_read))
            return _last_tables(finished[0])

        version = store.create_sharded(name, batches(), ending, n_batches=len(spilled.files), guidelines=guidelines)
    return finished[0], version


def import_file_to_shards(
    src: str | Path,
    *,
    votes: str | Path | None = None,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    aggregate: str = "majority",
    batch_rows: int | None = None,
) -> tuple[ImportResult, list[str] | None]:
    """A file the columnar path takes, of more than one batch of rows, imported into temporary Parquet shards (one
    per batch, removed when the process exits) for a batched checklist run (checks/batched.py):
    the result (its `pairs` holds only the kept ids) and the shards' paths (the gate reads them
    with checks/shards.py's Shards).
    Any other file (one batch, or not one the columnar path takes) is imported in memory (import_file):
    its result, and None for the paths."""
    import shutil

    from prefdata.base.scratch import scratch_dir

    path = Path(src)
    hash_ahead(path)
    opened = convert_batches(path, "auto", max_text_bytes, batch_rows or BATCH_ROWS)
    if opened is None or opened.n_batches < 2:
        return import_file(path, votes=votes, max_text_bytes=max_text_bytes, aggregate=aggregate, opened=opened), None
    folder = scratch_dir("shards")  # removed at exit, on SIGTERM, or by the next run after a SIGKILL
    if isinstance(opened, ComparisonBatches):
        return _comparisons_to_shards(path, opened, folder, votes, aggregate, max_text_bytes)
    ids: list[pl.Series] = []
    quarantine: list[dict[str, Any]] = []
    paths: list[str] = []
    try:
        for k, (kept, rejected) in enumerate(opened.batches):
            ids.append(kept["id"])
            quarantine.extend(rejected)
            if kept.height:
                paths.append(str(folder / f"pairs-{k:05d}.parquet"))
                kept.write_parquet(paths[-1], compression="lz4")  # read back once or twice: fast, not small
            del kept  # before the next batch is read
    except MixedIds:
        paths = []
    if not paths:  # ids on some rows only, or nothing kept: the in-memory import says what happened
        shutil.rmtree(folder, True)
        return import_file(path, votes=votes, max_text_bytes=max_text_bytes, aggregate=aggregate), None
    result = _finish(path, opened.format, pl.DataFrame({"id": pl.concat(ids)}), [], [], quarantine, opened.read,
                     votes, aggregate)
    return result, paths


def _comparisons_to_shards(path: Path, opened: ComparisonBatches, folder: Path, votes: str | Path | None,
                           aggregate: str, max_text_bytes: int) -> tuple[ImportResult, list[str] | None]:
    """import_file_to_shards of a comparisons file: a shard of the pairs of each batch that resolves
    some; the result's `comparisons` (no texts) go to the checks that read labels and models."""
    import shutil

    spilled, file_votes_read = _spill_comparisons(opened, folder, votes, aggregate)
    kept: list[tuple[pl.Series, pl.DataFrame]] = []
    paths: list[str] = []
    for k, (pairs, comparisons) in enumerate(spilled.shards()):
        kept.append((pairs["id"], comparisons.drop(TEXTS)))
        if pairs.height:
            paths.append(str(folder / f"pairs-{k:05d}.parquet"))
            pairs.write_parquet(paths[-1], compression="lz4")
        del pairs, comparisons  # before the next batch is read back
    if not paths:  # no comparison became a pair: the in-memory import says what happened
        shutil.rmtree(folder, True)
        return import_file(path, votes=votes, max_text_bytes=max_text_bytes, aggregate=aggregate), None
    return _comparisons_result(path, spilled, kept, votes, file_votes_read), paths
