"""Exact and near-duplicate checks: small hand-written frames, synthetic ground truth, real HH-RLHF."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from prefdata.checks.dedup import (
    check_exact_duplicates,
    check_near_duplicates,
    find_near_duplicates,
    lsh_params,
    normalise_series,
)
from prefdata.data.records import normalise_text

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.synth import jaccard, make_synthetic_pairs  # noqa: E402

PROMPT = (
    "please explain how the tides work and why there are two high tides every day in most places "
    "along the coast even though the moon passes overhead only once"
)


def frame(rows: list[tuple[str, str | None, str, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": [r[0] for r in rows],
            "prompt": [r[1] for r in rows],
            "chosen": [r[2] for r in rows],
            "rejected": [r[3] for r in rows],
        },
        schema={"id": pl.String, "prompt": pl.String, "chosen": pl.String, "rejected": pl.String},
    )


# ----------------------------------------------------------------------------------------------
# exact duplicates


def test_exact_duplicate_pair_fails_and_keeps_first():
    pairs = frame(
        [
            ("a", "What is 2+2?", "4", "5"),
            ("b", "Name a colour.", "Red", "Seven"),
            ("c", "What is 2+2?", "4", "5"),
            ("d", "What is 2+2?", "4", "5"),
        ]
    )
    result = check_exact_duplicates(pairs)
    assert result.id == "exact_duplicates"
    assert result.status == "fail"
    assert result.offending == ("c", "d")
    assert result.metric == pytest.approx(0.5)
    assert result.threshold == 0.0
    assert result.details["n_duplicate_pairs"] == 2
    assert result.details["n_duplicate_prompts"] == 2


def test_case_whitespace_and_unicode_variants_are_exact_duplicates():
    variants = [
        "Hello World, how are you?",
        "  hello   WORLD, how are\tyou?\n",
        "Ｈｅｌｌｏ\u3000Ｗｏｒｌｄ， how are you？",  # full-width forms, ideographic space
        "Hello\u00a0World, how\u2003are you?",  # no-break space, em space
    ]
    assert len({normalise_text(v) for v in variants}) == 1  # the records.py definition agrees
    assert normalise_series(pl.Series(variants)).to_list() == [normalise_text(v) for v in variants]
    pairs = frame([(f"v{i}", v, "Fine, thanks.", "Go away.") for i, v in enumerate(variants)])
    result = check_exact_duplicates(pairs)
    assert result.status == "fail"
    assert result.offending == ("v1", "v2", "v3")
    # and the near-duplicate detector puts them in one cluster (exact duplicates are near duplicates)
    near = check_near_duplicates(pairs)
    assert near.offending == ("v1", "v2", "v3")
    assert near.details["n_clusters"] == 1


def test_repeated_prompt_with_different_responses_is_reported_not_failed():
    pairs = frame(
        [
            ("a", "Write a haiku about rain.", "Soft rain on the roof", "Rain is wet."),
            ("b", "write a haiku about  rain.", "Grey clouds weep softly", "No."),
            ("c", "Something else entirely", "x", "y"),
        ]
    )
    result = check_exact_duplicates(pairs)
    assert result.status == "pass"
    assert result.offending == ()
    assert result.details["n_duplicate_pairs"] == 0
    assert result.details["n_duplicate_prompts"] == 1
    strict = check_exact_duplicates(pairs, fail_on_repeated_prompts=True)
    assert strict.status == "fail"
    assert strict.offending == ("b",)


def test_exact_duplicates_skips_without_columns_or_rows():
    assert check_exact_duplicates(pl.DataFrame({"id": ["a"], "prompt": ["p"]})).status == "skip"
    assert check_exact_duplicates(frame([])).status == "skip"
    assert check_exact_duplicates(frame([("a", "p", "c", "r")])).status == "pass"


# ----------------------------------------------------------------------------------------------
# near duplicates


def test_lsh_parameters_for_the_default_threshold():
    bands, rows = lsh_params(0.8, 128)
    assert (bands, rows) == (25, 5)
    assert 1 - (1 - 0.8**rows) ** bands >= 0.999


def test_near_duplicate_prompt_with_two_words_changed_is_found():
    edited = PROMPT.replace("two high", "two big").replace("most places", "many places")
    assert 0.8 <= jaccard(PROMPT, edited) < 1.0
    pairs = frame(
        [
            ("orig", PROMPT, "Because of gravity.", "Magic."),
            ("other", "Give me a recipe for a vegetarian lasagne with spinach and ricotta.", "a", "b"),
            ("edit", edited, "The moon pulls.", "I don't know."),
        ]
    )
    result = check_near_duplicates(pairs, scope="prompt")
    assert result.id == "near_duplicates"
    assert result.status == "fail"
    assert result.offending == ("edit",)
    assert result.metric == pytest.approx(1 / 3)
    assert result.details["n_clusters"] == 1
    assert result.details["clusters_sample"] == [{"size": 2, "ids": ["orig", "edit"]}]
    assert (result.details["bands"], result.details["rows"]) == (25, 5)
    assert result.details["jaccard_threshold"] == 0.8


def test_distinct_prompts_are_not_flagged():
    prompts = [
        PROMPT,
        "Give me a recipe for a vegetarian lasagne with spinach and ricotta, serves six.",
        "Translate 'good morning, how did you sleep?' into French, German and Spanish.",
        "What were the main causes of the First World War? Answer in three bullet points.",
        "Please explain how the tides work.",  # shares words with PROMPT but is far below 0.8
        "hi",
        "",
    ]
    pairs = frame([(f"p{i}", p, "c", "r") for i, p in enumerate(prompts)])
    result = check_near_duplicates(pairs)
    assert result.status == "pass"
    assert result.offending == ()
    assert result.metric == 0.0


def test_short_empty_and_missing_prompts():
    prompts = {"a": "hi", "b": "HI ", "c": "", "d": None, "e": "ho"}
    pairs = frame([(i, p, "c", "r") for i, p in prompts.items()])
    result = check_near_duplicates(pairs)
    assert result.offending == ("b", "d")  # "HI " ~ "hi"; missing prompt ~ empty prompt


def test_non_ascii_near_duplicates():
    base = "请用简单的语言解释一下为什么天空是蓝色的，以及为什么日落的时候天空会变成红色和橙色，谢谢你的帮助。"
    edited = base.replace("简单", "浅显")
    other = "完全不同的问题：如何做一碗好吃的牛肉面？需要哪些材料？"
    pairs = frame([("a", base, "c", "r"), ("b", other, "c", "r"), ("c", edited, "c", "r")])
    assert check_near_duplicates(pairs).offending == ("c",)


def test_on_pair_uses_responses_too():
    long_a = " ".join(f"alpha{i}" for i in range(60))
    long_b = " ".join(f"beta{i}" for i in range(60))
    pairs = frame([("a", PROMPT, long_a, long_a[::-1]), ("b", PROMPT, long_b, long_b[::-1])])
    assert check_near_duplicates(pairs, scope="prompt").offending == ("b",)
    by_pair = check_near_duplicates(pairs, scope="pair")
    assert by_pair.offending == ()
    assert by_pair.details["scope"] == "pair"
    same = frame([("a", PROMPT, long_a, "no"), ("b", PROMPT.upper(), long_a + " !", "no")])
    assert check_near_duplicates(same, scope="pair").offending == ("b",)


def test_max_share_and_skips():
    pairs = frame([("a", PROMPT, "c", "r"), ("b", PROMPT, "c", "r"), ("c", "other text here", "c", "r")])
    assert check_near_duplicates(pairs).status == "fail"
    relaxed = check_near_duplicates(pairs, max_share=0.5)
    assert relaxed.status == "pass" and relaxed.threshold == 0.5 and relaxed.offending == ("b",)
    assert check_near_duplicates(frame([])).status == "skip"
    assert check_near_duplicates(pl.DataFrame({"id": ["a"], "prompt": ["p"]}), scope="pair").status == "skip"
    with pytest.raises(ValueError):
        check_near_duplicates(pairs, scope="response")


def _edited_pairs(*, seed: int, n: int, words: int, max_edits: int) -> tuple[list[str], list[str]]:
    """n random texts of `words` words and a copy of each with 1..max_edits words replaced."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}x{'y' * (i % 5)}" for i in range(3000)]
    original = rng.integers(0, len(vocab), size=(n, words))
    edited = original.copy()
    for i, k in enumerate(rng.integers(1, max_edits + 1, size=n)):
        pos = rng.choice(words, size=k, replace=False)
        edited[i, pos] = rng.integers(0, len(vocab), size=k)
    return ([" ".join(vocab[j] for j in row) for row in original],
            [" ".join(vocab[j] for j in row) for row in edited])


def test_flagged_exactly_when_shingle_jaccard_reaches_threshold():
    """Against exact Jaccard on 1,500 random pairs edited by 1-6 words: every flagged pair is >= 0.8
    (verification is exact) and every pair >= 0.8 is found (LSH recall; deterministic seeds)."""
    n = 1500
    base, other = _edited_pairs(seed=7, n=n, words=30, max_edits=6)
    found = find_near_duplicates(pl.Series(base + other))
    flagged_pair = found.cluster[n:] == np.arange(n)
    exact = np.array([jaccard(a, b) for a, b in zip(base, other)])
    assert (exact >= 0.8).sum() > 200 and (exact < 0.8).sum() > 200  # both sides are exercised
    assert not flagged_pair[exact < 0.8].any()
    assert flagged_pair[exact >= 0.8].all()


# ----------------------------------------------------------------------------------------------
# synthetic ground truth


@pytest.fixture(scope="module")
def synthetic():
    return make_synthetic_pairs(20_000, seed=3)


def test_synthetic_generator_ground_truth(synthetic):
    pairs, truth = synthetic
    assert pairs.columns == [
        "id", "pair_id", "prompt_id", "prompt", "chosen", "rejected", "category", "split"
    ]
    assert pairs["id"].n_unique() == pairs.height == 20_000
    assert pairs["id"][0] == "p0000001"
    lists = [set(v) for v in truth.values()]
    assert all(len(s) == 200 for s in lists)
    assert len(set().union(*lists)) == sum(len(s) for s in lists)  # disjoint
    by_id = {r["id"]: r for r in pairs.iter_rows(named=True)}
    # every near duplicate has an earlier prompt with shingle Jaccard >= 0.8 (the generator's own check,
    # repeated). At most 2 of 29 words changed, so one of three word segments is unchanged: index them.
    prompts = pairs["prompt"].to_list()
    segments: dict[tuple[int, str], list[int]] = {}
    for row, p in enumerate(prompts):
        words = p.split(" ")
        for k in range(3):
            segments.setdefault((k, " ".join(words[9 * k : 9 * k + 9])), []).append(row)
    for pid in truth["near_duplicates"]:
        row = int(pid[1:]) - 1
        words = prompts[row].split(" ")
        earlier = {r for k in range(3) for r in segments[(k, " ".join(words[9 * k : 9 * k + 9]))] if r < row}
        assert max(jaccard(prompts[row], prompts[r]) for r in earlier) >= 0.8
    for pid in truth["length_ratio"]:
        c, r = len(by_id[pid]["chosen"]), len(by_id[pid]["rejected"])
        assert max(c, r) > 2 * min(c, r)
    for pid in truth["answer_leakage"]:
        assert by_id[pid]["chosen"] in by_id[pid]["prompt"]


def test_exact_check_on_synthetic_finds_exactly_the_injected_copies(synthetic):
    pairs, truth = synthetic
    result = check_exact_duplicates(pairs)
    assert set(result.offending) == set(truth["exact_duplicates"])


def test_blocks_and_batches_change_nothing(synthetic, monkeypatch):
    """Texts are normalised and hashed a block of rows at a time, hash-equal rows compared in batches
    and verification split by bytes: tiny blocks and batches must give exactly the default results,
    hash collisions included (they fall back to grouping on the texts)."""
    from prefdata.checks import dedup
    from prefdata.checks.isolation import check_split_isolation, split_train_eval

    pairs = synthetic[0].head(3000)
    variants = frame([("u0", "Ｈｅｌｌｏ\u3000Ｗｏｒｌｄ", " x ", "y"), ("u1", "hello   WORLD", "X", "Y"),
                      ("u2", None, "", None)])
    pairs = pl.concat([pairs.select(variants.columns), variants, pairs.head(50).select(variants.columns)])
    every_fifth = pl.int_range(pl.len()) % 5 == 0
    pairs = pairs.with_columns(split=pl.when(every_fifth).then(pl.lit("test")).otherwise(pl.lit("train")))

    def run():
        found = find_near_duplicates(pairs["prompt"])
        out = [found.cluster.tolist(), found.exact.tolist(), found.n_candidate_pairs, found.n_verified_pairs]
        for result in (check_exact_duplicates(pairs), check_near_duplicates(pairs),
                       check_near_duplicates(pairs, scope="prompt"),
                       check_split_isolation(*split_train_eval(pairs))):
            out.append((result.status, result.metric, result.offending, result.details))
        return out

    expected = run()
    assert expected[4][1] > 0 and expected[5][1] > 0  # duplicates are there to find
    monkeypatch.setattr(dedup, "BLOCK_BYTES", 5_000)
    monkeypatch.setattr(dedup, "COMPARE_ROWS", 3)
    monkeypatch.setattr(dedup, "VERIFY_BYTES", 2_000)
    assert run() == expected
    real = dedup._hash_key
    monkeypatch.setattr(dedup, "_hash_key", lambda columns, seed=0: real(columns, seed) & np.uint64(7))
    assert run() == expected


def test_near_check_on_synthetic_recall_and_no_false_positives(synthetic):
    pairs, truth = synthetic
    result = check_near_duplicates(pairs)
    flagged = set(result.offending)
    near, exact = set(truth["near_duplicates"]), set(truth["exact_duplicates"])
    assert len(flagged & near) / len(near) >= 0.95
    assert flagged & exact == exact
    assert flagged - near - exact == set()  # no clean row flagged


# ----------------------------------------------------------------------------------------------
# real data: Anthropic HH-RLHF harmless-base test split

ASSISTANT = "\n\nAssistant:"


def hh_frame(path: Path) -> pl.DataFrame:
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            record = json.loads(line)
            chosen, rejected = record["chosen"], record["rejected"]
            cut = os.path.commonprefix([chosen, rejected]).rfind(ASSISTANT)
            if cut < 0:
                continue
            end = cut + len(ASSISTANT)
            rows.append((f"hh{i:05d}", chosen[:end], chosen[end:], rejected[end:]))
    return frame(rows)


def test_real_hh_rlhf_near_duplicates_cover_exact_duplicates(shared_data):
    pairs = hh_frame(shared_data / "hh-rlhf-harmless" / "test.jsonl.gz")
    assert pairs.height > 2000
    prompts = pairs["prompt"].to_list()

    # the plain-Python reference: rows whose normalised prompt was seen before, and where first seen
    first_seen: dict[str, int] = {}
    repeats = {}
    for i, p in enumerate(prompts):
        key = normalise_text(p)
        if key in first_seen:
            repeats[i] = first_seen[key]
        else:
            first_seen[key] = i
    assert repeats, "the harmless test split has repeated prompts"

    exact = check_exact_duplicates(pairs)
    assert exact.details["n_duplicate_prompts"] == len(repeats)

    found = find_near_duplicates(pairs["prompt"])
    for row, first in repeats.items():
        assert found.flagged[row]
        assert found.cluster[row] == found.cluster[first]
    result = check_near_duplicates(pairs, scope="prompt")
    assert set(result.offending) >= set(pairs["id"].gather(list(repeats)).to_list())
    assert result.details["n_clusters"] >= 1


def _reuse_frame(n: int = 2000, n_near: int = 20) -> tuple[pl.DataFrame, set[str]]:
    """Heavy reuse, as in UltraFeedback-style data: every pair has its own prompt, but all share one
    chosen reply and half share one canned refusal as the rejected reply. Sharing a long chosen
    reply puts the pairs at Jaccard ~0.5-0.7 (below 0.8: not near duplicates) and makes them LSH
    candidates of each other by the thousand. `n_near` copies with one word changed are the only
    near duplicates."""
    rng = np.random.default_rng(11)
    vocab = [f"v{i}q{'z' * (i % 4)}" for i in range(4000)]

    def text(words: int) -> str:
        return " ".join(vocab[j] for j in rng.integers(0, len(vocab), size=words))

    chosen = text(90)  # ~600 characters, in every pair
    refusal = "I'm sorry, but I can't help with that."
    rows = [(f"r{i}", text(25), chosen, refusal if i % 2 else text(35)) for i in range(n)]
    near = set()
    for k in range(n_near):
        src = rows[int(rng.integers(0, n))]
        words = src[1].split()
        words[int(rng.integers(0, len(words)))] = "changed"
        rows.append((f"near{k}", " ".join(words), src[2], src[3]))
        near.add(f"near{k}")
    return frame(rows), near


def test_heavy_reuse_keeps_verdicts_and_bounds_exact_verifications():
    pairs, near = _reuse_frame()
    result = check_near_duplicates(pairs)
    assert set(result.offending) == near  # the same verdicts: exactly the edited copies
    d = result.details
    # LSH proposes tens of thousands of candidates among pairs sharing the chosen reply (each
    # distinct pair counted once, however many bands it meets in)...
    assert d["n_lsh_candidates"] > 20_000
    # ...and exact Jaccard (the costly part) runs only where the signatures' estimate is near the
    # threshold: here at most half of them (it was every candidate, 62,545, before the screen)
    assert d["n_candidate_pairs"] + d["n_screened_out"] == d["n_lsh_candidates"]
    assert d["n_candidate_pairs"] <= d["n_lsh_candidates"] // 2
    assert d["n_verified_pairs"] >= len(near)


def test_signature_screen_never_drops_a_pair_at_the_threshold():
    """Long texts (the screen applies): every pair with exact Jaccard >= 0.8 is still found, none below."""
    n = 600
    base, other = _edited_pairs(seed=5, n=n, words=100, max_edits=21)
    found = find_near_duplicates(pl.Series(base + other))
    flagged_pair = found.cluster[n:] == np.arange(n)
    exact = np.array([jaccard(a, b) for a, b in zip(base, other)])
    assert (exact >= 0.8).sum() > 100 and ((exact < 0.8) & (exact > 0.6)).sum() > 100
    assert not flagged_pair[exact < 0.8].any()
    assert flagged_pair[exact >= 0.8].all()


def test_fine_screen_keeps_pairs_at_the_threshold_and_stops_most_far_below():
    """Before exact Jaccard, candidates are screened again on a longer second signature
    (minhash._fine_screen): no pair at or above the threshold is dropped there, and most pairs at
    Jaccard 0.45-0.6, which the first screen (128 values) lets through, stop there."""
    from prefdata.checks import minhash

    n = 800
    base, other = _edited_pairs(seed=9, n=n, words=100, max_edits=40)
    texts = pl.Series(base + other)
    exact = np.array([jaccard(a, b) for a, b in zip(base, other)])
    a, b = np.arange(n), n + np.arange(n)
    data, offsets = minhash._texts_buffer(texts)
    sketch = minhash._signature_chunk(data, offsets, 0, 2 * n, 5, 128, 0, minhash._Densifier(128, 0))
    first = minhash._Screen(sketch.astype(np.uint8), np.ones(2 * n, dtype=bool), 0.8)(a, b)
    fine = minhash._fine_screen(texts, a, b, 5, 0.8)
    far_below = (exact >= 0.45) & (exact < 0.6)
    assert (exact >= 0.8).sum() > 50 and far_below.sum() > 50
    assert fine[exact >= 0.8].all() and first[exact >= 0.8].all()
    assert first[far_below].mean() > 0.3  # what exact verification used to pay for
    assert fine[far_below].mean() < 0.05
    # too short, or long but repeating a few shingles (its values would be borrowed, not drawn):
    # not screened, left to exact verification; a long pair of other texts is screened out
    repeating = pl.Series(["short text", "short text!", "abcdefghijk " * 80, "zyxwvutsrqp " * 80, base[0], base[1]])
    screened = minhash._fine_screen(repeating, np.array([0, 2, 4]), np.array([1, 3, 5]), 5, 0.8)
    assert screened.tolist() == [True, True, False]


def test_realistic_generator_is_deterministic_and_its_truth_is_what_the_checks_find():
    from bench.realistic import make_realistic_pairs

    pairs, truth = make_realistic_pairs(6000, seed=4)
    again, truth_again = make_realistic_pairs(6000, seed=4)
    assert pairs.equals(again) and truth == truth_again
    injected = set(truth["exact_duplicates"]) | set(truth["near_duplicates"])
    exact, near = check_exact_duplicates(pairs), check_near_duplicates(pairs)
    assert set(exact.offending) == set(truth["exact_duplicates"])
    assert set(truth["near_duplicates"]) <= set(near.offending) <= injected | set(truth["identical_responses"])
    # three pairs share each prompt and chosen reply, and canned refusals repeat, yet no clean pair
    # is a near duplicate of its siblings
    assert len(truth["refusal_rows"]) > 200 and pairs["chosen"].n_unique() <= pairs.height // 3 + len(injected) + 60


def test_realistic_generator_shapes_pairs_like_real_collections():
    """The default shape: the replies sampled for one prompt start alike and canned replies are reused,
    also as the chosen reply; shape="plain" is the earlier generator (no shared starts)."""
    from bench.realistic import CANNED, make_realistic_pairs

    pairs, truth = make_realistic_pairs(6000, seed=4)
    plain, plain_truth = make_realistic_pairs(6000, seed=4, shape="plain")
    clean = pairs.height // 10  # no fault before this row: the same prompts, other replies
    assert pairs["id"].equals(plain["id"]) and pairs["prompt"].head(clean).equals(plain["prompt"].head(clean))
    assert {k: v for k, v in truth.items() if k.endswith("duplicates")} == \
        {k: v for k, v in plain_truth.items() if k.endswith("duplicates")}

    def shared_start(frame):  # characters chosen and rejected have in common at the start, over the shorter
        c, r = frame["chosen"].to_list(), frame["rejected"].to_list()
        return np.array([len(os.path.commonprefix([a, b])) / max(1, min(len(a), len(b))) for a, b in zip(c, r)])

    assert np.median(shared_start(pairs)) > 0.2 and np.median(shared_start(plain)) < 0.01
    canned = pairs.filter(pl.col("id").is_in(truth["canned_chosen_rows"]))
    assert canned.height > 50 and canned["chosen"].is_in(list(CANNED)).all()
    assert pairs["rejected"].is_in(list(CANNED)).sum() >= len(truth["refusal_rows"])


def test_exact_duplicates_reuse_the_hashes_near_duplicates_made(synthetic, monkeypatch):
    """The checklist shares one normalisation pass: check_near_duplicates (scope pair) leaves the
    exact check's row hashes in `derived`, and check_exact_duplicates uses them instead of
    normalising every text again. Results are identical with and without the sharing, hash
    collisions included (hash-equal rows are still compared on their texts)."""
    from prefdata.checks import dedup

    pairs = synthetic[0].head(3000)
    variants = frame([("u0", "Ｈｅｌｌｏ\u3000Ｗｏｒｌｄ", " x ", "y"), ("u1", "hello   WORLD", "X", "Y"),
                      ("u2", None, "", None), ("u3", "hello world", "x", "y")])
    pairs = pl.concat([pairs.select(variants.columns), variants, pairs.head(50).select(variants.columns)])

    def run(shared: bool):
        derived: dict | None = {} if shared else None
        near = check_near_duplicates(pairs, derived=derived)
        if shared:
            assert derived, "near_duplicates left nothing to share"
        exact = check_exact_duplicates(pairs, derived=derived)
        exact_prompts = check_exact_duplicates(pairs, fail_on_repeated_prompts=True, derived=derived)
        return [(r.status, r.metric, r.offending, r.details) for r in (near, exact, exact_prompts)]

    expected = run(False)
    assert expected[1][1] > 0 and len(expected[1][2]) >= 53  # the copies and u1, u3 are there to find
    assert run(True) == expected
    real = dedup._hash_key
    monkeypatch.setattr(dedup, "_hash_key", lambda columns, seed=0: real(columns, seed) & np.uint64(7))
    assert run(True) == expected
    # a frame the hashes were not made for is never given them
    other = pairs.head(100)
    derived: dict = {}
    check_near_duplicates(pairs, derived=derived)
    alone = check_exact_duplicates(other)
    assert check_exact_duplicates(other, derived=derived).offending == alone.offending


def test_reused_texts_normalise_to_what_each_row_normalises_to():
    """Blocks normalise each distinct text once (shared replies, canned refusals) and gather it back:
    the same Series as normalising every row, nulls and non-ASCII text included."""
    from prefdata.checks import dedup

    texts = ["Ｈｅｌｌｏ\u3000Ｗｏｒｌｄ", "hello   WORLD", None, "Straße", "x", "x", None, "Ｈｅｌｌｏ\u3000Ｗｏｒｌｄ"] * 50
    texts += [f"unique text {k}" for k in range(20)]
    series = pl.Series("t", texts, dtype=pl.String)
    assert dedup._normalise_reused(series).equals(normalise_series(series))
    distinct = pl.Series("t", [f"Text  {k}" for k in range(100)])  # no reuse: the plain path
    assert dedup._normalise_reused(distinct).equals(normalise_series(distinct))
