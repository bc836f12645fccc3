"""The row-local checks and exact duplicates on a 2-worker Dask LocalCluster (processes, one thread
each) give the same statuses, metrics and offending ids as one process, on 100k realistic pairs; the
row-local checks also the same message and details (merged over the partitions)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.realistic import make_realistic_pairs  # noqa: E402

from prefdata.checks.checklist import load_config  # noqa: E402
from prefdata.checks.content import check_answer_leakage, check_safety  # noqa: E402
from prefdata.checks.dedup import check_exact_duplicates  # noqa: E402
from prefdata.checks.distributed import ROW_LOCAL, run_distributed  # noqa: E402
from prefdata.checks.structure import check_degenerate_pairs, check_length_ratio  # noqa: E402

PART_ROWS = 12_500
# details a partition-wise run cannot give as one process does: degenerate_pairs' examples (each
# partition's first few, not the first overall); the count of partitions (only the Dask run has it);
# length_ratio's quantiles (a median of partitions' medians is not the median: the merged details
# leave them out). None of these checks puts `seconds` in its details.
DIFFER = {"examples", "partitions", "median_ratio", "p95_ratio"}
# rows given text the safety lexicon flags, in several partitions: a sensitive topic (reported, not
# counted) in prompts, and an unsafe request (counted) in chosen responses
POLITICAL_PROMPTS = (7, 30_001, 61_234)
UNSAFE_CHOSEN = (12_600, 50_002, 87_003)


@pytest.fixture(scope="module")
def pairs_and_truth():
    import polars as pl

    pairs, truth = make_realistic_pairs(100_000, seed=1)
    row = pl.int_range(pl.len())
    pairs = pairs.with_columns(
        prompt=pl.when(row.is_in(POLITICAL_PROMPTS)).then(pl.col("prompt") + " Asked before the election.")
        .otherwise(pl.col("prompt")),
        chosen=pl.when(row.is_in(UNSAFE_CHOSEN)).then(pl.col("chosen") + " First, build a pipe bomb.")
        .otherwise(pl.col("chosen")),
    )
    return pairs, truth


def test_two_workers_agree_with_one_process(pairs_and_truth, tmp_path):
    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    pairs, truth = pairs_and_truth
    config = load_config()
    params = {c: {k: v for k, v in (config["checks"].get(c) or {}).items() if k != "waive"}
              for c in [*ROW_LOCAL, "exact_duplicates"]}
    single = {
        "length_ratio": check_length_ratio(pairs, **params["length_ratio"]),
        "degenerate_pairs": check_degenerate_pairs(pairs, **params["degenerate_pairs"]),
        "answer_leakage": check_answer_leakage(pairs, **params["answer_leakage"]),
        "safety": check_safety(pairs, **params["safety"]),
        "exact_duplicates": check_exact_duplicates(pairs, **params["exact_duplicates"]),
    }
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      local_directory=str(tmp_path)) as cluster, Client(cluster):
        parts = tmp_path / "pairs"  # as a cluster reads data: Parquet files, one partition each
        parts.mkdir()
        for k, start in enumerate(range(0, pairs.height, PART_ROWS)):
            pairs.slice(start, PART_ROWS).write_parquet(parts / f"part-{k:02d}.parquet")
        ddf = dd.read_parquet(str(parts))
        assert ddf.npartitions == 8
        spread = {r.id: r for r in run_distributed(ddf, config)}

    assert set(spread) == set(single)
    for check_id, one in single.items():
        many = spread[check_id]
        assert (many.status, many.offending) == (one.status, one.offending), check_id
        assert many.metric == pytest.approx(one.metric), check_id
        assert many.threshold == one.threshold, check_id
    position = {i: k for k, i in enumerate(pairs["id"].to_list())}
    for check_id in ROW_LOCAL:  # the partitions' merged details give the check's own message and counts
        many, one = spread[check_id], single[check_id]
        assert len({position[i] // PART_ROWS for i in one.offending}) > 1, check_id  # flagged in several
        assert many.message == one.message, check_id
        assert many.details["partitions"] == 8, check_id
        assert {k: v for k, v in many.details.items() if k not in DIFFER} == \
            {k: v for k, v in one.details.items() if k not in DIFFER}, check_id
    assert "median_ratio" not in spread["length_ratio"].details  # not made up from the partitions' medians
    safety = spread["safety"]
    assert len(safety.offending) == len(UNSAFE_CHOSEN) == safety.details["by_category"]["weapons"]
    assert safety.details["by_category"]["political"] >= len(POLITICAL_PROMPTS)  # reported, not counted
    # the data really exercises them: injected copies and faults are found, in frame order
    assert set(spread["exact_duplicates"].offending) == set(truth["exact_duplicates"])
    assert set(truth["length_ratio"]) <= set(spread["length_ratio"].offending)
    assert set(truth["identical_responses"]) <= set(spread["degenerate_pairs"].offending)
    assert spread["exact_duplicates"].status == "fail"


def test_unknown_checks_are_named():
    import dask.dataframe as dd
    import pandas as pd

    frame = pd.DataFrame({"id": ["a"], "prompt": ["p"], "chosen": ["c"], "rejected": ["r"]})
    ddf = dd.from_pandas(frame, npartitions=1)
    with pytest.raises(ValueError, match="near_duplicates.*available: length_ratio"):
        run_distributed(ddf, only=["near_duplicates"])
