"""The checklist on a 2-worker Dask LocalCluster (processes, one thread each) gives the same results as
one process: the row-local checks and exact duplicates on 100k realistic pairs (the row-local checks
also the same message and details, merged over the partitions); near duplicates, split isolation and
agreement on realistic pairs with injected near copies, leaked eval prompts and disagreeing votes;
`prefdata check --dask local:2` the same report as without. One cluster serves every test."""

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


def test_two_workers_agree_with_one_process(cluster, pairs_and_truth, tmp_path):
    import dask.dataframe as dd

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
    parts = tmp_path / "pairs"  # as a cluster reads data: Parquet files, one partition each
    parts.mkdir()
    for k, start in enumerate(range(0, pairs.height, PART_ROWS)):
        pairs.slice(start, PART_ROWS).write_parquet(parts / f"part-{k:02d}.parquet")
    ddf = dd.read_parquet(str(parts))
    assert ddf.npartitions == 8
    spread = {r.id: r for r in run_distributed(ddf, config, only=[*ROW_LOCAL, "exact_duplicates"])}

    assert set(spread) == set(single)
    for check_id, one in single.items():
        many = spread[check_id]
        assert (many.status, many.offending) == (one.status, one.offending), check_id
        assert many.metric == pytest.approx(one.metric), check_id
        assert many.threshold == one.threshold, check_id
    assert spread["exact_duplicates"].message == single["exact_duplicates"].message  # prompts counted too
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
    with pytest.raises(ValueError, match="gx.*available: length_ratio"):
        run_distributed(ddf, only=["gx"])


# -- near duplicates, split isolation, agreement; the command -----------------------------------------

NEAR_ROWS = 12_000
LEAKED_EXACT = (5, 1_207, 8_850)      # eval rows given a train row's prompt as it is (case changed)
LEAKED_NEAR = (33, 4_410, 10_021)     # eval rows given a train row's prompt with one word changed
# details the Dask run counts differently: every distinct LSH candidate is screened there (one
# process skips a pair already connected), and the seconds it took
NEAR_WORK = {"n_lsh_candidates", "n_screened_out", "n_candidate_pairs", "n_verified_pairs", "seconds"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      local_directory=str(tmp_path_factory.mktemp("dask"))) as local, Client(local) as client:
        yield client


@pytest.fixture(scope="module")
def leaky(pairs_and_truth):
    """12k realistic pairs, a tenth of their prompts held out as eval (whole prompts, so eval starts
    clean), then three eval prompts set to a train prompt and three to a train prompt with a word
    changed; votes of three annotators on 400 pairs, with disagreement, one annotator on both sides."""
    import polars as pl

    pairs = pairs_and_truth[0].head(NEAR_ROWS)
    held = pl.col("prompt").hash(7) % 10 == 0
    pairs = pairs.with_columns(split=pl.when(held).then(pl.lit("test")).otherwise(pl.lit("train")))
    train_rows = pairs.with_row_index("r").filter(pl.col("split") == "train")["r"].to_list()
    prompts = pairs["prompt"].to_list()
    eval_rows = [r for r in range(pairs.height) if pairs["split"][r] == "test"]
    for k, at in enumerate(LEAKED_EXACT):
        prompts[eval_rows[at % len(eval_rows)]] = prompts[train_rows[k * 997]].upper()
    for k, at in enumerate(LEAKED_NEAR):
        words = prompts[train_rows[k * 991 + 5]].split(" ")
        words[len(words) // 2] = "zebra"
        prompts[eval_rows[at % len(eval_rows)]] = " ".join(words)
    pairs = pairs.with_columns(prompt=pl.Series(prompts))
    ids = pairs["id"].to_list()
    voted = [ids[r] for r in range(0, pairs.height, 30)][:400]
    votes = pl.DataFrame({
        "pair_id": [p for p in voted for _ in range(3)],
        "annotator": [a for _ in voted for a in ("ann1", "ann2", "ann3")],
        "vote": [("b" if (k % 7 == 0 and a == "ann2") or (k % 11 == 0 and a == "ann3") else "a")
                 for k, _ in enumerate(voted) for a in ("ann1", "ann2", "ann3")],
    })
    return pairs, votes


def _same(one, many, skip=frozenset({"seconds"})):
    assert (many.status, many.offending, many.message) == (one.status, one.offending, one.message), one.id
    assert many.metric == pytest.approx(one.metric), one.id
    assert many.threshold == one.threshold, one.id
    assert {k: v for k, v in many.details.items() if k not in skip} == \
        {k: v for k, v in one.details.items() if k not in skip}, one.id


def test_near_duplicates_isolation_and_agreement_equal_one_process(cluster, leaky, pairs_and_truth, tmp_path):
    import dask.dataframe as dd

    from prefdata.checks.agreement import check_agreement
    from prefdata.checks.dedup import check_near_duplicates
    from prefdata.checks.isolation import check_split_isolation, split_train_eval

    pairs, votes = leaky
    train, held_out = split_train_eval(pairs)
    single = {"near_duplicates": check_near_duplicates(pairs),
              "split_isolation": check_split_isolation(train, held_out, votes),
              "agreement": check_agreement(votes),
              "exact_duplicates": check_exact_duplicates(pairs)}
    folder = tmp_path / "pairs"
    folder.mkdir()
    for k, start in enumerate(range(0, pairs.height, 3_000)):
        pairs.slice(start, 3_000).write_parquet(folder / f"part-{k}.parquet")
    ddf = dd.read_parquet(str(folder))
    assert ddf.npartitions == 4
    spread = {r.id: r for r in run_distributed(ddf, load_config(), only=list(single), votes=votes)}

    _same(single["near_duplicates"], spread["near_duplicates"], NEAR_WORK)
    _same(single["split_isolation"], spread["split_isolation"])
    _same(single["agreement"], spread["agreement"])
    _same(single["exact_duplicates"], spread["exact_duplicates"])
    # the data exercises them: injected near copies found, leaks of both kinds, disagreeing votes
    truth = set(pairs_and_truth[1]["near_duplicates"]) & set(pairs["id"].to_list())
    assert truth and truth <= set(spread["near_duplicates"].offending)
    isolation = spread["split_isolation"].details
    assert isolation["n_exact"] >= len(LEAKED_EXACT) and isolation["n_near"] >= len(LEAKED_NEAR)
    assert spread["agreement"].offending and spread["agreement"].status == "fail"
    # a separate eval set (--eval) gives the same as one process too
    eval_ddf = dd.from_pandas(held_out.to_pandas(), npartitions=2)
    alone = run_distributed(dd.from_pandas(train.to_pandas(), npartitions=3), only=["split_isolation"],
                            eval_ddf=eval_ddf)[0]
    _same(check_split_isolation(train, held_out), alone)


def test_check_dask_local_gives_the_same_report(cluster, leaky, tmp_path):
    """`prefdata check FILE --dask local:2` as a process: its report equals the one without --dask
    (every check's status, metric, message, offending ids); a bad --dask is one line, exit 2."""
    import json
    import os
    import subprocess

    pairs, votes = leaky
    data, vote_file = tmp_path / "pairs.parquet", tmp_path / "votes.parquet"
    pairs.write_parquet(data)
    votes.write_parquet(vote_file)
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}

    def check(*extra):
        out = tmp_path / f"report{len(extra)}.json"
        done = subprocess.run([sys.executable, "-m", "prefdata", "check", str(data), "--votes", str(vote_file),
                               "--json", str(out), *extra], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 1, done.stderr[-2000:]  # the realistic data fails the checklist
        return json.loads(out.read_text())["checks"], done.stdout

    one, one_text = check()
    many, many_text = check("--dask", "local:2")
    assert one_text == many_text
    assert [c["id"] for c in one] == [c["id"] for c in many]
    for a, b in zip(one, many):
        assert (a["status"], a["metric"], a["message"], a["offending"]) == \
            (b["status"], b["metric"], b["message"], b["offending"]), a["id"]
    ran = {c["id"]: c for c in many}
    assert ran["near_duplicates"]["offending"] and ran["split_isolation"]["status"] == "fail"
    assert ran["agreement"]["status"] == "fail" and ran["degenerate_pairs"]["details"]["partitions"] >= 2

    for bad in ("local:0", "local:x", "nowhere"):
        done = subprocess.run([sys.executable, "-m", "prefdata", "check", str(data), "--dask", bad],
                              capture_output=True, text=True, env=env, timeout=120)
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1 and "--dask" in lines[0], (bad, lines)


def test_validating_a_stored_version_on_dask_gives_the_same_report(cluster, leaky, tmp_path):
    """validate_version (what the validate and publish flows run) with `dask` set to a scheduler's
    address: the same checks, statuses, metrics, messages and offending ids, and the report names the
    engine."""
    from prefdata.data.importer import import_file, import_to_store
    from prefdata.data.store import Store
    from prefdata.gate.publishing import validate_version

    pairs, _ = leaky
    data = tmp_path / "pairs.parquet"
    pairs.write_parquet(data)
    store = Store(str(tmp_path / "store"))
    ref = import_to_store(import_file(data), "leaky", store).ref
    one = validate_version(store, ref, report_dir=tmp_path / "one")
    many = validate_version(store, ref, report_dir=tmp_path / "many", dask=cluster.scheduler.address)
    assert many.report["engine"] == f"dask {cluster.scheduler.address}" and "engine" not in one.report
    assert [r.id for r in one.outcome.results] == [r.id for r in many.outcome.results]
    for a, b in zip(one.outcome.results, many.outcome.results):
        assert (a.status, a.message, a.offending) == (b.status, b.message, b.offending), a.id
        assert b.metric == pytest.approx(a.metric), a.id
    assert one.passed == many.passed
