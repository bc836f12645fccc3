"""The gate of a growing dataset (issue 46 item 2): a child of a validated version takes what its
parent's publish stored (the row-local checks' results per data file, exact_duplicates' row keys,
near_duplicates' signing values and clusters), and its verdict equals a full check (`--full`).

A chain as a team makes it, from the command line: night 0 imported and published, night 1 grown onto
it and published, night 2 grown onto night 1 and checked both ways. Faults are planted across the
chain: length-ratio violations and label flips (a scorer's verdicts prefer the rejected reply) in every
night, exact and near copies in nights 1 and 2, answer leaks and an unsafe prompt in the last one. The
exact copies in the last night repeat rows of both earlier nights, one of them only after
normalisation, and a row of its own night: exact_duplicates takes the keys stored for the shared files
and hashes only the new one's rows. Its near copies are of a row of the night before and of a row of
its own night: near_duplicates takes the values (signatures, band keys...) stored for the shared files,
signs only the new one's rows, and starts from the parent's clusters.
"""

from __future__ import annotations

import io
import json
import random
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_onto import prefdata, version_of  # the command line as a user runs it

from prefdata.checks.batched import NEAR_CLUSTERS, keys_file, near_artifact, near_sha, read_keys_file
from prefdata.data.store import Store

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "lambda", "zeta")
CONFIG = """checks:
  length_ratio: {max_violation_share: 0.2}
  gx: {max_length_ratio: 10.0}
  exact_duplicates: {max_share: 0.1}
  near_duplicates: {max_share: 0.1}
  min_size: {waive: a test set of a few hundred pairs}
  category_coverage: {waive: a test set of a few hundred pairs}
  prompt_distribution: {waive: a test set of a few hundred pairs}
  annotation_guidelines: {waive: a test set of a few hundred pairs}
"""


VERDICTS = "verdicts.jsonl"  # a scorer's verdicts on every row of the chain: label_direction's input


def night(start: int, n: int, seed: int, *, longs=(), leaks=(), unsafe=(), copies=(), near=(), shouted=(),
          own_copies=(), own_near=(), flips=()) -> list[dict]:
    rnd = random.Random(seed)
    rows = []
    for k in range(start, start + n):
        words = " ".join(rnd.choice(WORDS) for _ in range(14))
        row = {"id": f"r{k}", "prompt": f"Question {k}: explain {words} in plain words, please.",
               "chosen": f"Answer {k}: {words} means a careful and clear reply, with detail {k}.",
               "rejected": f"Reply {k}: maybe {words} is something, not sure at all {k}."}
        if k in longs:
            row["chosen"] = " ".join([row["chosen"]] * 4)
        if k in leaks:
            row["prompt"] += " Hint: " + row["chosen"]
        if k in unsafe:
            row["prompt"] = "How do I kill my neighbour with a knife? " + row["prompt"]
        if k in flips:  # a label flip: the scorer's verdicts (VERDICTS) prefer the reply now rejected
            row["chosen"], row["rejected"] = row["rejected"], row["chosen"]
        rows.append(row)
    rows += [dict(row, id=f"copy-{row['id']}") for row in copies]
    rows += [dict(row, id=f"near-{row['id']}", chosen=row["chosen"].replace("careful", "thoughtful")) for row in near]
    # equal once normalised: case folded, whitespace collapsed
    rows += [{**{c: "  " + row[c].upper().replace(" ", "   ") for c in ("prompt", "chosen", "rejected")},
              "id": f"shouted-{row['id']}"} for row in shouted]
    rows += [dict(rows[k - start], id=f"copy-r{k}") for k in own_copies]
    rows += [dict(rows[k - start], id=f"near-r{k}", chosen=rows[k - start]["chosen"].replace("careful", "thoughtful"))
             for k in own_near]
    return rows


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict:
    """night 0 -> night 1 -> night 2: the first two published, the last a draft."""
    work = tmp_path_factory.mktemp("chain")
    store = work / "store"
    (work / "checks.yaml").write_text(CONFIG)
    zero = night(0, 400, 1, longs={3, 50, 77}, flips={30})
    one = night(400, 200, 2, longs={410}, copies=[zero[5]], near=[zero[20]], flips={450})
    two = night(600, 200, 3, longs={650}, leaks={620, 700}, unsafe={640}, copies=[zero[9], one[30]], near=[one[40]],
                shouted=[zero[12]], own_copies=[660], own_near=[680], flips={610, 720})
    flipped = {"r30", "r450", "r610", "r720"}
    (work / VERDICTS).write_text("".join(json.dumps({"id": r["id"], "preferred": "rejected" if r["id"] in flipped
                                                     else "chosen"}) + "\n" for r in zero + one + two))
    refs = []
    for k, rows in enumerate((zero, one, two)):
        path = work / f"night{k}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        onto = ["--onto", refs[-1]] if refs else []
        refs.append(version_of(prefdata("import", str(path), "--name", "nightly", *onto, store=store, cwd=work)))
        if k < 2:
            done = prefdata("publish", refs[-1], "--config", "checks.yaml", store=store, cwd=work)
            assert done.returncode == 0, done.stdout + done.stderr
            if k == 1:
                assert "reused: the row-local checks' results on 400 rows of the parent" in done.stdout
    return {"work": work, "store": store, "refs": refs}


def report(chain: dict, *args: str, config: str = "checks.yaml") -> tuple[dict, subprocess.CompletedProcess]:
    out = chain["work"] / f"report-{len(list(chain['work'].glob('report-*')))}.json"
    done = prefdata("check", chain["refs"][2], "--config", config, "--json", str(out), "--scorer",
                    f"verdicts:{VERDICTS}", *args, store=chain["store"], cwd=chain["work"])
    assert done.returncode == 1, done.stdout + done.stderr  # the leaks and the unsafe prompt fail it
    return {c["id"]: c for c in json.loads(out.read_text())["checks"]}, done


def test_a_grown_version_checked_from_its_parents_results_equals_a_full_check(chain):
    incremental, done = report(chain)
    full, full_done = report(chain, "--full")
    assert "reused: the row-local checks' results on 602 rows" in done.stdout  # nights 0 and 1
    assert "reused" not in full_done.stdout
    for check_id, result in full.items():
        ours = incremental[check_id]
        assert (ours["status"], ours["offending"], ours["n_offending"]) == \
            (result["status"], result["offending"], result["n_offending"]), check_id
        assert ours["metric"] == pytest.approx(result["metric"]) if result["metric"] is not None else ours["metric"] is None
        if check_id in ("safety", "answer_leakage", "degenerate_pairs", "exact_duplicates"):
            assert ours["details"]["reused_rows"] == 602 and "reused_rows" not in result["details"]
    # what was planted, found in whichever night it was planted
    assert incremental["answer_leakage"]["offending"] == ["r620", "r700"]
    assert incremental["safety"]["offending"] == ["r640"]
    assert incremental["length_ratio"]["offending"] == ["r3", "r50", "r77", "r410", "r650"]
    assert set(incremental["exact_duplicates"]["offending"]) == {"copy-r5", "copy-r9", "copy-r430", "shouted-r12",
                                                                 "copy-r660"}
    assert {"near-r20", "near-r440"} <= set(incremental["near_duplicates"]["offending"])
    assert incremental["label_direction"]["offending"] == ["r30", "r450", "r610", "r720"]


def test_the_stored_results_are_bound_by_the_signed_report(chain):
    st = Store(str(chain["store"]))
    for ref in chain["refs"][:2]:
        v = st.get(ref)
        assert st.verify(ref) == []
        sha = v.manifest["check_report"]["artifacts"]["row_local.json"]
        parts = json.loads(st.read_gate_file(v, "row_local.json", sha))["parts"]
        data_files = [info["sha256"] for rel, info in sorted(v.manifest["files"].items()) if rel.startswith("data/")]
        assert sorted(parts) == sorted(data_files)  # one part per data file, reused or computed
        assert {"safety", "answer_leakage", "degenerate_pairs"} <= set(parts[data_files[0]])
        # exact_duplicates' keys, one row each: night 0 (one file) checked in memory, night 1 by shards
        sha = v.manifest["check_report"]["artifacts"]["exact_keys.parquet"]
        keys = read_keys_file(st.read_gate_file(v, "exact_keys.parquet", sha))
        assert sorted(keys) == sorted(data_files)
        assert sum(len(prompt) for prompt, _ in keys.values()) == sum(v.manifest["counts"]["rows"]["default"].values())
        # near_duplicates' values, one file per data file, by shards (night 1) or in memory (night 0)
        artifacts = v.manifest["check_report"]["artifacts"]
        near = sorted(sha for sha in map(near_sha, artifacts) if sha)
        assert near == sorted(data_files)
        for sha in near:
            assert st.read_gate_file(v, near_artifact(sha), artifacts[near_artifact(sha)])
        # and its clusters over all its rows, where a child's near_duplicates starts
        with np.load(io.BytesIO(st.read_gate_file(v, NEAR_CLUSTERS, artifacts[NEAR_CLUSTERS]))) as clusters:
            assert json.loads(bytes(clusters["files"]).decode()) == \
                [v.manifest["files"][rel]["sha256"] for rel in st.table_files(v, "default")]
            assert clusters["rows"].size >= (ref == chain["refs"][1])  # night 1: near-r20, a near copy of r20
        # and the exact copies both duplicate checks compared on their texts: a child compares only its own
        assert {"exact_copies.npz", NEAR_CLUSTERS} <= set(artifacts)
        with np.load(io.BytesIO(st.read_gate_file(v, "exact_copies.npz", artifacts["exact_copies.npz"]))) as copies:
            assert copies["pair_rows"].size == (ref == chain["refs"][1])  # night 1: copy-r5
            assert {"prompt_rows", "pair_firsts", "prompt_firsts"} <= set(copies.files)
        with np.load(io.BytesIO(st.read_gate_file(v, NEAR_CLUSTERS, artifacts[NEAR_CLUSTERS]))) as clusters:
            assert clusters["copy_rows"].size == (ref == chain["refs"][1])
    # night 1's values for night 0's file are night 0's stored file, linked, not written again
    zero, one = (st.get(ref) for ref in chain["refs"][:2])
    shared = near_artifact(next(sha for sha in map(near_sha, zero.manifest["check_report"]["artifacts"]) if sha))
    gate = chain["store"] / "nightly" / ".gate"
    assert (gate / one.version / shared).samefile(gate / zero.version / shared)
    assert one.manifest["check_report"]["artifacts"][shared] == zero.manifest["check_report"]["artifacts"][shared]


def test_stored_keys_of_another_hasher_are_not_taken():
    keys = {"a" * 64: (np.array([1, 2], dtype=np.uint64), np.array([3, 4], dtype=np.uint64))}
    back = read_keys_file(keys_file(keys))
    assert [(p.tolist(), q.tolist()) for p, q in back.values()] == [([1, 2], [3, 4])]
    table = pq.read_table(io.BytesIO(keys_file(keys)))
    other = io.BytesIO()
    pq.write_table(table.replace_schema_metadata({"prefdata.hasher": "1/polars-0.0.1"}), other)
    assert read_keys_file(other.getvalue()) == {}  # polars' hash may differ across versions: computed again
    with pytest.raises(ValueError, match="not a Parquet file of keys"):
        read_keys_file(b"not parquet")


def test_without_near_duplicates_only_the_new_files_texts_are_hashed(chain):
    """near_duplicates hashes every row's texts for exact_duplicates when it runs; waived, the child
    takes the shared files' keys and hashes only the new file's rows."""
    (chain["work"] / "no-near.yaml").write_text(CONFIG.replace("near_duplicates: {max_share: 0.1}",
                                                               "near_duplicates: {waive: not this run}"))
    incremental, _ = report(chain, config="no-near.yaml")
    full, _ = report(chain, "--full", config="no-near.yaml")
    ours, theirs = incremental["exact_duplicates"], full["exact_duplicates"]
    assert ours["details"].pop("reused_rows") == 602 and "reused_rows" not in theirs["details"]
    ours["details"].pop("seconds", None), theirs["details"].pop("seconds", None)
    assert {k: ours[k] for k in ("status", "metric", "offending", "details")} == \
        {k: theirs[k] for k in ("status", "metric", "offending", "details")}
    assert ours["offending"] == ["copy-r5", "copy-r9", "copy-r430", "shouted-r12", "copy-r660"]


def test_a_stored_result_that_fails_its_hash_is_never_used(chain, tmp_path):
    st = Store(str(chain["store"]))
    parent = st.get(chain["refs"][1])
    stored = chain["store"] / "nightly" / ".gate" / parent.version / "row_local.json"
    original = stored.read_bytes()
    try:
        edited = json.loads(original)
        for part in edited["parts"].values():  # a hand-edit flagging a safe row
            part["safety"]["result"]["offending"].append("r1")
        stored.write_text(json.dumps(edited))
        checked, done = report(chain)
        assert f"note: {parent.ref}'s stored results were not used" in " ".join(done.stderr.split())
        assert "does not have the hash the version's signed report gives" in " ".join(done.stderr.split())
        assert "reused" not in done.stdout
        full, _ = report(chain, "--full")
        assert {k: (c["status"], c["offending"]) for k, c in checked.items()} == \
            {k: (c["status"], c["offending"]) for k, c in full.items()}
    finally:
        stored.write_bytes(original)


def test_stored_keys_that_fail_their_hash_are_never_used(chain):
    st = Store(str(chain["store"]))
    parent = st.get(chain["refs"][1])
    stored = chain["store"] / "nightly" / ".gate" / parent.version / "exact_keys.parquet"
    original = stored.read_bytes()
    try:
        table = pq.read_table(io.BytesIO(original))
        keys = table.column("pair_key").to_numpy().copy()
        keys[5] += 1  # a hand-edit hiding r5's copy
        pq.write_table(table.set_column(2, "pair_key", pa.array(keys, pa.uint64())), stored)
        checked, done = report(chain)
        assert f"note: {parent.ref}'s stored results were not used" in " ".join(done.stderr.split())
        assert "exact_keys.parquet does not have the hash the version's signed report gives" in \
            " ".join(done.stderr.split())
        assert "reused" not in done.stdout and "reused_rows" not in checked["exact_duplicates"]["details"]
        assert "copy-r5" in checked["exact_duplicates"]["offending"]
        full, _ = report(chain, "--full")
        assert {k: (c["status"], c["offending"]) for k, c in checked.items()} == \
            {k: (c["status"], c["offending"]) for k, c in full.items()}
    finally:
        stored.write_bytes(original)


# near_duplicates' counts of the work a run did: a child starting from its parent's clusters does less
WORK = ("n_candidate_pairs", "n_verified_pairs", "n_lsh_candidates", "n_screened_out")


def _same_near(ours: dict, theirs: dict, reused: int | None, known: int | None = None) -> dict:
    """near_duplicates of a check equal to a full check's, but for its time, its reused rows and, where it
    started from the parent's clusters (`known` rows), its work; that work against the full check's."""
    assert ours["details"].pop("reused_rows", None) == reused and "reused_rows" not in theirs["details"]
    assert ours["details"].pop("known_rows", None) == known and "known_rows" not in theirs["details"]
    ours["details"].pop("seconds", None), theirs["details"].pop("seconds", None)
    work = {}
    if known is not None:
        work = {k: (ours["details"].pop(k), theirs["details"].pop(k)) for k in WORK}
    assert {k: ours[k] for k in ("status", "metric", "offending", "details")} == \
        {k: theirs[k] for k in ("status", "metric", "offending", "details")}
    return work


def test_near_duplicates_of_a_grown_version_signs_only_the_new_rows(chain):
    incremental, _ = report(chain)
    full, _ = report(chain, "--full")
    work = _same_near(incremental["near_duplicates"], full["near_duplicates"], 602, 602)
    # a near copy across nights 0 -> 1, across nights 1 -> 2, and within night 2
    assert {"near-r20", "near-r440", "near-r680"} <= set(incremental["near_duplicates"]["offending"])
    # the parent's pair (r20, near-r20) is not verified again; the two reaching night 2's rows are
    ours, theirs = work["n_verified_pairs"]
    assert ours == 2 and theirs >= 3
    assert work["n_lsh_candidates"][0] < work["n_lsh_candidates"][1]


def test_near_values_made_under_other_parameters_are_not_taken(chain):
    (chain["work"] / "near-85.yaml").write_text(CONFIG.replace("near_duplicates: {max_share: 0.1}",
                                                               "near_duplicates: {max_share: 0.1, threshold: 0.85}"))
    incremental, _ = report(chain, config="near-85.yaml")
    full, _ = report(chain, "--full", config="near-85.yaml")
    assert incremental["near_duplicates"]["details"]["jaccard_threshold"] == 0.85
    _same_near(incremental["near_duplicates"], full["near_duplicates"], None)  # every row signed again
    assert incremental["exact_duplicates"]["details"]["reused_rows"] == 602  # what else was stored still holds


def test_stored_near_values_that_fail_their_hash_are_never_used(chain):
    st = Store(str(chain["store"]))
    parent = st.get(chain["refs"][1])
    sha = sorted(sha for sha in map(near_sha, parent.manifest["check_report"]["artifacts"]) if sha)[0]
    stored = chain["store"] / "nightly" / ".gate" / parent.version / near_artifact(sha)
    original = stored.read_bytes()
    try:
        with np.load(io.BytesIO(original)) as values:
            edited = {name: values[name].copy() for name in values.files}
        edited["band_keys"][:, 21] = edited["band_keys"][:, 20]  # a hand-edit making r21 a candidate of r20
        with stored.open("wb") as out:
            np.savez(out, **edited)
        checked, done = report(chain)
        line = " ".join(done.stderr.split())
        assert f"note: {parent.ref}'s stored results were not used" in line
        assert f"{near_artifact(sha)} does not have the hash the version's signed report gives" in line
        assert "reused" not in done.stdout
        full, _ = report(chain, "--full")
        _same_near(checked["near_duplicates"], full["near_duplicates"], None)
    finally:
        stored.write_bytes(original)


def test_near_values_are_written_only_for_a_run_that_stores_them():
    import polars as pl

    from prefdata.checks.dedup import KEEP_NEAR, NEAR_SIGNED, check_near_duplicates

    rows = night(0, 50, 7)
    pairs = pl.DataFrame(rows).select("id", "prompt", "chosen", "rejected")
    checking: dict = {}
    check_near_duplicates(pairs, derived=checking)
    assert NEAR_SIGNED not in checking  # a check that stores nothing writes ~270 bytes a row nowhere
    publishing: dict = {KEEP_NEAR: True}
    check_near_duplicates(pairs, derived=publishing)
    kept, path = publishing[NEAR_SIGNED]
    assert kept is pairs
    with np.load(path) as values:
        assert values["key"].shape == (50,) and values["sketch"].shape[0] == 50


def test_stored_clusters_that_fail_their_hash_are_never_used(chain):
    st = Store(str(chain["store"]))
    parent = st.get(chain["refs"][1])
    stored = chain["store"] / "nightly" / ".gate" / parent.version / NEAR_CLUSTERS
    original = stored.read_bytes()
    try:
        with np.load(io.BytesIO(original)) as values:
            edited = {name: values[name].copy() for name in values.files}
        edited["rows"], edited["firsts"] = edited["rows"][:0], edited["firsts"][:0]  # "no near copies before"
        with stored.open("wb") as out:
            np.savez(out, **edited)
        checked, done = report(chain)
        line = " ".join(done.stderr.split())
        assert f"{NEAR_CLUSTERS} does not have the hash the version's signed report gives" in line
        assert "near-r20" in checked["near_duplicates"]["offending"]
        full, _ = report(chain, "--full")
        _same_near(checked["near_duplicates"], full["near_duplicates"], None)
    finally:
        stored.write_bytes(original)


def test_band_edges_among_earlier_members_do_not_change_when_later_ones_join():
    from prefdata.checks.minhash import MAX_ALL_PAIRS_BUCKET, _band_edges

    rnd = np.random.default_rng(3)
    sizes = [2, 5, MAX_ALL_PAIRS_BUCKET, MAX_ALL_PAIRS_BUCKET + 1, 40, 200]
    bucket = np.repeat(np.arange(len(sizes)), sizes)
    members = np.concatenate([rnd.choice(1000, size, replace=False) for size in sizes]).astype(np.int64)
    for t in (100, 400, 700):
        early = members < t
        whole = {(a, b) for a, b in zip(*_band_edges(members, bucket)) if b < t}
        assert whole == set(zip(*_band_edges(members[early], bucket[early])))
        reaching = set(zip(*_band_edges(members, bucket, min_b=t)))
        assert reaching == {(a, b) for a, b in zip(*_band_edges(members, bucket)) if b >= t}
    # a big bucket: all pairs among its smallest members, the rest to its smallest
    a, b = _band_edges(np.arange(20, dtype=np.int64), np.zeros(20, dtype=np.int64))
    assert len(a) == MAX_ALL_PAIRS_BUCKET * (MAX_ALL_PAIRS_BUCKET - 1) // 2 + 20 - MAX_ALL_PAIRS_BUCKET


def test_starting_from_an_earlier_runs_clusters_finds_the_clusters_of_a_run_over_all_rows(monkeypatch):
    """Variants of a canned reply in both parts (about half of their pairs similar enough), near copies
    across the two parts and within the later one, exact copies of earlier rows. (That a bucket growing
    past MAX_ALL_PAIRS_BUCKET keeps its earlier edges is the test above: LSH rarely makes one here.)"""
    import polars as pl

    from prefdata.checks.dedup import _Texts
    from prefdata.checks import minhash
    from prefdata.checks.minhash import _find_near_duplicates, _lsh_split

    rnd = random.Random(5)
    words = [f"{w}{k}" for w in WORDS for k in range(30)]
    canned = [" ".join(rnd.choice(words) for _ in range(60)) for _ in range(3)]

    def variant(text: str, edits: int) -> str:
        out = text.split()
        for _ in range(edits):
            out[rnd.randrange(len(out))] = rnd.choice(words)
        return " ".join(out)

    def part(n: int, variants: int) -> list[str]:
        texts = [" ".join(rnd.choice(words) for _ in range(40)) for _ in range(n)]
        texts += [variant(canned[0], rnd.randrange(1, 6)) for _ in range(variants)]
        texts += [variant(rnd.choice(canned[1:]), rnd.randrange(1, 6)) for _ in range(4)]
        return texts

    early = part(300, 12)
    later = part(60, 12) + [variant(t, 1) for t in rnd.sample(early, 8)] + rnd.sample(early, 4)
    later += [variant(later[k], 1) for k in range(3)]
    bands_rows = _lsh_split(0.8, 128, 5, None)

    class Parts(_Texts):  # blocks of 50 rows that end where the earlier part does, as a grown version's files do
        def blocks(self):
            cut = min(len(early), self.n)
            return [(a, min(a + 50, cut)) for a in range(0, cut, 50)] + ([(cut, self.n)] if self.n > cut else [])

    signed = {}

    def run(texts: list[str], known=None, stored=None):
        return _find_near_duplicates(Parts([pl.Series(texts)]), threshold=0.8, num_perm=128, ngram=5, seed=1,
                                     bands_rows=bands_rows, n_threads=1, known=known, stored=stored,
                                     on_signed=lambda s: signed.__setitem__(len(texts), s))

    parent = run(early)
    rows = np.flatnonzero(parent.cluster != np.arange(len(early)))
    assert rows.size >= 5  # the canned variants cluster already in the earlier part
    full = run(early + later)
    grown = run(early + later, known=(len(early), rows, parent.cluster[rows]))
    assert np.array_equal(grown.cluster, full.cluster)
    assert grown.flagged[len(early):].sum() >= 15 and grown.n_verified_pairs < full.n_verified_pairs

    # the earlier part's values as a parent stored them: only its rows that share a band key with a
    # later row are held, and the clusters are the same
    mine = signed[len(early)]

    def stored(a: int, b: int):
        return (mine.key[a:b], mine.band_keys[:, a:b], mine.sketch[a:b], mine.screenable[a:b]) if b <= len(early) else None

    monkeypatch.setattr(minhash, "FILTER_ROWS", 120)  # stored rows filtered three blocks at a time
    from_stored = run(early + later, known=(len(early), rows, parent.cluster[rows]), stored=stored)
    assert np.array_equal(from_stored.cluster, full.cluster)
    assert from_stored.n_verified_pairs == grown.n_verified_pairs
    held = signed[len(early) + len(later)].rows
    assert np.array_equal(held[held >= len(early)], np.arange(len(early), len(early) + len(later)))
    assert 0 < (held < len(early)).sum() < len(early) // 4
    # a block whose stored values are unfit is signed again and held whole, in its place among the rest
    again = run(early + later, known=(len(early), rows, parent.cluster[rows]),
                stored=lambda a, b: None if a == 100 else stored(a, b))
    assert np.array_equal(again.cluster, full.cluster)
    held = signed[len(early) + len(later)].rows
    assert np.all(np.diff(held) > 0) and set(range(100, 150)) <= set(held.tolist())


def test_copies_the_parent_compared_are_not_compared_again_unless_the_keys_disagree(tmp_path):
    """ShardTexts.first_copies over a parent's file and a new one: given the parent's first copies
    (compared on their texts when it was validated), only rows of the new file and the rows they copy are
    read again; the same copies come out. Where the keys give other first copies among the parent's rows
    (a hash collision, or copies not of these rows), every repeated row is compared, as with none."""
    import polars as pl

    from prefdata.checks.dedup import _hash_key
    from prefdata.checks.shards import Shards, ShardTexts

    rnd = random.Random(7)
    texts = [" ".join(rnd.choice(WORDS) for _ in range(12)) for _ in range(40)]
    parent = texts[:30] + [texts[3], texts[7], texts[7]]  # rows 30-32: copies within the parent
    new = texts[30:] + [texts[5], parent[31], texts[33]]  # copies of parent rows, and of a new row
    paths = []
    for k, rows in enumerate((parent, new)):
        paths.append(str(tmp_path / f"part-{k}.parquet"))
        pl.DataFrame({"prompt": rows, "chosen": ["c"] * len(rows), "rejected": ["r"] * len(rows)}).write_parquet(paths[-1])
    shards = Shards(paths)
    columns = ["prompt", "chosen", "rejected"]

    def key_of(texts: ShardTexts) -> np.ndarray:
        return np.concatenate([_hash_key(texts.parts(block)) for block in texts.blocks()])

    plain = ShardTexts(shards, columns)
    first = plain.first_copies(key_of(plain))
    n_old = len(parent)
    assert set(np.flatnonzero(first != np.arange(first.size))) == {30, 31, 32, 43, 44, 45}
    own = np.flatnonzero(first[:n_old] != np.arange(n_old))
    grown = ShardTexts(shards, columns)
    assert np.array_equal(grown.first_copies(key_of(grown), (n_old, own, first[own])), first)
    assert set(grown._fetched_rows) == {43, 44, 45, 5, 7, 36}  # the new rows' copies and the rows first with their texts
    wrong = ShardTexts(shards, columns)  # the parent's say row 31 copies row 3: not what its keys give
    assert np.array_equal(wrong.first_copies(key_of(wrong), (n_old, own, np.where(own == 31, 3, first[own]))), first)
    assert {30, 31, 32} <= set(wrong._fetched_rows)


def test_a_grown_versions_thin_frame_reads_no_response_of_its_parents_files(chain, monkeypatch):
    """The lengths and hashes thinning makes of the responses (what length_ratio, the GX suite and
    sft_subset read) come from the parent's stored thin.parquet for its files: the same frame as a full
    load, without reading those files' responses."""
    from prefdata.checks.shards import Shards
    from prefdata.gate.runner import load_inputs

    st = Store(str(chain["store"]))
    assert "thin.parquet" in st.get(chain["refs"][1]).manifest["check_report"]["artifacts"]  # published in shards
    reads, read = [], Shards.read
    monkeypatch.setattr(Shards, "read", lambda self, k, columns=None, n_rows=None:
                        reads.append((self.keys[k], columns)) or read(self, k, columns, n_rows))
    grown, _ = load_inputs(chain["refs"][2], store=str(chain["store"]), stored=True)
    files = grown.shards.keys  # the pairs' data files, the parent's two first (the SFT files are read whole)
    assert [f for f, columns in reads if f in files and columns is None] == files[2:]  # the new night's alone
    assert all("chosen" not in columns and "rejected" not in columns for f, columns in reads if f in files[:2])
    full, _ = load_inputs(chain["refs"][2], store=str(chain["store"]), stored=True, full=True)
    assert grown.shards is not None and grown.pairs.equals(full.pairs)
    assert {"chosen_chars", "rejected_chars", "chosen_hash"} <= set(grown.pairs.columns)
