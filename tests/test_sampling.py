"""Samplers on a real tiny model: in process (batched, left-padded) and through a real
`transformers serve`; pairs built from candidates and checked by the checklist's same_policy item."""

from __future__ import annotations

import importlib.util
import logging
import shutil

import polars as pl
import pytest

from prefdata.checks.structure import check_same_policy
from prefdata.base.errors import UnusableInput
from prefdata.data.records import pair_id, prompt_id
from prefdata.collect.pairing import with_repair
from prefdata.collect.sampling import (
    Candidate,
    OpenAICompatibleSampler,
    SamplingParams,
    TransformersSampler,
    VLLMSampler,
    build_pairs,
    model_revision,
    sampler_lineage,
)
from scripted_server import Reply, ScriptedServer

# Different lengths on purpose: in a batch the shorter prompts are left-padded.
PROMPTS = ["12+7=", "What is 3*4? Answer:", "a", "The quick brown fox jumps over the lazy dog and then"]


@pytest.fixture(scope="module")
def sampler(tiny_llama) -> TransformersSampler:
    return TransformersSampler(tiny_llama, batch_size=4)


def test_batched_sampling_returns_n_candidates_per_prompt_with_params(sampler, tiny_llama):
    params = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=10, seed=3)
    out = sampler.sample(PROMPTS, 5, params)
    assert [len(group) for group in out] == [5] * len(PROMPTS)
    for prompt, group in zip(PROMPTS, out):
        for j, c in enumerate(group):
            assert (c.prompt, c.index, c.sampler, c.model) == (prompt, j, "transformers", str(tiny_llama))
            assert c.params == params.as_dict() == {"temperature": 1.0, "top_p": 0.9, "top_k": 0,
                                                     "max_new_tokens": 10, "seed": 3}
            assert c.model_revision == model_revision(tiny_llama) and c.model_revision.startswith("sha256:")
            # Char-level tokenizer: one character per new token, so the prompt was stripped.
            assert len(c.text) <= params.max_new_tokens and c.finish_reason in ("stop", "length")
    assert len({c.text for c in out[3]}) > 1  # sampling really is on


def test_sampling_is_reproducible_from_the_seed(sampler):
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)
    texts = lambda p: [c.text for g in sampler.sample(PROMPTS, 3, p) for c in g]  # noqa: E731
    assert texts(params) == texts(params)
    assert texts(params) != texts(SamplingParams(temperature=1.0, max_new_tokens=8, seed=12))


def test_left_padding_batched_greedy_equals_unbatched_greedy(sampler):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    batched = [g[0].text for g in sampler.sample(PROMPTS, 1, greedy)]
    alone = [sampler.sample([p], 1, greedy)[0][0].text for p in PROMPTS]
    assert batched == alone
    assert len(set(batched)) > 1  # not one degenerate output for every prompt


def test_generation_stops_at_eos(sampler):
    eos = sampler.tokenizer.eos_token
    out = sampler.sample(PROMPTS, 8, SamplingParams(temperature=1.5, max_new_tokens=24, seed=0))
    stopped = [c for g in out for c in g if c.finish_reason == "stop"]
    assert stopped, "seed 0 draws at least one eos in 32 candidates (a random model puts ~1% on it)"
    for c in stopped:
        assert len(c.text) < 24 and eos not in c.text


def test_a_judges_greedy_replies_are_the_greedy_samples_and_leave_the_rng_alone(sampler, tiny_llama):
    """The in-process judge's backend (judging.LocalChat) is this sampler: `greedy` replies are the
    greedy candidates, and, unlike `sample`, it never reseeds torch's RNG, which a seeded sampler
    running beside the judge draws from."""
    import torch

    greedy = [g[0].text for g in sampler.sample(PROMPTS, 1, SamplingParams(temperature=0.0, max_new_tokens=12))]
    torch.manual_seed(21)
    expected = torch.rand(2)
    torch.manual_seed(21)
    assert sampler.greedy(PROMPTS, 12) == greedy
    assert torch.equal(torch.rand(2), expected)
    judge = TransformersSampler(tiny_llama, judge=True)  # a judge's rendering: the chat template, always
    assert judge.rendering.chat and not TransformersSampler(tiny_llama, chat="false").rendering.chat


def test_openai_sampler_against_transformers_serve(transformers_serve, tiny_llama, sampler):
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=5)
    s = OpenAICompatibleSampler(transformers_serve.base_url, str(tiny_llama), concurrency=1)
    out = s.sample(PROMPTS[:2], 3, params)
    assert [len(g) for g in out] == [3, 3]  # the server returns one choice per request: asked again until 3
    for prompt, group in zip(PROMPTS[:2], out):
        assert [c.index for c in group] == [0, 1, 2]
        assert all(c.prompt == prompt and c.params == params.as_dict() and c.sampler == "openai" for c in group)
        assert all(c.model_revision == model_revision(tiny_llama) for c in group)
        assert len({c.request_seed for c in group}) == 3 and len({c.text for c in group}) > 1
    # With concurrency 1 the server's per-request reseeding reproduces the candidates.
    assert [c.text for g in s.sample(PROMPTS[:2], 3, params) for c in g] == [c.text for g in out for c in g]
    # Greedy through the server equals greedy in process: same model, same prompt handling.
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    assert s.sample(PROMPTS[:2], 1, greedy)[0][0].text == sampler.sample(PROMPTS[:1], 1, greedy)[0][0].text


def test_transformers_serve_needs_the_generation_config_to_sample(transformers_serve, tiny_llama):
    """Why `send_generation_config` exists: temperature alone leaves this model's do_sample=False."""
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=5)
    plain = OpenAICompatibleSampler(transformers_serve.base_url, str(tiny_llama), send_generation_config=False)
    assert len({c.text for c in plain.sample(PROMPTS[:1], 3, params)[0]}) == 1


def test_openai_sampler_takes_n_choices_at_once_when_the_server_gives_them():
    def script(body, i):
        return Reply(content=[f"r{i}-{k}" for k in range(body["n"])])

    with ScriptedServer(script) as server:
        out = OpenAICompatibleSampler(server.base_url, "m").sample(["p", "q"], 4, SamplingParams(max_new_tokens=4))
    assert len(server.requests) == 2 and all(r.body["n"] == 4 for r in server.requests)
    assert [len(g) for g in out] == [4, 4] and out[0][0].model_revision is None  # a remote name: no local hash
    config = server.requests[0].body["generation_config"]
    assert '"do_sample": true' in config and '"top_k": 0' in config


def test_api_key_comes_from_the_named_variable_and_is_never_shown(monkeypatch, caplog):
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("PREFDATA_TEST_KEY", secret)
    with ScriptedServer(lambda body, i: Reply(content="x")) as server, caplog.at_level(logging.DEBUG):
        s = OpenAICompatibleSampler(server.base_url, "m", api_key_env="PREFDATA_TEST_KEY")
        out = s.sample(["p"], 1, SamplingParams(max_new_tokens=2))
    assert server.requests[0].headers["authorization"] == f"Bearer {secret}"
    assert secret not in repr(s) and secret not in repr(out) and secret not in caplog.text
    monkeypatch.delenv("PREFDATA_TEST_KEY")
    with pytest.raises(UnusableInput, match="PREFDATA_TEST_KEY"):
        OpenAICompatibleSampler(server.base_url, "m", api_key_env="PREFDATA_TEST_KEY")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_sampler_says_what_to_install(tiny_llama):
    with pytest.raises(UnusableInput, match="pip install vllm"):
        VLLMSampler(tiny_llama)


def test_model_revision_names_the_checkpoint(tiny_llama, tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / commit
    shutil.copytree(tiny_llama, snapshot)
    assert model_revision(snapshot) == commit  # a hub-cache snapshot: its commit
    copy = shutil.copytree(tiny_llama, tmp_path / "copy")
    assert model_revision(copy) == model_revision(tiny_llama)  # same files, same hash, wherever they are
    (copy / "config.json").write_text((copy / "config.json").read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": 3'))
    assert model_revision(copy) != model_revision(tiny_llama)
    assert model_revision(tmp_path / "not-a-folder") is None


def test_sampling_params_are_validated():
    with pytest.raises(ValueError, match="top_p=1.5"):
        SamplingParams(top_p=1.5, max_new_tokens=4)
    assert not SamplingParams(temperature=0, max_new_tokens=4).do_sample


def test_max_new_tokens_has_one_default_the_policys():
    """SamplingParams has no max_new_tokens of its own (it had 64, a third default beside the policy's 256
    and the world's 6 that no caller saw): the collect flow and `prefdata collect` resolve it on their
    Policy (flows/params.py), and that value is what reaches the sampler."""
    import dataclasses

    from prefdata.flows.params import MAX_NEW_TOKENS, WORLD_MAX_NEW_TOKENS, Policy

    with pytest.raises(TypeError, match="max_new_tokens is required"):
        SamplingParams()
    with pytest.raises(TypeError, match="max_new_tokens is required"):
        SamplingParams(temperature=0.7, seed=3)
    assert next(f.default for f in dataclasses.fields(SamplingParams) if f.name == "max_new_tokens") is None
    for policy, expected in ((Policy(model="org/some-model"), MAX_NEW_TOKENS), (Policy(), WORLD_MAX_NEW_TOKENS)):
        # as flows/collect.py builds each chunk's params, positionally
        params = SamplingParams(policy.temperature, policy.top_p, policy.top_k, policy.max_new_tokens, 0)
        assert params.max_new_tokens == policy.max_new_tokens == expected
        assert SamplingParams(**params.as_dict()) == params  # a cached chunk's params read back


# -- pairs ---------------------------------------------------------------------------------------------


def cand(text: str, i: int, revision: str = "sha256:aaaa", prompt: str = "p") -> Candidate:
    return Candidate(prompt, text, "m", revision, SamplingParams(max_new_tokens=8).as_dict(), "transformers", i)


def test_build_pairs_all_skips_identical_candidates():
    cands = [cand("x", 0), cand("y", 1), cand(" X ", 2), cand("z", 3)]  # " X " normalises to "x"
    rows = build_pairs("p", cands)
    assert [(r["response_a"], r["response_b"]) for r in rows] == [("x", "y"), ("x", "z"), ("y", "z")]
    r = rows[0]
    assert r["id"] == r["pair_id"] == pair_id("p", "x", "y") and r["prompt_id"] == prompt_id("p")
    assert (r["model_a"], r["label"], r["candidate_a"], r["candidate_b"]) == ("m@sha256:aaaa", None, 0, 1)


def test_build_pairs_random_and_best_vs_worst():
    cands = [cand(t, i) for i, t in enumerate("abcd")]
    one = build_pairs("p", cands, "random", seed=1)
    assert len(one) == 1 and one == build_pairs("p", cands, "random", seed=1)
    picked = {tuple(build_pairs("p", cands, "random", seed=s)[0][k] for k in ("response_a", "response_b")) for s in range(20)}
    assert len(picked) > 1
    [bw] = build_pairs("p", cands, "best_vs_worst", scores=[0.2, 0.9, 0.1, 0.5])
    # best (b) and worst (c), side A the one sampled first, so the position does not give the label away
    assert (bw["response_a"], bw["response_b"], bw["score_a"], bw["score_b"]) == ("b", "c", 0.9, 0.1)
    assert build_pairs("p", cands, "best_vs_worst", scores=[1, 1, 1, 1]) == []
    with pytest.raises(ValueError, match="best_vs_worst"):
        build_pairs("p", cands, "best_vs_worst")


def test_with_repair_adds_the_first_candidate_the_rule_edits_and_same_policy_reports_its_pairs():
    cands = [cand('"Quoted"', 0), cand("Hello there", 1), cand("Bye", 2)]
    seen = []

    def quote(prompt, text):  # None where there is nothing to fix, as instructions.repair does
        seen.append(text)
        return None if text.startswith('"') else f'"{text}"'

    out = with_repair(cands, quote, "tests:quote")
    assert seen == ['"Quoted"', "Hello there"]  # stops at the first candidate it edits
    assert out[:3] == cands and len(out) == 4
    edited = out[3]
    assert (edited.text, edited.index, edited.sampler, edited.model) == ('"Hello there"', 3, "repair", "m+repair")
    assert edited.params["repair"] == "tests:quote" and edited.params["of"] == 1
    rows = build_pairs("p", out)
    repaired = [r for r in rows if r["response_b"] == '"Hello there"']
    assert {r["response_a"] for r in repaired} == {'"Quoted"', "Hello there", "Bye"}
    assert len({r["pair_id"] for r in rows}) == len(rows)  # every comparison its own id
    frame = pl.DataFrame(rows).rename({"response_a": "chosen", "response_b": "rejected"})
    result = check_same_policy(frame)
    assert result.status == "fail" and result.details["n_different_models"] == len(repaired)
    # a rule that edits nothing, or edits into another candidate's text, adds nothing
    assert with_repair(cands, lambda prompt, text: None, "tests:none") == cands
    assert with_repair(cands, lambda prompt, text: "bye" if text == "Hello there" else None, "tests:other") == cands


def test_a_case_only_repair_replaces_its_source_so_every_comparison_keeps_its_own_id():
    cands = [cand("hello", 0), cand("Hello there", 1), cand("Bye", 2)]
    lower = lambda prompt, text: None if text.islower() else text.lower()  # noqa: E731
    out = with_repair(cands, lower, "tests:lower")
    assert [c.text for c in out] == ["hello", "hello there", "Bye"]  # in place of its source, not beside it
    edited = out[1]
    assert (edited.index, edited.sampler, edited.model, edited.params["of"]) == (1, "repair", "m+repair", 1)
    rows = build_pairs("p", out)
    assert len(rows) == 3 and len({r["pair_id"] for r in rows}) == 3
    assert {(r["response_a"], r["response_b"]) for r in rows} == {
        ("hello", "hello there"), ("hello", "Bye"), ("hello there", "Bye")}


def test_pairs_from_one_policy_pass_same_policy_and_two_revisions_fail(sampler):
    out = sampler.sample(PROMPTS[:2], 3, SamplingParams(max_new_tokens=6, seed=1))
    rows = [r for group in out for r in build_pairs(group[0].prompt, group)]
    frame = pl.DataFrame(rows).rename({"response_a": "chosen", "response_b": "rejected"})
    lineage = {"components": {"sampler": sampler_lineage([c for g in out for c in g])}}
    assert len(lineage["components"]["sampler"]) == 1
    assert check_same_policy(frame, lineage=lineage).status == "pass"
    mixed = build_pairs("p", [cand("x", 0, "sha256:old"), cand("y", 1, "sha256:new")])
    mixed_frame = pl.DataFrame(mixed).rename({"response_a": "chosen", "response_b": "rejected"})
    assert check_same_policy(mixed_frame).status == "fail"
