"""Remove the rows that row-level checks flag, as a new version whose parent is the old one.

The seed's pipeline filters before it splits ("去重 + 长度过滤"): duplicates, length-ratio
violations and degenerate pairs. Nothing is dropped silently: every removed row goes to the new
version's quarantine with the check that flagged it, and rows in = rows kept + rows quarantined.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.errors import UnusableInput
from prefdata.store import Store, Version, tables_for

# Checks whose offenders are row ids (others list section titles or dimension names).
ROW_CHECKS = ("exact_duplicates", "near_duplicates", "length_ratio", "degenerate_pairs", "answer_leakage",
              "safety", "split_isolation", "label_audit")
DEFAULT_DROP = ("exact_duplicates", "near_duplicates", "length_ratio", "degenerate_pairs")


def filter_version(store: Store, ref: str, drop: tuple[str, ...] = DEFAULT_DROP, config: dict[str, Any] | None = None,
                   name: str | None = None, votes: str | None = None) -> tuple[Version, dict[str, Any]]:
    """`votes`: a label audit's pulled votes, for `label_audit` (drops the pairs whose annotators'
    majority overturned the label); the new version keeps the parent's own votes, not these."""
    from prefdata.checks.checklist import load_config, run_checklist
    from prefdata.gate import load_inputs

    unknown = [c for c in drop if c not in ROW_CHECKS]
    if unknown:
        raise UnusableInput(f"cannot filter on {', '.join(unknown)}: use row-level checks ({', '.join(ROW_CHECKS)})")
    parent = store.get(ref)
    inputs, _ = load_inputs(parent.ref, votes=votes, store=store.url)
    results = run_checklist(inputs, config or load_config(), only=list(drop))
    if "label_audit" in drop and not any(r.id == "label_audit" and r.status != "skip" for r in results):
        raise UnusableInput("--drop label_audit needs a label audit's votes: --votes FILE, from `prefdata argilla pull` "
                            f"after `prefdata argilla push {parent.ref}` (see docs/argilla.md)")
    reason_of: dict[str, str] = {}
    for result in results:  # in checklist order; the first check that flags a row names its reason
        if result.status == "error":
            raise UnusableInput(f"check {result.id} could not run: {result.message}")
        for row_id in result.offending:
            reason_of.setdefault(row_id, result.id)
    lineage = {
        "parent": parent.ref,
        "sources": parent.manifest["lineage"].get("sources", []),
        "flow_run": None,
        "components": {**parent.manifest["lineage"].get("components", {}), "filter": {"drop": list(drop)}},
    }
    own_votes = inputs.votes
    if votes is not None:
        import hashlib

        lineage["components"]["filter"]["votes"] = {"path": str(votes),
                                                    "sha256": hashlib.sha256(Path(votes).read_bytes()).hexdigest()}
        own_votes = store.load(parent.ref, "votes") if "votes" in parent.manifest["counts"]["rows"] else None
    read = kept = 0
    reasons: Counter[str] = Counter()
    done: dict[str, Any] = {}
    flagged = pl.Series(list(reason_of), dtype=pl.String).implode()
    # The dropped rows, text and all, wait on disk (Arrow IPC, a file per frame) until the store writes
    # the quarantine a line at a time: a filter over shards never holds all of them in memory.
    spill = tempfile.TemporaryDirectory(prefix="prefdata-filter-")
    spilled: list[Path] = []

    def batches():  # the pairs a frame at a time: the whole frame, or each shard of a sharded version
        nonlocal read, kept
        frames = [inputs.pairs] if inputs.shards is None else (frame for _, frame in inputs.shards.frames())
        for pairs in frames:
            dropped = pairs.select(pl.col("id").cast(pl.String).is_in(flagged)).to_series()
            rows = pairs.filter(dropped)
            if rows.height:
                spilled.append(Path(spill.name) / f"{len(spilled)}.arrow")
                rows.write_ipc(spilled[-1], compression="lz4")
                reasons.update(f"check:{reason_of[i]}" for i in rows["id"].cast(pl.String))
            read, kept = read + pairs.height, kept + pairs.height - rows.height
            tables = tables_for(pairs.filter(~dropped))
            del pairs, rows  # before the next shard is read
            yield tables
            del tables

    def quarantine():  # in row order, as the row-by-row filter wrote it
        for path in spilled:
            for row in pl.read_ipc(path).iter_rows(named=True):
                yield {"id": row["id"], "reason": f"check:{reason_of[row['id']]}",
                       "detail": f"flagged by {reason_of[row['id']]}", "row": None, "raw": row}

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

    with spill:
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
