"""Row- and table-level rules on the pairs frame, run as a real Great Expectations 1.x suite.

One call builds an *ephemeral* GX context (nothing on disk except optional Data Docs), registers the
pairs frame as a pandas dataframe asset, and runs one Checkpoint over one ExpectationSuite. Each
expectation comes back as one CheckResult `gx.<rule>`:

    gx.not_null.<col>   id, prompt, chosen, rejected are never null
    gx.unique.id        no two rows share an id
    gx.length.<col>     prompt has 1..max_text_chars characters; chosen/rejected 0..max_text_chars
                        (an empty response is allowed here; the ratio rule below catches it)
    gx.length_ratio     longer/shorter response (chars) <= max_length_ratio
    gx.row_count        at least min_rows rows
    gx.category_set     every non-null category is in `categories` (only with both present)

metric is the share of rows that break the rule (GX's unexpected_percent / 100), except row_count
whose metric is the observed row count. threshold is the rule's own bound where it has one
(max_text_chars, max_length_ratio, min_rows), else None: every rule tolerates zero offending rows.
offending lists the distinct `id`s of the offending rows; details["n_offending"] counts rows.

GX validates pandas, not polars, and a pandas copy of a million pairs' text is ~1 GB and ~15 s.
So GX is handed numbers derived from the text in one vectorised polars pass, and validates those:

    <col>_chars   length in characters of id/prompt/chosen/rejected, null where the text is null
                  (not_null and length rules; a length is null exactly when its text is)
    id_key        dense rank of the id: equal exactly when the ids are equal (unique rule)
    length_ratio  longer / shorter response (length_ratio rule)
    category_code position of the category among the distinct categories (category rule, whose
                  value set is the codes of the allowed names)
    row           the row number, the frame's index too: GX reports offending rows by it, and they
                  are mapped back to ids here

Each rule flags exactly the rows the same rule on the text would (tests/test_gx_suite.py).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.checks.base import CheckResult, default
from prefdata.checks.frames import has_text, text_chars

CHECK_PREFIX = "gx"
DEFAULT_MAX_LENGTH_RATIO = default("gx", "max_length_ratio")  # set in checks/checklist.yaml: length_ratio's
DEFAULT_MIN_ROWS = default("gx", "min_rows")
DEFAULT_MAX_TEXT_CHARS = default("gx", "max_text_chars")
# Ratio for a pair with an empty side: "infinitely" lopsided, but a finite float so GX results,
# JSON and plots stay well-formed. Far above any real ratio (max_text_chars / 1 is ~1e6).
EMPTY_SIDE_RATIO = 1e9
REQUIRED_COLUMNS = ("id", "prompt", "chosen", "rejected")
_NULL_ID = "<null id>"


def length_ratios(pairs: pl.DataFrame) -> pl.Series:
    """Longer / shorter response length in characters per row; EMPTY_SIDE_RATIO when a side is empty,
    null when a side is null (the not-null rules report those)."""
    chosen, rejected = text_chars(pairs, "chosen"), text_chars(pairs, "rejected")
    longer, shorter = pl.max_horizontal(chosen, rejected), pl.min_horizontal(chosen, rejected)
    ratio = (
        pl.when(chosen.is_null() | rejected.is_null())
        .then(None)
        .when(shorter == 0)
        .then(pl.lit(EMPTY_SIDE_RATIO))
        .otherwise(longer.cast(pl.Float64) / shorter.cast(pl.Float64))
    )
    return pairs.select(ratio.cast(pl.Float64).alias("length_ratio")).to_series()


@contextlib.contextmanager
def _quiet_gx() -> Iterator[None]:
    """GX logs and warns freely (deprecations, 'ephemeral context' notes); the checklist speaks for it."""
    logger = logging.getLogger("great_expectations")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(previous)


def _category_codes(pairs: pl.DataFrame, categories: list[str]) -> tuple[pl.Expr, list[int]]:
    """The category column as integer codes (null stays null: GX skips nulls in value rules, as it
    does for text) and the codes of the allowed categories."""
    seen = pairs.get_column("category").cast(pl.String).drop_nulls().unique().sort().to_list()
    names = sorted(set(seen) | set(categories))
    code = pl.col("category").cast(pl.String).replace_strict(names, list(range(len(names))), default=None,
                                                               return_dtype=pl.Int32)
    return code.alias("category_code"), [names.index(c) for c in categories]


def _to_pandas(pairs: pl.DataFrame, category: pl.Expr | None) -> Any:
    """The numbers GX validates (see the module docstring), as a pandas frame indexed by row number.
    Only these cross the boundary: ~40 bytes a row instead of the text."""
    columns = [text_chars(pairs, c).alias(f"{c}_chars") for c in REQUIRED_COLUMNS]
    columns.append(pl.col("id").cast(pl.String).rank("dense").cast(pl.Int64).alias("id_key"))
    if category is not None:
        columns.append(category)
    frame = pairs.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"), *columns).with_columns(
        length_ratios(pairs))
    df = frame.to_pandas()
    # pandas has no nullable ints by default: a column with nulls becomes float (NaN), which GX
    # treats as missing, exactly as it treated the null text
    df.index = df["row"].to_numpy()
    df.index.name = "row"
    return df


def _suite(gx: Any, *, max_length_ratio: float, max_text_chars: int, min_rows: int,
           categories: list[str] | None) -> tuple[Any, dict[str, float | None]]:
    """The expectation suite, and each rule's threshold keyed by check id (stored in `meta`)."""
    gxe = gx.expectations
    rules: list[tuple[str, Any, float | None]] = []
    for col in REQUIRED_COLUMNS:
        rules.append((f"not_null.{col}", gxe.ExpectColumnValuesToNotBeNull(column=f"{col}_chars"), None))
    rules.append(("unique.id", gxe.ExpectColumnValuesToBeUnique(column="id_key"), None))
    for col, low in (("prompt", 1), ("chosen", 0), ("rejected", 0)):
        rule = gxe.ExpectColumnValuesToBeBetween(column=f"{col}_chars", min_value=low, max_value=max_text_chars)
        rules.append((f"length.{col}", rule, float(max_text_chars)))
    ratio = gxe.ExpectColumnValuesToBeBetween(column="length_ratio", max_value=max_length_ratio)
    rules.append(("length_ratio", ratio, float(max_length_ratio)))
    rules.append(("row_count", gxe.ExpectTableRowCountToBeBetween(min_value=min_rows), float(min_rows)))
    if categories is not None:  # here: the allowed categories' codes (_category_codes)
        in_set = gxe.ExpectColumnValuesToBeInSet(column="category_code", value_set=list(categories))
        rules.append(("category_set", in_set, None))

    suite = gx.ExpectationSuite(name="prefdata_pairs")
    thresholds: dict[str, float | None] = {}
    for name, expectation, threshold in rules:
        check_id = f"{CHECK_PREFIX}.{name}"
        expectation.meta = {"check_id": check_id}  # how a result finds its way back to its rule
        suite.add_expectation(expectation)
        thresholds[check_id] = threshold
    return suite, thresholds


def _offending_ids(index_list: list[dict[str, Any]] | None, ids: pl.Series) -> tuple[str, ...]:
    """The id of each offending row, from GX's unexpected_index_list (row numbers), in row order: one
    entry per row, so that the offending list (and its file) counts what n_offending counts (every
    copy of an id that `unique.id` finds repeated). With exclude_unexpected_values GX gives one dict
    {"row": [rows...]}; without it, one dict per row {"row": row, <column>: value}; both are read."""
    rows: list[int] = []
    for entry in index_list or ():
        values = entry.get("row")
        rows.extend(int(v) for v in (values if isinstance(values, list) else [values]))
    if not rows:
        return ()
    return tuple(ids.gather(sorted(set(rows))).cast(pl.String).fill_null(_NULL_ID).to_list())


def _to_check_result(result: Any, thresholds: dict[str, float | None], ids: pl.Series) -> CheckResult:
    config = result.expectation_config
    check_id = (config.meta or {}).get("check_id", f"{CHECK_PREFIX}.{config.type}")
    threshold = thresholds.get(check_id)
    details: dict[str, Any] = {"expectation": config.type,
                               "kwargs": {k: v for k, v in config.kwargs.items() if k != "batch_id"}}
    info = result.exception_info or {}
    if info.get("raised_exception"):
        reason = str(info.get("exception_message") or "expectation raised").splitlines()[0]
        return CheckResult(check_id, "error", threshold=threshold, message=f"GX: {reason}", details=details)

    stats = result.result or {}
    status = "pass" if result.success else "fail"
    if "observed_value" in stats:  # table-level rule: row count
        observed = stats["observed_value"]
        details["observed_value"] = observed
        message = f"{observed} rows (need at least {int(threshold or 0)})"
        return CheckResult(check_id, status, metric=float(observed), threshold=threshold,
                           message=message, details=details)

    n_rows, n_bad = stats.get("element_count", 0), stats.get("unexpected_count", 0) or 0
    percent = stats.get("unexpected_percent")
    offending = _offending_ids(stats.get("unexpected_index_list"), ids)
    details.update(n_offending=n_bad, element_count=n_rows, missing_count=stats.get("missing_count"))
    rule = check_id.removeprefix(f"{CHECK_PREFIX}.")
    message = f"{n_bad} of {n_rows} rows break {rule}" if n_bad else f"all {n_rows} rows satisfy {rule}"
    if stats.get("missing_count"):  # GX skips nulls in value rules; the not_null rules count them
        message += f" ({stats['missing_count']} null values not checked)"
    metric = None if percent is None else percent / 100.0
    return CheckResult(check_id, status, metric=metric, threshold=threshold, offending=offending,
                       message=message, details=details)


_PREWARM: list[Any] = []  # the thread started by prewarm(), at most one per process


def prewarm() -> None:
    """Start importing great_expectations on a thread (once per process). Its import is
    3-6 s of Python (scipy, altair, sqlalchemy); a command that will run the suite calls this
    before it reads its data, so the import overlaps the read and the import of the data (polars
    and Arrow work that mostly releases the GIL) instead of the other checks. Nothing else
    changes: `_run` imports the module as before (waiting for this import if it is still under
    way), and an import that fails here fails there again and is reported as the `gx` error. The
    thread is not a daemon: a command that stops early (bad input) exits once the import is done,
    never in the middle of it."""
    if _PREWARM:
        return
    import threading

    def load() -> None:
        # no _quiet_gx here: warnings.catch_warnings is not thread-safe, and the import warns nothing
        try:
            import great_expectations  # noqa: F401
        except Exception:  # reported by run_expectations, where the suite runs
            pass

    thread = threading.Thread(target=load, name="gx-import")
    _PREWARM.append(thread)
    thread.start()


def run_expectations(
    pairs: pl.DataFrame,
    *,
    max_length_ratio: float = DEFAULT_MAX_LENGTH_RATIO,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    min_rows: int = DEFAULT_MIN_ROWS,
    categories: list[str] | None = None,
    docs_dir: Path | None = None,
) -> list[CheckResult]:
    """Validate `pairs` with a GX Checkpoint; one CheckResult per expectation, or one `gx` error.

    With docs_dir, GX's Data Docs (index.html and pages) are written there.
    """
    missing = [c for c in REQUIRED_COLUMNS if not has_text(pairs, c)]
    if missing:
        return [CheckResult(CHECK_PREFIX, "error", message=f"pairs frame lacks columns {missing}")]
    use_categories = categories if categories is not None and "category" in pairs.columns else None
    try:
        with _quiet_gx():
            return _run(pairs, max_length_ratio=max_length_ratio, max_text_chars=max_text_chars,
                        min_rows=min_rows, categories=use_categories, docs_dir=docs_dir)
    except Exception as exc:  # a checklist item must never take the whole run down
        reason = (str(exc).strip().splitlines() or [""])[0]
        return [CheckResult(CHECK_PREFIX, "error", message=f"{type(exc).__name__}: {reason}")]


def _run(pairs: pl.DataFrame, *, max_length_ratio: float, max_text_chars: int, min_rows: int,
         categories: list[str] | None, docs_dir: Path | None) -> list[CheckResult]:
    import great_expectations as gx  # imported here: ~3 s, paid only when the GX rules run
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # no tqdm on stderr
    batch = (context.data_sources.add_pandas("prefdata")
             .add_dataframe_asset("pairs")
             .add_batch_definition_whole_dataframe("all_pairs"))
    category, codes = _category_codes(pairs, categories) if categories is not None else (None, None)
    suite, thresholds = _suite(gx, max_length_ratio=max_length_ratio, max_text_chars=max_text_chars,
                               min_rows=min_rows, categories=codes)
    suite = context.suites.add(suite)
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name="prefdata_pairs", data=batch, suite=suite))

    actions = []
    if docs_dir is not None:
        docs_dir = Path(docs_dir)
        docs_dir.mkdir(parents=True, exist_ok=True)
        context.add_data_docs_site(site_name="prefdata", site_config={
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(Path(docs_dir).resolve())},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        })
        # Only our site: the ephemeral context's default site would write into a temp folder.
        actions.append(gx.checkpoint.UpdateDataDocsAction(name="data_docs", site_names=["prefdata"]))

    checkpoint = context.checkpoints.add(gx.Checkpoint(
        name="prefdata_checklist",
        validation_definitions=[validation],
        actions=actions,
        # COMPLETE: every offending row, by row number (mapped to ids in _distinct_ids). The values
        # themselves are left out: they would be copied into the in-memory results store and
        # dominate the run time when many rows fail.
        result_format={"result_format": "COMPLETE", "unexpected_index_column_names": ["row"],
                       "exclude_unexpected_values": True, "return_unexpected_index_query": False},
    ))
    frame = _to_pandas(pairs, category)
    outcome = checkpoint.run(batch_parameters={"dataframe": frame})
    del frame

    results = [_to_check_result(r, thresholds, pairs.get_column("id"))
               for run in outcome.run_results.values() for r in run.results]
    order = list(thresholds)  # GX groups results by metric; report in the suite's order
    return sorted(results, key=lambda r: order.index(r.id) if r.id in order else len(order))
