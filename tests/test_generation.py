"""The one generate loop (prefdata/models/generation.py) on a real tiny Llama: greedy is the argmax of
each step, batches with left padding decode as prompts alone do, a seeded sample is transformers' own
with that seed, rows end at their first stop id, and the context and the RNG are respected."""

from __future__ import annotations

import pytest
import torch

from prefdata.models.generation import Decoding, generate, generate_batch, stop_ids

# Different lengths on purpose: in a batch the shorter prompts are left-padded.
PROMPTS = ["12+7=", "What is 3*4? Answer:", "a", "The quick brown fox jumps over the lazy dog and then"]


@pytest.fixture(scope="module")
def lm(tiny_llama):
    from prefdata.models.loading import load_causal_lm, load_tokenizer

    return load_causal_lm(tiny_llama).eval(), load_tokenizer(tiny_llama)


def argmax_steps(model, tokenizer, text: str, steps: int) -> list[int]:
    """Greedy by hand: one prompt, no padding, no cache, the argmax of each step's logits, up to the eos."""
    ids = tokenizer(text)["input_ids"]
    new: list[int] = []
    with torch.no_grad():
        while len(new) < steps and tokenizer.eos_token_id not in new:
            logits = model(torch.tensor([ids + new])).logits[0, -1]
            new.append(int(logits.argmax()))
    return new


def until_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[:tokens.index(eos)] if eos in tokens else tokens


def test_greedy_is_the_argmax_of_each_step(lm):
    model, tok = lm
    rows = generate(model, tok, PROMPTS, Decoding(max_new_tokens=8))
    by_hand = [argmax_steps(model, tok, p, 8) for p in PROMPTS]
    assert [r.tokens for r in rows] == [until_eos(t, tok.eos_token_id) for t in by_hand]
    assert [r.finish for r in rows] == ["stop" if tok.eos_token_id in t else "length" for t in by_hand]
    assert {r.finish for r in rows} == {"stop", "length"}  # both kinds of end are on show
    assert all(r.text == tok.decode(r.tokens, skip_special_tokens=True) for r in rows)
    assert len({r.text for r in rows}) > 1  # not one degenerate reply for every prompt


def test_left_padded_batches_give_what_each_prompt_gives_alone(lm):
    model, tok = lm
    greedy = Decoding(max_new_tokens=12)
    batched = generate(model, tok, PROMPTS, greedy, batch_size=3)  # a batch of 3, then one of 1
    alone = [generate(model, tok, [p], greedy)[0] for p in PROMPTS]
    assert batched == alone
    assert tok.padding_side == "right"  # the tokenizer is left as it was given


def test_a_seeded_sample_is_transformers_own_with_that_seed(lm):
    model, tok = lm
    sampled = Decoding(max_new_tokens=10, temperature=0.9, top_p=0.95, top_k=20, n=3)
    rows = generate(model, tok, PROMPTS, sampled, seed=4)
    torch.manual_seed(4)
    tok.padding_side = "left"
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    tok.padding_side = "right"
    own = model.generate(**enc, do_sample=True, temperature=0.9, top_p=0.95, top_k=20, num_return_sequences=3,
                         max_new_tokens=10, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    assert [r.tokens for r in rows] == [until_eos(t, tok.eos_token_id) for t in own[:, enc["input_ids"].size(1):].tolist()]
    assert [r.tokens for r in generate(model, tok, PROMPTS, sampled, seed=4)] == [r.tokens for r in rows]
    assert rows[0].tokens != rows[1].tokens  # n rows of one prompt are n draws


def test_a_row_ends_at_its_first_stop_id(lm):
    model, tok = lm
    free = generate(model, tok, PROMPTS[:1], Decoding(max_new_tokens=8))[0]
    assert free.finish == "length"
    free = free.tokens
    stop = free[3]
    first = free.index(stop)  # the stop id may come earlier too: the row ends at its first
    row = generate(model, tok, PROMPTS[:1], Decoding(max_new_tokens=8), stops=[stop])[0]
    assert (row.tokens, row.finish) == (free[:first], "stop")
    batch = generate_batch(model, tok, PROMPTS[:1], Decoding(max_new_tokens=8), stops=[stop])
    assert batch.new_ids[0].tolist() == free[:first + 1]  # generation stopped there (a batch of one: no padding after)


def test_the_model_stop_ids_and_the_prompt_columns(lm):
    model, tok = lm
    assert stop_ids(model, tok) == [tok.eos_token_id]
    batch = generate_batch(model, tok, PROMPTS[:2], Decoding(max_new_tokens=5), stops=[tok.unk_token_id])
    enc = [tok(p)["input_ids"] for p in PROMPTS[:2]]
    assert batch.width == max(map(len, enc)) and batch.ids.shape == (2, batch.width + 5)
    for row, mask, ids in zip(batch.ids.tolist(), batch.prompt_mask.tolist(), enc):  # left-padded prompts, as PPO scores them
        pad = batch.width - len(ids)
        assert row[:batch.width] == [tok.pad_token_id] * pad + ids and mask == [0] * pad + [1] * len(ids)


def test_within_context_never_generates_past_the_models_positions(lm):
    model, tok = lm
    width = len(tok(PROMPTS[0])["input_ids"])
    context = model.config.max_position_embeddings
    model.config.max_position_embeddings = width + 3
    try:
        row = generate(model, tok, PROMPTS[:1], Decoding(max_new_tokens=10), within_context=True)[0]
        full = generate(model, tok, PROMPTS[:1], Decoding(max_new_tokens=10))[0]
    finally:
        model.config.max_position_embeddings = context
    assert (len(row.tokens), len(full.tokens)) == (3, 10) and full.finish == "length"


def test_greedy_without_a_seed_leaves_the_rng_alone(lm):
    """An in-process judge generates beside a seeded sampler: it must not move torch's RNG."""
    model, tok = lm
    torch.manual_seed(9)
    expected = torch.rand(3)
    torch.manual_seed(9)
    generate(model, tok, PROMPTS, Decoding(max_new_tokens=4))
    assert torch.equal(torch.rand(3), expected)


def test_bad_decoding_settings_are_refused():
    with pytest.raises(ValueError, match="max_new_tokens=0 and n=1 must be >= 1"):
        Decoding(max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p=0 in"):
        Decoding(max_new_tokens=1, temperature=1.0, top_p=0)
