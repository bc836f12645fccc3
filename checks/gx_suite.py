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

GX validates pandas, not polars: the frame is converted here, at the boundary, with only the
columns the suite reads, and the length ratio is computed in polars first (one vectorised pass)
so GX checks a plain float column.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.checks.base import CheckResult

CHECK_PREFIX = "gx"
DEFAULT_MAX_LENGTH_RATIO = 2.0
DEFAULT_MAX_TEXT_CHARS = 1_048_576
# Ratio for a pair with an empty side: "infinitely" lopsided, but a finite float so GX results,
# JSON and plots stay well-formed. Far above any real ratio (max_text_chars / 1 is ~1e6).
EMPTY_SIDE_RATIO = 1e9
REQUIRED_COLUMNS = ("id", "prompt", "chosen", "rejected")
_NULL_ID = "<null id>"


def length_ratios(pairs: pl.DataFrame) -> pl.Series:
    """Longer / shorter response length in characters per row; EMPTY_SIDE_RATIO when a side is empty,
    null when a side is null (the not-null rules report those)."""
    chosen, rejected = pl.col("chosen").str.len_chars(), pl.col("rejected").str.len_chars()
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


def _to_pandas(pairs: pl.DataFrame, with_category: bool) -> Any:
    import pandas as pd
    columns = [pl.col(c).cast(pl.String) for c in REQUIRED_COLUMNS]
    if with_category:
        # Categorical/Enum become plain strings so value_set membership compares text with text.
        columns.append(pl.col("category").cast(pl.String))
    frame = pairs.select(*columns).with_columns(length_ratios(pairs))
    # pandas >= 3 stores these as pyarrow-backed `str`, so GX's .str.len() and comparisons stay
    # vectorised; only the columns the suite reads cross the boundary.
    df = frame.to_pandas()
    # The ids also become the (named) index: GX then reads offending ids straight off the index
    # instead of one df.at[row, "id"] lookup per offending row (~100 us each: 100 s when 1M rows
    # fail). The `id` column stays, for the not-null and unique rules.
    df.index = pd.Index(df["id"].to_numpy(), name="id")
    return df


def _suite(gx: Any, *, max_length_ratio: float, max_text_chars: int, min_rows: int,
           categories: list[str] | None) -> tuple[Any, dict[str, float | None]]:
    """The expectation suite, and each rule's threshold keyed by check id (stored in `meta`)."""
    gxe = gx.expectations
    rules: list[tuple[str, Any, float | None]] = []
    for col in REQUIRED_COLUMNS:
        rules.append((f"not_null.{col}", gxe.ExpectColumnValuesToNotBeNull(column=col), None))
    rules.append(("unique.id", gxe.ExpectColumnValuesToBeUnique(column="id"), None))
    for col, low in (("prompt", 1), ("chosen", 0), ("rejected", 0)):
        rule = gxe.ExpectColumnValueLengthsToBeBetween(column=col, min_value=low, max_value=max_text_chars)
        rules.append((f"length.{col}", rule, float(max_text_chars)))
    ratio = gxe.ExpectColumnValuesToBeBetween(column="length_ratio", max_value=max_length_ratio)
    rules.append(("length_ratio", ratio, float(max_length_ratio)))
    rules.append(("row_count", gxe.ExpectTableRowCountToBeBetween(min_value=min_rows), float(min_rows)))
    if categories is not None:
        in_set = gxe.ExpectColumnValuesToBeInSet(column="category", value_set=list(categories))
        rules.append(("category_set", in_set, None))

    suite = gx.ExpectationSuite(name="prefdata_pairs")
    thresholds: dict[str, float | None] = {}
    for name, expectation, threshold in rules:
        check_id = f"{CHECK_PREFIX}.{name}"
        expectation.meta = {"check_id": check_id}  # how a result finds its way back to its rule
        suite.add_expectation(expectation)
        thresholds[check_id] = threshold
    return suite, thresholds


def _distinct_ids(index_list: list[dict[str, Any]] | None) -> tuple[str, ...]:
    """Offending ids from GX's unexpected_index_list, in row order, each id once (a duplicated id
    is listed for every copy). With exclude_unexpected_values GX gives one dict {"id": [ids...]};
    without it, one dict per row {"id": id, <column>: value}; both are read."""
    ids: dict[str, None] = {}  # ordered set
    for entry in index_list or ():
        values = entry.get("id")
        for value in values if isinstance(values, list) else [values]:
            ids[_NULL_ID if value is None or value != value else str(value)] = None  # NaN != NaN
    return tuple(ids)


def _to_check_result(result: Any, thresholds: dict[str, float | None]) -> CheckResult:
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
    offending = _distinct_ids(stats.get("unexpected_index_list"))
    details.update(n_offending=n_bad, element_count=n_rows, missing_count=stats.get("missing_count"))
    rule = check_id.removeprefix(f"{CHECK_PREFIX}.")
    message = f"{n_bad} of {n_rows} rows break {rule}" if n_bad else f"all {n_rows} rows satisfy {rule}"
    if stats.get("missing_count"):  # GX skips nulls in value rules; the not_null rules count them
        message += f" ({stats['missing_count']} null values not checked)"
    metric = None if percent is None else percent / 100.0
    return CheckResult(check_id, status, metric=metric, threshold=threshold, offending=offending,
                       message=message, details=details)


def run_expectations(
    pairs: pl.DataFrame,
    *,
    max_length_ratio: float = DEFAULT_MAX_LENGTH_RATIO,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    min_rows: int = 1,
    categories: list[str] | None = None,
    docs_dir: Path | None = None,
) -> list[CheckResult]:
    """Validate `pairs` with a GX Checkpoint; one CheckResult per expectation, or one `gx` error.

    With docs_dir, GX's Data Docs (index.html and pages) are written there.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in pairs.columns]
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
    suite, thresholds = _suite(gx, max_length_ratio=max_length_ratio, max_text_chars=max_text_chars,
                               min_rows=min_rows, categories=categories)
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
        # COMPLETE: every offending row, identified by `id` rather than a row number. The values
        # themselves (whole responses) are left out: they would be copied into the in-memory
        # results store and dominate the run time when many rows fail.
        result_format={"result_format": "COMPLETE", "unexpected_index_column_names": ["id"],
                       "exclude_unexpected_values": True, "return_unexpected_index_query": False},
    ))
    frame = _to_pandas(pairs, with_category=categories is not None)
    outcome = checkpoint.run(batch_parameters={"dataframe": frame})

    results = [_to_check_result(r, thresholds)
               for run in outcome.run_results.values() for r in run.results]
    order = list(thresholds)  # GX groups results by metric; report in the suite's order
    return sorted(results, key=lambda r: order.index(r.id) if r.id in order else len(order))
