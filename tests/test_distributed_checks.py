"""The checklist on a 2-worker Dask LocalCluster (processes, one thread each) gives the same results as
one process: the row-local checks and exact duplicates on 100k realistic pairs (the row-local checks
also the same message and details, merged over the partitions); near duplicates, split isolation and
agreement on realistic pairs with injected near copies, leaked eval prompts and disagreeing votes;
agreement, equal field for field, on PandaLM's real votes, a crowd with missing votes, graded votes,
a failing table and tables it skips or rejects, each pair's votes split over the input partitions;
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
from prefdata.checks.distributed import partition_checks, run_distributed  # noqa: E402
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
              for c in [*partition_checks(), "exact_duplicates"]}
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
    spread = {r.id: r for r in run_distributed(ddf, config, only=[*partition_checks(), "exact_duplicates"])}

    assert set(spread) == set(single)
    for check_id, one in single.items():
        many = spread[check_id]
        assert (many.status, many.offending) == (one.status, one.offending), check_id
        assert many.metric == pytest.approx(one.metric), check_id
        assert many.threshold == one.threshold, check_id
    assert spread["exact_duplicates"].message == single["exact_duplicates"].message  # prompts counted too
    position = {i: k for k, i in enumerate(pairs["id"].to_list())}
    for check_id in partition_checks():  # the partitions' merged details give the check's own message and counts
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
    # in Parquet shards of a third of the file, which the workers read themselves (distributed._Shard)
    sharded, _ = check("--dask", "local:2", "--batch-rows", str(-(-pairs.height // 3)))
    assert one_text == many_text
    for other in (many, sharded):
        assert [c["id"] for c in one] == [c["id"] for c in other]
        for a, b in zip(one, other):
            assert (a["status"], a["metric"], a["message"], a["offending"]) == \
                (b["status"], b["metric"], b["message"], b["offending"]), a["id"]
    assert {c["id"]: c for c in sharded}["degenerate_pairs"]["details"]["partitions"] == 3
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


# -- agreement on Dask: the votes shuffled on pair id, counts per partition -------------------------------

VOTE_PARTS = 4  # input partitions of the votes: more than the workers, so a worker holds several


def _on_dask_and_here(votes, **params):
    """The agreement check on the cluster (4 partitions) and in this process: equal on every field,
    floats bit for bit (the dataclass's ==: status, metric, threshold, offending ids in order,
    message, details), since the partitions' counts add up exactly to the whole table's."""
    from prefdata.checks.agreement import check_agreement
    from prefdata.checks.distributed import agreement

    one = check_agreement(votes, **params)
    many = agreement(votes, partitions=VOTE_PARTS, **params)
    assert many == one, (many, one)
    return one


def _assert_pairs_split_before_the_shuffle(votes, **params):
    """The test data exercises the shuffle: some pair's votes lie in several of the input partitions
    the Dask run starts from, and counting each input partition as it is (no shuffle) would give
    another result."""
    import dask
    import polars as pl

    from prefdata.checks.agreement import agreement_result, check_agreement, merge_vote_stats, vote_stats
    from prefdata.checks.distributed import votes_frame

    ddf, schema = votes_frame(votes, VOTE_PARTS)
    pieces = [pl.from_pandas(p).cast(schema) for p in dask.compute(*ddf.to_delayed())]
    assert len(pieces) == VOTE_PARTS
    home = pl.concat([p.select("pair_id", k=pl.lit(k)) for k, p in enumerate(pieces)]).unique()
    assert home["pair_id"].is_duplicated().any()
    unshuffled = merge_vote_stats([vote_stats(p.drop("_row"), p["_row"]) for p in pieces])
    assert agreement_result(unshuffled, **params) != check_agreement(votes, **params)


@pytest.fixture(scope="module")
def pandalm_votes(shared_data):
    """PandaLM's three human annotators on its 999 test pairs (0 = tie, 1 = response1 better, 2 =
    response2 better), read from the shared data, rows in a random order: a pair's three votes
    land in different input partitions."""
    import json

    import polars as pl

    rows = json.loads((shared_data / "pandalm/testset-v1.json").read_text())
    names = ("annotator1", "annotator2", "annotator3")
    votes = pl.DataFrame([{"pair_id": f"pandalm-{r['idx']:04d}", "annotator": n, "vote": {0: "tie", 1: "a", 2: "b"}[r[n]]}
                          for r in rows for n in names])
    return votes.sample(fraction=1.0, shuffle=True, seed=11)


def test_agreement_on_dask_equals_one_process_on_pandalm(cluster, pandalm_votes):
    _assert_pairs_split_before_the_shuffle(pandalm_votes)
    one = _on_dask_and_here(pandalm_votes)
    assert one.status == "pass" and one.details["n_pairs"] == 999 and len(one.details["cohen_kappa"]) == 3
    assert one.offending and one.details["annotators"][0]["n_votes"] == 999
    assert _on_dask_and_here(pandalm_votes, level="ordinal", threshold=0.9).status == "fail"


def _crowd(n_pairs: int = 600, seed: int = 5):
    """Seven annotators on a/b/tie: six honest at 0.65-0.95, one voting a or b at random; each votes
    on about 60% of the pairs, some votes null; some pairs end up with one vote (unpairable)."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    accuracy = {"ann_95": 0.95, "ann_90": 0.9, "ann_85": 0.85, "ann_80": 0.8, "ann_70": 0.7, "ann_65": 0.65,
                "random": None}
    rows = []
    for p in range(n_pairs):
        truth = str(rng.choice(["a", "b", "tie"], p=[0.45, 0.45, 0.1]))
        for name, acc in accuracy.items():
            if rng.random() > 0.6:
                continue
            if acc is None:
                vote = str(rng.choice(["a", "b"]))
            else:
                vote = truth if rng.random() < acc else str(rng.choice([c for c in ("a", "b", "tie") if c != truth]))
            rows.append({"pair_id": f"q{p:04d}", "annotator": name, "vote": None if rng.random() < 0.05 else vote})
    return pl.DataFrame(rows, schema={"pair_id": pl.String, "annotator": pl.String, "vote": pl.String}).sample(
        fraction=1.0, shuffle=True, seed=seed)


def test_agreement_on_dask_with_missing_votes_and_more_annotators(cluster):
    import numpy as np
    import polars as pl

    votes = _crowd()
    per_pair = votes.drop_nulls("vote").group_by("pair_id").len()
    assert votes["vote"].null_count() > 0 and (per_pair["len"] == 1).any() and per_pair["len"].n_unique() > 3
    _assert_pairs_split_before_the_shuffle(votes)
    one = _on_dask_and_here(votes)
    assert one.details["n_annotators"] == 7 and len(one.details["cohen_kappa"]) == 21
    assert "low-quality annotator(s): random" in one.message  # Dawid-Skene ran on the merged patterns
    assert one.details["n_pairs"] < per_pair.height  # unpairable pairs left out, as in one process
    for level in ("ordinal", "interval"):
        _on_dask_and_here(votes, level=level)

    # numbers on a 1-5 scale, integer pair ids, null votes: pandas must not turn them into floats
    rng = np.random.default_rng(8)
    graded = pl.DataFrame({"pair_id": [p for p in range(300) for _ in range(5)],
                           "annotator": [f"r{k}" for _ in range(300) for k in range(5)],
                           "vote": [None if rng.random() < 0.2 else int(rng.integers(1, 6)) for _ in range(1500)]},
                          schema={"pair_id": pl.Int64, "annotator": pl.String, "vote": pl.Int64})
    graded = graded.sample(fraction=1.0, shuffle=True, seed=1)
    _assert_pairs_split_before_the_shuffle(graded, level="ordinal")
    one = _on_dask_and_here(graded, level="ordinal")
    assert one.details["majority_vote"] in {"1", "2", "3", "4", "5"} and one.offending[0] == "0"
    assert [a["annotator"] for a in one.details["annotators"]] == [f"r{k}" for k in range(5)]


def test_failing_agreement_on_dask_names_the_prevalence_effect(cluster):
    """Near-unanimous votes: three annotators, 260 of 300 pairs all 'a', 40 split one 'b' against
    two 'a': alpha below 0 fails the check, with the prevalence note, on Dask as here."""
    import polars as pl

    votes = pl.DataFrame([{"pair_id": f"u{p:03d}", "annotator": a, "vote": "b" if p >= 260 and k == p % 3 else "a"}
                          for p in range(300) for k, a in enumerate("xyz")]).sample(fraction=1.0, shuffle=True, seed=2)
    _assert_pairs_split_before_the_shuffle(votes)
    one = _on_dask_and_here(votes)
    assert one.status == "fail" and one.metric < 0 and len(one.offending) == 40
    assert "the prevalence effect" in one.message


def test_agreement_on_dask_skips_and_raises_as_one_process(cluster):
    import polars as pl

    from prefdata.checks.agreement import check_agreement
    from prefdata.checks.distributed import agreement

    schema = {"pair_id": pl.String, "annotator": pl.String, "vote": pl.String}
    no_votes = [None, pl.DataFrame(schema=schema),
                pl.DataFrame({"pair_id": ["p1", "p1"], "annotator": ["x", "y"], "vote": [None, None]}, schema=schema),
                pl.DataFrame({"pair_id": ["p1", "p2"], "annotator": ["x", "x"], "vote": ["a", "b"]}),
                pl.DataFrame({"pair_id": ["p1", "p1", "p2", "p2"], "annotator": ["x", "y"] * 2, "vote": ["a"] * 4})]
    reasons = [_on_dask_and_here(votes).message for votes in no_votes]
    assert reasons == ["no annotator votes"] * 2 + ["no pair was labelled by two or more annotators"] * 2 + \
        ["alpha is undefined: every vote on shared pairs is the same"]
    # malformed votes raise the same error: the first repeated vote of the whole table (every
    # partition has one of its own: here p00's is not in the first partition), the unknown votes of all
    ids = [f"p{k:02d}" for k in range(30)]
    twice = pl.DataFrame({"pair_id": ids + ids, "annotator": ["x"] * 60, "vote": ["a", "b"] * 30})
    unknown = pl.DataFrame({"pair_id": ids + ids, "annotator": ["x"] * 30 + ["y"] * 30,
                            "vote": ["a"] * 57 + ["left", "up", "left"]})
    for bad, expected in ((twice, "('p00', 'x')"), (unknown, "['left', 'up']")):
        with pytest.raises(ValueError) as here:
            check_agreement(bad)
        with pytest.raises(ValueError) as there:
            agreement(bad, partitions=3)
        assert str(there.value) == str(here.value) and expected in str(here.value)
