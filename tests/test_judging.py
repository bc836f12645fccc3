"""Judges: the two-order protocol, strict parsing, retries and bounded concurrency against real HTTP
servers (a real `transformers serve`, and a scripted local server for faults and known judges);
a real tiny reward model; a rule judge with an arithmetic verifier."""

from __future__ import annotations

import json
import math
import re

import pytest

from prefdata.base.errors import UnusableInput
from prefdata.collect.judging import (
    JudgeReport,
    PairToJudge,
    PairwiseLLMJudge,
    RewardModelJudge,
    RuleJudge,
    Template,
    parse_verdict,
)
from prefdata.data.records import pair_id
from scripted_server import Reply, ScriptedServer, always_a, presented, truthful_arithmetic

# Arithmetic pairs with a known better side: "a" when response_a is right, "b" when response_b is.
ARITH = [("What is 2+3?", "5", "6", "a"), ("What is 7*6?", "41", "42", "b"),
         ("What is 10-4?", "6", "5", "a"), ("What is 9+9?", "17", "18", "b")]


def arith_items() -> list[PairToJudge]:
    return [PairToJudge(q, a, b) for q, a, b, _ in ARITH]


def fast_judge(url: str, **kw) -> PairwiseLLMJudge:
    options = dict(timeout=5.0, max_retries=3, backoff_base=0.05, backoff_max=1.0, concurrency=4)
    return PairwiseLLMJudge(url, "scripted-judge", **{**options, **kw})


# -- parsing and templates ----------------------------------------------------------------------


@pytest.mark.parametrize("reply, vote", [
    ("A is better. [[A]]", "A"), ("[[B]]", "B"), ("equal: [[tie]]", "tie"), ("[[A]] ... so [[A]]", "A"),
    ("[[A]] or [[B]]", None), ("A is better", None), ("[[a]]", None), ("[[C]]", None), ("", None), (None, None),
])
def test_verdict_parsing_is_strict(reply, vote):
    assert parse_verdict(reply) == vote


def test_template_is_a_versioned_file_filled_in_one_pass():
    t = Template.load("pairwise-v1")
    assert (t.name, t.version, len(t.sha256)) == ("pairwise-v1", "1", 16)
    user = t.messages("Q?", "says {response_b}", "B!")[1]["content"]
    assert "says {response_b}" in user and user.count("B!") == 1  # a placeholder inside a response stays text
    with pytest.raises(UnusableInput, match="pairwise-v1"):
        Template.load("no-such-template")


def test_a_template_can_name_its_own_verdict_format(tmp_path, monkeypatch):
    world = Template.load("world-judge-v1")  # the demo world's one-line format: "347+058=A0405|B0395?" -> "A"
    assert world.messages("347+058=", "0405", "0395")[1]["content"] == "347+058=A0405|B0395?"
    assert [world.parse(r) for r in ("A", " B0", "0405", "", None, "[[A]]")] == ["A", "B", None, None, None, None]
    import prefdata.collect.judging as judging

    monkeypatch.setattr(judging, "TEMPLATES", tmp_path)
    (tmp_path / "bad-v1.txt").write_text("=== system ===\ns\n=== user ===\n{prompt}\n=== verdict ===\n(A|B\n")
    with pytest.raises(UnusableInput, match="does not compile"):
        Template.load("bad-v1")
    (tmp_path / "nogroup-v1.txt").write_text("=== system ===\ns\n=== user ===\n{prompt}\n=== verdict ===\nA|B\n")
    with pytest.raises(UnusableInput, match="exactly one group"):
        Template.load("nogroup-v1")


def test_pair_id_defaults_to_the_records_id():
    item = PairToJudge("p", "x", "y")
    assert item.pair_id == pair_id("p", "x", "y") == PairToJudge("p", "y", "x").pair_id


# -- the two-order protocol -----------------------------------------------------------------------


def test_a_judge_that_always_says_A_is_never_believed():
    with ScriptedServer(always_a) as server:
        judge = fast_judge(server.base_url)
        verdicts = judge.judge(arith_items())
    assert len(server.requests) == 2 * len(ARITH)  # every pair asked in both orders
    assert all(v.undecided and v.reason == "position_inconsistent" for v in verdicts)
    assert all(v.votes == ("a", "b") for v in verdicts)  # "[[A]]" twice means a, then b once mapped back
    assert all(v.raw == ("Assistant A is better. [[A]]",) * 2 for v in verdicts)
    report = judge.last_report
    assert (report.n, report.consistent, report.inconsistent, report.undecided) == (4, 0, 4, 4)
    assert report.consistency_rate == 0.0


def test_a_judge_that_answers_the_better_side_gives_consistent_labels():
    with ScriptedServer(truthful_arithmetic) as server:
        judge = fast_judge(server.base_url)
        verdicts = judge.judge(arith_items())
    assert [v.label for v in verdicts] == [truth for *_, truth in ARITH]
    assert all(v.reason == "consistent" and v.confidence == 1.0 for v in verdicts)
    assert all((v.judge_model, v.template, v.template_version) == ("scripted-judge", "pairwise-v1", "1") for v in verdicts)
    # The swapped request really did present response_b first.
    first = [r for r in server.requests if "What is 2+3?" in r.body["messages"][-1]["content"]]
    shown_first = [re.search(r"Assistant A's Answer\]\n(.*?)\n", r.body["messages"][-1]["content"]).group(1) for r in first]
    assert sorted(shown_first) == ["5", "6"]
    assert judge.last_report.consistency_rate == 1.0
    row = json.loads(json.dumps(verdicts[0].as_row()))  # verdicts serialise as plain rows
    assert row["votes"] == ["a", "a"] and row["template_sha256"] == Template.load("pairwise-v1").sha256


def test_ties_in_both_orders_are_a_tie_and_mixed_votes_are_undecided():
    def script(body, i):
        question, shown_a, _ = presented(body)
        if question == "What is 2+3?":
            return Reply(content="[[tie]]")
        return Reply(content="[[A]]" if shown_a == "41" else "[[tie]]")  # "a" in one order, tie in the other

    with ScriptedServer(script) as server:
        verdicts = fast_judge(server.base_url).judge(arith_items()[:2])
    assert (verdicts[0].label, verdicts[0].reason) == ("tie", "consistent")
    assert verdicts[1].undecided and verdicts[1].reason == "position_inconsistent"


def test_unparseable_replies_are_kept_raw_and_undecided():
    with ScriptedServer(lambda body, i: Reply(content="Both [[A]] and [[B]] have merit")) as server:
        verdicts = fast_judge(server.base_url).judge(arith_items())
    assert all(v.undecided and v.reason == "unparseable" and v.raw[0].startswith("Both") for v in verdicts)
    assert all(v.votes == (None, None) for v in verdicts)


# -- retries, backoff, errors -----------------------------------------------------------------------


def test_429_then_500_then_an_answer_is_decided_after_retries_with_exponential_backoff():
    def script(body, i):
        return {0: Reply(429), 1: Reply(500)}.get(i) or truthful_arithmetic(body, i)

    with ScriptedServer(script) as server:
        [verdict] = fast_judge(server.base_url, concurrency=1, backoff_base=0.1).judge(arith_items()[:1])
    assert (verdict.label, verdict.reason, verdict.error) == ("a", "consistent", None)
    assert verdict.attempts == 4  # 3 for the first order, 1 for the swapped one
    t = [r.time for r in server.requests]
    assert t[1] - t[0] >= 0.1 and t[2] - t[1] >= 0.2  # base, then doubled


def test_retry_after_from_a_429_is_honoured():
    def script(body, i):
        return Reply(429, headers={"retry-after": "0.6"}) if i == 0 else truthful_arithmetic(body, i)

    with ScriptedServer(script) as server:
        [verdict] = fast_judge(server.base_url, concurrency=1, backoff_base=0.01).judge(arith_items()[:1])
    assert verdict.label == "a"
    assert server.requests[1].time - server.requests[0].time >= 0.6


def test_a_timeout_is_retried():
    def script(body, i):
        return Reply(delay=2.0, content="[[A]]") if i == 0 else truthful_arithmetic(body, i)

    with ScriptedServer(script) as server:
        [verdict] = fast_judge(server.base_url, concurrency=1, timeout=0.5).judge(arith_items()[:1])
    assert (verdict.label, verdict.attempts) == ("a", 3)


def test_always_500_is_an_undecided_verdict_with_the_error_not_a_crash():
    with ScriptedServer(lambda body, i: Reply(500)) as server:
        judge = fast_judge(server.base_url, max_retries=2)
        verdicts = judge.judge(arith_items())
    assert len(server.requests) == 4 * 2 * 3  # every call tried 1 + max_retries times
    for v in verdicts:
        assert v.undecided and v.reason == "error" and v.raw == (None, None) and v.attempts == 6
        assert "InternalServerError (HTTP 500) (after 3 attempts)" in v.error
    assert judge.last_report.errors == 4 and judge.last_report.consistency_rate is None


def test_client_errors_are_not_retried_and_only_their_pair_fails():
    def script(body, i):
        return Reply(400) if "7*6" in body["messages"][-1]["content"] else truthful_arithmetic(body, i)

    with ScriptedServer(script) as server:
        verdicts = fast_judge(server.base_url).judge(arith_items())
    assert verdicts[1].reason == "error" and verdicts[1].attempts == 2 and "HTTP 400" in verdicts[1].error
    assert [v.label for i, v in enumerate(verdicts) if i != 1] == ["a", "a", "b"]


def test_a_refused_connection_is_an_error_verdict(tmp_path):
    from prefdata.collect.local_serve import free_port

    judge = fast_judge(f"http://127.0.0.1:{free_port()}/v1", max_retries=1)
    [verdict] = judge.judge(arith_items()[:1])
    assert verdict.reason == "error" and "APIConnectionError" in verdict.error


def test_concurrency_is_bounded():
    def script(body, i):
        return Reply(delay=0.1, content=truthful_arithmetic(body, i).content)

    with ScriptedServer(script) as server:
        fast_judge(server.base_url, concurrency=3).judge(arith_items() * 3)
    assert server.max_in_flight == 3


# -- against a real transformers serve ----------------------------------------------------------------


def test_end_to_end_against_transformers_serve(transformers_serve, tiny_llama):
    """A random tiny model cannot follow the verdict format: every pair must come back undecided,
    with both raw replies kept, and nothing may crash."""
    judge = PairwiseLLMJudge(transformers_serve.base_url, str(tiny_llama), concurrency=4, max_tokens=8, timeout=120)
    verdicts = judge.judge(arith_items())
    assert len(verdicts) == len(ARITH)
    for v in verdicts:
        assert v.undecided and v.reason == "unparseable" and v.error is None
        assert len(v.raw) == 2 and all(isinstance(r, str) and r for r in v.raw)
        assert (v.judge_model, v.template, v.template_version) == (str(tiny_llama), "pairwise-v1", "1")
    report = judge.last_report
    assert (report.n, report.unparseable, report.errors, report.decided) == (4, 4, 0, 0)


def test_an_in_process_judge_decides_as_the_reference_judge_does():
    """base_url None: the model runs here (LocalChat), batched, through its chat template. On the demo
    world's judge and template its verdicts are those of world.model_judge, an independent in-process
    implementation of the same reference judge, order by order; and they agree with the verifier."""
    from prefdata.world import build_world, judge_comparisons, model_judge, verdict_agreement

    world = build_world()
    comparisons = judge_comparisons(24)
    items = [PairToJudge(p, a, b) for p, a, b in comparisons]
    judge = PairwiseLLMJudge(None, str(world.judge), "world-judge-v2", max_tokens=8)
    verdicts = judge.judge(items)
    reference = model_judge(world.judge)
    votes = {"A": "a", "B": "b", None: None}
    swap = {"A": "b", "B": "a", None: None}
    for (p, a, b), v in zip(comparisons, verdicts):
        assert v.votes == (votes[reference(p, a, b)], swap[reference(p, b, a)]) and v.error is None
    scored = verdict_agreement(items, verdicts)
    assert judge.last_report.decided >= 18 and scored["agreement_decided"] >= 0.9, scored


def test_an_in_process_judge_needs_a_chat_model(tmp_path):
    from bench.tiny_models import build_tiny_llama

    model = build_tiny_llama(tmp_path / "plain")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in model.glob("chat_template.*"):
        extra.unlink()
    with pytest.raises(UnusableInput, match="has no chat template; an LLM judge needs a chat"):
        PairwiseLLMJudge(None, str(model))


# -- reward model and rule ------------------------------------------------------------------------------


def test_reward_model_judge_labels_by_margin(tiny_reward_model):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    items = [PairToJudge("What is 2+3?", "5", "The answer is six."), PairToJudge("Hi", "hello there", "hey"),
             PairToJudge("Same", "identical", "identical")]
    verdicts = RewardModelJudge(tiny_reward_model, batch_size=2).judge(items)
    # Independent scores, one unpadded text at a time, each ending in eos as TRL's RewardTrainer trains.
    tok = AutoTokenizer.from_pretrained(tiny_reward_model)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_reward_model).eval()
    with torch.inference_mode():
        score = lambda text: model(**tok(text, return_tensors="pt")).logits[0, 0].item()  # noqa: E731
        for item, v in zip(items, verdicts):
            a, b = score(item.prompt + item.response_a + tok.eos_token), score(item.prompt + item.response_b + tok.eos_token)
            assert v.scores == pytest.approx((a, b), abs=1e-4)
            if a != b:
                assert v.confidence == pytest.approx(1 / (1 + math.exp(-abs(a - b))), abs=1e-4)
                assert v.label == ("a" if a > b else "b")
    # equal scores: undecided, as for every scorer (prefdata.base.verdicts), where this judge once said "tie"
    assert (verdicts[2].label, verdicts[2].reason, verdicts[2].confidence) == (None, "equal_scores", None)
    assert all(v.judge == "reward-model" and v.judge_model == str(tiny_reward_model) for v in verdicts)


def answer_is_right(prompt: str, completion: str) -> bool:
    x, op, y = re.fullmatch(r"What is (\d+)([+*-])(\d+)\?", prompt).groups()
    return completion.strip() == str({"+": int(x) + int(y), "-": int(x) - int(y), "*": int(x) * int(y)}[op])


def test_rule_judge_with_an_arithmetic_verifier():
    items = arith_items() + [PairToJudge("What is 1+1?", "2", " 2 "), PairToJudge("What is 1+1?", "3", "4"),
                             PairToJudge("Not arithmetic", "a", "b")]
    judge = RuleJudge(answer_is_right)
    verdicts = judge.judge(items)
    assert [v.label for v in verdicts[:4]] == [truth for *_, truth in ARITH]
    assert all(v.confidence == 1.0 and v.reason == "verifier" for v in verdicts[:4])
    assert [(v.label, v.reason) for v in verdicts[4:]] == [(None, "both_pass"), (None, "both_fail"), (None, "error")]
    assert "AttributeError" in verdicts[6].error  # the verifier's regex did not match: that pair only
    assert verdicts[0].judge_model == "rule:answer_is_right"
    assert judge.last_report.decided == 4 and judge.last_report.errors == 1


def test_rule_judge_with_scores():
    verdicts = RuleJudge(lambda p, c: len(c) / 10, rule_name="length").judge(
        [PairToJudge("p", "short", "much longer"), PairToJudge("p", "abc", "xyz")])
    assert (verdicts[0].label, verdicts[0].scores) == ("b", (0.5, 1.1))
    assert (verdicts[1].label, verdicts[1].reason) == (None, "equal_scores")


def test_report_from_verdicts_counts_every_kind():
    with ScriptedServer(lambda body, i: Reply(content="[[A]]" if "2+3" in body["messages"][-1]["content"] else "meh")) as s:
        verdicts = fast_judge(s.base_url).judge(arith_items())
    report = JudgeReport.from_verdicts(verdicts)
    assert (report.inconsistent, report.unparseable, report.decided) == (1, 3, 0)
    assert "position consistency 0.000" in report.summary()
