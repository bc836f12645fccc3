"""The checklist's row-local checks and exact duplicates over a Dask DataFrame (docs/scaling.md).

Row-local checks judge each row on its own, so each partition runs the very same check function
(`prefdata.checks.*`) on its rows and the results combine as the shard-by-shard run's do
(checks/batched.py `combine`): the offending ids in partition order (= frame order), metric =
offending rows / rows, the status from the same threshold rule, details merged (counts summed, the
check's parameters as given), and the message the check's own message function (its registry
`merge`) builds from the merged details: the in-memory run's message. ROW_LOCAL are the registry's
row-local checks that need nothing but the pairs (checks/registry.py): `length_ratio`,
`degenerate_pairs` (without comparisons), `answer_leakage` and `safety` (the lexicon); template_fit
needs the trainer's tokenizer, which a Dask run has not. What the merged details cannot give as one
process does: each partition's first examples (not the first overall), and length_ratio's
`median_ratio` / `p95_ratio`, left out (`structure.length_ratio_merged`).

Exact duplicates need a shuffle: every row's normalised pair (`records.normalise_series` of prompt,
chosen and rejected, joined by newlines, which normalised text cannot contain) is hashed to 64 bits
in its partition, rows are shuffled on that hash so that copies meet in one partition, and there
each group of identical normalised texts keeps its first row (by global row number) and flags the
others. The texts travel with the hash so that a hash collision is never taken for a copy.

Only the verdicts come back to the client (ids of offending rows and counts), never the text.
Partitions are pandas frames (what Dask DataFrame holds); each is turned into polars for the checks.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import polars as pl

from .base import CheckResult, skip
from .batched import combine
from .dedup import DEFAULT_MAX_SHARE
from .registry import CHECKS, CheckInputs

# the row-local checks a partition of pairs is enough for (the registry's traits)
ROW_LOCAL = tuple(c for c, check in CHECKS.items() if check.row_local and not check.needs)
EXACT_ID = "exact_duplicates"


def _partition_verdict(part: Any, check_id: str, params: dict[str, Any]) -> tuple[int, CheckResult]:
    """One partition: (rows, the check's own result on these rows, bound as the registry binds it)."""
    frame = pl.from_pandas(part) if not isinstance(part, pl.DataFrame) else part
    check = CHECKS[check_id]
    result = check.function(**check.bind(CheckInputs(pairs=frame)), **params)
    return frame.height, result


def _combine(check_id: str, parts: list[tuple[int, CheckResult]]) -> CheckResult:
    """The partitions' verdicts as one result, by batched.py `combine` over the partitions that have
    rows (an empty one's skip is left out): the check's own threshold, metric = offending / rows,
    merged details and the check's own message; `details["partitions"]` counts every partition."""
    n = sum(rows for rows, _ in parts)
    results = [result for rows, result in parts if rows]
    if n == 0 or not results:
        return skip(check_id, "no rows")
    check = CHECKS[check_id]
    combined = combine(check_id, results, n, check.merge.message, tuple(inspect.signature(check.function).parameters),
                       check.merge.derive)
    if combined.status in ("error", "skip"):  # a partition's own result, as it gave it
        return combined
    details = {k: v for k, v in combined.details.items() if k != "shards"}
    details["partitions"] = len(parts)
    return CheckResult(check_id, combined.status, combined.metric, combined.threshold, combined.offending,
                       combined.message, details)


def _pair_keys(part: Any, offset: int) -> Any:
    """One partition's shuffle input: global row number, id, 64-bit hash and normalised pair text."""
    from prefdata.data.records import normalise_series

    frame = pl.from_pandas(part) if not isinstance(part, pl.DataFrame) else part
    joined = pl.DataFrame({c: normalise_series(frame[c].cast(pl.String)) for c in ("prompt", "chosen", "rejected")})
    text = joined.select(pl.concat_str(["prompt", "chosen", "rejected"], separator="\n")).to_series()
    keys = pl.DataFrame({
        "row": pl.int_range(offset, offset + frame.height, dtype=pl.Int64, eager=True),
        "id": frame["id"].cast(pl.String),
        "h": text.hash(0).reinterpret(signed=True),  # int64: what pandas and the shuffle handle best
        "t": text,
    })
    return keys.to_pandas()


def _later_copies(part: Any) -> Any:
    """Rows whose normalised pair text equals that of a row with a smaller global row number."""
    if len(part) == 0:
        return part[["row", "id"]]
    first = part.groupby("t", sort=False)["row"].transform("min")
    return part.loc[part["row"] != first, ["row", "id"]]


def exact_duplicates(ddf: Any, *, max_share: float = DEFAULT_MAX_SHARE) -> CheckResult:
    """`check_exact_duplicates` (repeated pairs; repeated prompts are not failed) over a Dask DataFrame."""
    import dask
    import dask.dataframe as dd

    missing = [c for c in ("id", "prompt", "chosen", "rejected") if c not in ddf.columns]
    if missing:
        return skip(EXACT_ID, f"missing columns: {', '.join(missing)}", max_share)
    parts = ddf[["id", "prompt", "chosen", "rejected"]].to_delayed()
    lengths = dask.compute(*[dask.delayed(len)(p) for p in parts])
    n = int(sum(lengths))
    if n == 0:
        return skip(EXACT_ID, "no rows", max_share)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    empty = pl.DataFrame({c: pl.Series([], dtype=pl.String) for c in ("id", "prompt", "chosen", "rejected")})
    meta = _pair_keys(empty, 0)
    keyed = dd.from_delayed([dask.delayed(_pair_keys)(p, int(o)) for p, o in zip(parts, offsets)], meta=meta)
    copies = keyed.shuffle(on="h", npartitions=keyed.npartitions).map_partitions(
        _later_copies, meta=meta[["row", "id"]]).compute()
    copies = copies.sort_values("row")
    offending = tuple(str(i) for i in copies["id"])
    metric = len(offending) / n
    status = "fail" if metric > max_share else "pass"
    message = f"{len(offending)} repeated pair(s) (after normalisation) in {n} rows, by a shuffle on the pair hash"
    return CheckResult(EXACT_ID, status, metric, max_share, offending, message,
                       {"n_rows": n, "n_offending": len(offending), "n_duplicate_pairs": len(offending)})


def run_distributed(ddf: Any, config: dict[str, Any] | None = None,
                    only: list[str] | None = None) -> list[CheckResult]:
    """The row-local checks and exact duplicates over `ddf` (a Dask DataFrame with id, prompt, chosen,
    rejected), with the parameters of `config["checks"]` (the checklist YAML's shape). Runs on
    whatever Dask scheduler is current (a `distributed.Client` when one is active)."""
    import dask

    checks = (config or {}).get("checks", {})
    wanted = only or [*ROW_LOCAL, EXACT_ID]
    unknown = [c for c in wanted if c not in ROW_LOCAL and c != EXACT_ID]
    if unknown:
        raise ValueError(f"not row-local and not exact_duplicates: {', '.join(unknown)} "
                         f"(available: {', '.join([*ROW_LOCAL, EXACT_ID])})")
    parts = ddf.to_delayed()
    row_local = [c for c in wanted if c in ROW_LOCAL]
    tasks = {c: [dask.delayed(_partition_verdict)(p, c, _params(checks.get(c))) for p in parts] for c in row_local}
    computed = dask.compute(tasks)[0]
    results = {c: _combine(c, list(computed[c])) for c in row_local}
    if EXACT_ID in wanted:
        exact = _params(checks.get(EXACT_ID))
        results[EXACT_ID] = exact_duplicates(ddf, max_share=exact.get("max_share", DEFAULT_MAX_SHARE))
    return [results[c] for c in wanted]


def _params(section: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (section or {}).items() if k != "waive"}
