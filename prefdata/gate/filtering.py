"""Remove the rows that row-level checks flag, as a new version whose parent is the old one.

The seed's pipeline filters before it splits ("去重 + 长度过滤"): duplicates, length-ratio
violations and degenerate pairs. Nothing is dropped silently: every removed row goes to the new
version's quarantine with the check that flagged it, and rows in = rows kept + rows quarantined.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.base import defaults
from prefdata.base.errors import FILTERABLE, UnusableInput
from prefdata.base.scratch import scratch
from prefdata.data.store import Store, Version, tables_for

# Checks whose offenders are row ids (others list section titles or dimension names).
ROW_CHECKS = FILTERABLE
DEFAULT_DROP = defaults.FILTER_DROP  # one home, which `prefdata filter --drop` reads too
# Checks that flag the later copies of a row and never the first. Rows may share an id (the import
# keeps exact copies that repeat their own id), so for these an id flagged n times drops its last n
# rows; an id any other check flags drops every row that carries it (the copies are the same pair).
COPY_CHECKS = ("exact_duplicates", "near_duplicates")
_ROW, _REASON = "__prefdata_row", "__prefdata_reason"  # spilled beside each dropped row


def _drop_plan(results, ids: pl.Series) -> pl.DataFrame:
    """Per flagged id, for each check in checklist order (column `keep:CHECK`), how many of its first
    occurrences that check lets stay: its rows minus the times a copy check names it, 0 for any
    other check, null where the check does not name it; for decontamination, the quarantine reason
    naming the benchmark the pair contaminates (column `reason:decontamination`)."""
    from prefdata.checks.isolation import DECONTAMINATION_ID, contaminated_by

    named = {r.id: Counter(str(i) for i in r.offending) for r in results if r.offending}
    copies = sorted({i for check, counts in named.items() if check in COPY_CHECKS for i in counts})
    ids = ids.cast(pl.String)
    # how many rows carry each id a copy check names (only those: a 10M-row version has 10M ids)
    totals = dict(ids.filter(ids.is_in(copies)).value_counts(name="n").iter_rows()) if copies else {}
    columns: dict[str, dict[str, int]] = {}
    for check, counts in named.items():
        if check in COPY_CHECKS:
            columns[check] = {i: totals.get(i, n) - n for i, n in counts.items()}
        else:
            columns[check] = dict.fromkeys(counts, 0)
    flagged = sorted({i for keep in columns.values() for i in keep})
    plan = pl.DataFrame({"id": flagged, **{f"keep:{c}": [keep.get(i) for i in flagged] for c, keep in columns.items()}},
                        schema={"id": pl.String, **{f"keep:{c}": pl.Int64 for c in columns}})
    decontaminated = next((r for r in results if r.id == DECONTAMINATION_ID and r.offending), None)
    if decontaminated is not None:
        benchmark = contaminated_by(decontaminated)
        plan = plan.with_columns(pl.Series(f"reason:{DECONTAMINATION_ID}", [
            f"check:{DECONTAMINATION_ID}:{benchmark[i]}" if i in benchmark else None for i in flagged], pl.String))
    return plan


def _frame_verdicts(ids: pl.Series, first_row: int, plan: pl.DataFrame, seen: pl.DataFrame):
    """Each row of a frame (rows first_row+1.. of the whole) with the reason it is dropped (null:
    kept), and `seen` updated: the occurrences of each flagged id in this frame and the ones before."""
    rows = pl.DataFrame({"id": ids.cast(pl.String)}).with_row_index("row", offset=first_row + 1)
    hits = rows.join(plan, on="id", how="inner").join(seen, on="id", how="left").sort("row").with_columns(
        occurrence=pl.col("before").fill_null(0) + pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("id"))
    checks = [c.removeprefix("keep:") for c in plan.columns if c.startswith("keep:")]
    # check:CHECK, or the check's own reason where the plan gives one (decontamination: check:decontamination:BENCHMARK)
    reason = pl.coalesce([pl.when(pl.col("occurrence") > pl.col(f"keep:{c}")).then(
        pl.col(f"reason:{c}") if f"reason:{c}" in plan.columns else pl.lit(f"check:{c}"))
        for c in checks]) if checks else pl.lit(None, pl.String)
    hits = hits.select("row", "id", "occurrence", reason.alias("reason"))
    seen = pl.concat([seen, hits.group_by("id").agg(pl.col("occurrence").max().alias("before"))]
                     ).group_by("id").agg(pl.col("before").max())
    verdicts = rows.join(hits.select("row", "reason"), on="row", how="left").sort("row")
    return verdicts, seen


def filter_version(store: Store, ref: str, drop: tuple[str, ...] = DEFAULT_DROP, config: dict[str, Any] | None = None,
                   name: str | None = None, votes: str | None = None,
                   benchmarks: list[str] | None = None) -> tuple[Version, dict[str, Any]]:
    """`votes`: a label audit's pulled votes, for `label_audit` (drops the pairs whose annotators'
    majority overturned the label); the new version keeps the parent's own votes, not these.
    `benchmarks`: benchmark prompt files, for `decontamination` (drops the pairs whose prompt holds a
    benchmark item, each quarantined as check:decontamination:BENCHMARK)."""
    from prefdata.checks.checklist import load_config, run_checklist
    from prefdata.gate.runner import load_inputs

    unknown = [c for c in drop if c not in ROW_CHECKS]
    if unknown:
        raise UnusableInput(f"cannot filter on {', '.join(unknown)}: use row-level checks ({', '.join(ROW_CHECKS)})")
    if "decontamination" in drop and not benchmarks:
        raise UnusableInput("--drop decontamination needs the benchmarks to check against: --benchmark FILE "
                            "(repeatable; e.g. ../shared/data/ifeval)")
    parent = store.get(ref)
    inputs, _ = load_inputs(parent.ref, votes=votes, store=store.url, benchmarks=benchmarks, stored=True)
    results = run_checklist(inputs, config or load_config(), only=list(drop))
    if "label_audit" in drop and not any(r.id == "label_audit" and r.status != "skip" for r in results):
        raise UnusableInput("--drop label_audit needs a label audit's votes: --votes FILE, from `prefdata argilla pull` "
                            f"after `prefdata argilla push {parent.ref}` (see docs/argilla.md)")
    for result in results:
        if result.status == "error":
            raise UnusableInput(f"check {result.id} could not run: {result.message}")
    plan = _drop_plan(results, inputs.pairs["id"])
    if plan.height == 0:  # nothing to drop: no new version, which would only copy the parent (and become the newest)
        n = inputs.pairs.height
        return parent, {"read": n, "kept": n, "quarantined": 0, "pairs": n, "unresolved": {}, "reasons": {},
                        "format": "filtered", "unchanged": True}
    lineage = {
        "parent": parent.ref,
        "sources": parent.manifest["lineage"].get("sources", []),
        "flow_run": None,
        "components": {**parent.manifest["lineage"].get("components", {}), "filter": {"drop": list(drop)}},
    }
    if "rendering" in parent.manifest["lineage"]:  # how its prompts were sampled: train compares it with its base model's
        lineage["rendering"] = parent.manifest["lineage"]["rendering"]
    if benchmarks:
        lineage["components"]["filter"]["benchmarks"] = [str(b) for b in benchmarks]
    own_votes = inputs.votes
    if votes is not None:
        import hashlib

        lineage["components"]["filter"]["votes"] = {"path": str(votes),
                                                    "sha256": hashlib.sha256(Path(votes).read_bytes()).hexdigest()}
        own_votes = store.load(parent.ref, "votes") if "votes" in parent.manifest["counts"]["rows"] else None
    read = kept = 0
    reasons: Counter[str] = Counter()
    done: dict[str, Any] = {}
    seen = pl.DataFrame(schema={"id": pl.String, "before": pl.Int64})  # occurrences of flagged ids so far
    # The dropped rows, text and all, wait on disk (Arrow IPC, a file per frame) until the store writes
    # the quarantine a line at a time: a filter over shards never holds all of them in memory.
    spill = scratch("filter")
    spilled: list[Path] = []

    def batches():  # the pairs a frame at a time: the whole frame, or each shard of a sharded version
        nonlocal read, kept, seen
        frames = [inputs.pairs] if inputs.shards is None else (frame for _, frame in inputs.shards.frames())
        for pairs in frames:
            verdicts, seen = _frame_verdicts(pairs["id"], read, plan, seen)
            dropped = verdicts["reason"].is_not_null()
            rows = pairs.filter(dropped)
            if rows.height:
                spilled.append(spill_dir / f"{len(spilled)}.arrow")
                marks = verdicts.filter(dropped).select("row", "reason")
                rows.with_columns(marks.to_series(0).alias(_ROW), marks.to_series(1).alias(_REASON)).write_ipc(
                    spilled[-1], compression="lz4")
                reasons.update(marks["reason"].to_list())
            read, kept = read + pairs.height, kept + pairs.height - rows.height
            tables = tables_for(pairs.filter(~dropped))
            del pairs, rows  # before the next shard is read
            yield tables
            del tables

    def quarantine():  # in row order, as the row-by-row filter wrote it; `row`: the row's place in the parent
        for path in spilled:
            for row in pl.read_ipc(path).iter_rows(named=True):
                number, reason = row.pop(_ROW), row.pop(_REASON)
                check = reason.removeprefix("check:")
                yield {"id": row["id"], "reason": reason, "detail": f"flagged by {check}", "row": number, "raw": row}

    def ending():
        quarantined = sum(reasons.values())
        counts = {"read": read, "kept": kept, "quarantined": quarantined, "pairs": kept, "unresolved": {},
                  "reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))), "format": "filtered"}
        if counts["read"] != counts["kept"] + counts["quarantined"]:  # a bug, never the user's input
            raise RuntimeError(f"filter counts do not reconcile: read {counts['read']} != kept {counts['kept']} "
                               f"+ quarantined {counts['quarantined']}")
        done["counts"] = counts
        extra = {}  # as tables_for places them
        if inputs.comparisons is not None:
            extra["comparisons"] = {"train": inputs.comparisons}
        if own_votes is not None:
            extra["votes"] = {"train": own_votes}
        return extra, quarantine(), counts, lineage

    with spill as spill_dir:
        n_batches = 1 if inputs.shards is None else len(inputs.shards.paths)
        if inputs.shards is None:  # one frame: its tables and the rest together, as `create` writes them
            tables = next(batches())
            extra, rejected, counts, _ = ending()
            child = store.create(name or parent.name, {**tables, **extra}, quarantine=rejected, counts=counts,
                                 lineage=lineage, guidelines=inputs.card_text)
            return child, counts
        child = store.create_sharded(name or parent.name, batches(), ending, n_batches=n_batches,
                                     guidelines=inputs.card_text)
        return child, done["counts"]
