"""Routing: each rule, the deterministic audit share, the human queue file."""

from __future__ import annotations

import json

import pytest

from prefdata.collect.judging import PairToJudge, RuleJudge, Verdict
from prefdata.collect.routing import BLIND_FIELDS, RoutingPolicy, in_audit, route, route_counts, write_queue


def item(i: int, category: str | None = None) -> PairToJudge:
    return PairToJudge(f"prompt {i}", f"answer a {i}", f"answer b {i}", category=category)


def verdict(it: PairToJudge, label: str | None = "a", confidence: float | None = 1.0, reason: str = "consistent") -> Verdict:
    return Verdict(it.pair_id, label, confidence, reason, "llm-pairwise", "judge-m", "pairwise-v1", "1")


NO_AUDIT = RoutingPolicy(audit_share=0.0)


def one(it, v, policy=NO_AUDIT) -> tuple[str, str]:
    [row] = route([it], [v], policy)
    return row["route"], row["route_reason"]


def test_a_confident_decided_verdict_is_used():
    assert one(item(1), verdict(item(1))) == ("judge", "judge_decided")


def test_undecided_goes_to_humans_with_the_judges_reason():
    it = item(1)
    assert one(it, verdict(it, None, None, "position_inconsistent")) == ("human", "judge_position_inconsistent")
    assert one(it, verdict(it, None, None, "error")) == ("human", "judge_error")


def test_low_confidence_goes_to_humans():
    it = item(1)
    assert one(it, verdict(it, "b", 0.79)) == ("human", "low_confidence")
    assert one(it, verdict(it, "b", 0.8)) == ("judge", "judge_decided")  # the threshold itself passes
    assert one(it, verdict(it, "b", 0.6), RoutingPolicy(min_confidence=0.5, audit_share=0)) == ("judge", "judge_decided")


def test_configured_categories_always_go_to_humans():
    it = item(1, category="Safety")
    assert one(it, verdict(it)) == ("human", "category_safety")  # case-insensitive, judge ignored
    policy = RoutingPolicy(human_categories=("medical",), audit_share=0)
    assert one(it, verdict(it), policy) == ("judge", "judge_decided")
    assert one(item(2, "medical"), verdict(item(2)), policy) == ("human", "category_medical")
    with pytest.raises(ValueError, match="tuple"):
        RoutingPolicy(human_categories="safety")


def test_audit_share_is_deterministic_and_close_to_the_share():
    items = [item(i) for i in range(4000)]
    verdicts = [verdict(it) for it in items]
    policy = RoutingPolicy(audit_share=0.1, seed=7)
    rows = route(items, verdicts, policy)
    audited = [r["pair_id"] for r in rows if r["route"] == "both"]
    assert all(r["route_reason"] == "audit" for r in rows if r["route"] == "both")
    assert 0.085 < len(audited) / len(rows) < 0.115  # binomial(4000, 0.1): sd 0.0047, this is > 3 sd
    assert audited == [r["pair_id"] for r in route(items, verdicts, policy) if r["route"] == "both"]
    other_seed = {r["pair_id"] for r in route(items, verdicts, RoutingPolicy(audit_share=0.1, seed=8)) if r["route"] == "both"}
    assert other_seed != set(audited)
    assert in_audit("x", 1.0, 0) and not in_audit("x", 0.0, 0)


def test_audit_only_samples_pairs_the_judge_decided():
    items = [item(i) for i in range(200)]
    rows = route(items, [verdict(it, None, None, "unparseable") for it in items], RoutingPolicy(audit_share=1.0))
    assert {r["route"] for r in rows} == {"human"}


def test_rows_record_the_verdict_and_route():
    it = item(3)
    [row] = route([it], [verdict(it, "b", 0.9)], NO_AUDIT)
    assert row["pair_id"] == it.pair_id and (row["judge_label"], row["judge_confidence"]) == ("b", 0.9)
    assert (row["judge_model"], row["judge_template"], row["judge_template_version"]) == ("judge-m", "pairwise-v1", "1")
    with pytest.raises(ValueError, match="one order"):
        route([item(1), item(2)], [verdict(item(2)), verdict(item(1))])


def test_write_queue_holds_the_human_and_audit_rows(tmp_path):
    items = [item(0), item(1, "safety"), item(2), item(3)]
    verdicts = [verdict(items[0]), verdict(items[1]), verdict(items[2], None, None, "unparseable"), verdict(items[3])]
    rows = route(items, verdicts, RoutingPolicy(audit_share=0.0))
    rows[3] = {**rows[3], "route": "both", "route_reason": "audit"}
    path = tmp_path / "queue" / "human.jsonl"
    assert write_queue(path, rows) == 3
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert [w["pair_id"] for w in written] == [items[1].pair_id, items[2].pair_id, items[3].pair_id]
    assert all(set(BLIND_FIELDS) <= set(w) for w in written)
    assert route_counts(rows) == {"route": {"judge": 1, "human": 2, "both": 1},
                                  "route_reason": {"judge_decided": 1, "category_safety": 1,
                                                   "judge_unparseable": 1, "audit": 1}}
    with pytest.raises(ValueError, match="route it first"):
        write_queue(path, [{"pair_id": "x"}])


def test_sample_pair_judge_route_end_to_end(tiny_llama, tmp_path):
    """The whole chain on real components: a tiny policy samples, pairs are built, a rule judges
    (a random model never answers right, so every pair is both_fail) and all go to humans."""
    from prefdata.collect.sampling import SamplingParams, TransformersSampler, build_pairs

    prompts = ["What is 2+3?", "What is 4*4?"]
    groups = TransformersSampler(tiny_llama).sample(prompts, 3, SamplingParams(max_new_tokens=4, seed=0))
    pairs = [PairToJudge(r["prompt"], r["response_a"], r["response_b"], r["pair_id"])
             for g in groups for r in build_pairs(g[0].prompt, g)]
    assert pairs
    verdicts = RuleJudge(lambda p, c: c.strip() == {"What is 2+3?": "5", "What is 4*4?": "16"}[p]).judge(pairs)
    rows = route(pairs, verdicts)
    assert write_queue(tmp_path / "q.jsonl", rows) == len(pairs)
    assert {r["route_reason"] for r in rows} == {"judge_both_fail"}


def test_a_conversations_turns_ride_to_the_human_queue(tmp_path):
    """The judge reads the conversation's text; the queue (and Argilla's chat field) gets its turns."""
    turns = json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                        {"role": "user", "content": "prompt 9"}])
    chat = PairToJudge("User: hi\n\nAssistant: hello\n\nUser: prompt 9", "x", "y", prompt_messages=turns)
    plain = item(8)
    rows = route([chat, plain], [verdict(chat, None, None, "unparseable"), verdict(plain, None, None, "unparseable")],
                 NO_AUDIT)
    path = tmp_path / "queue.jsonl"
    assert write_queue(path, rows) == 2
    written = [json.loads(line) for line in path.read_text().splitlines()]
    assert written[0]["prompt_messages"] == turns and "prompt_messages" not in written[1]
