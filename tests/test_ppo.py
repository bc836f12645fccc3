"""PPO for real on the demo world's tiny Llama (built into a tmp cache in seconds): real rollouts,
a rule reward, LoRA updates through PEFT, the reference as the base with the adapter disabled, a
reward model folder, the merged save, the ptx term, and callbacks that stop the run."""

from __future__ import annotations

import json
import os

# As test_world does: passive OpenMP waiting keeps two threads usable on a shared machine.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from dataclasses import replace

import pytest
import torch

from prefdata.trainers.ppo import (
    KLBoundExceeded,
    PPOConfig,
    RewardModelScorer,
    load_policy,
    run_ppo,
    train,
)
from prefdata.trainers.ppo_step import forward_response, response_mask
from prefdata.world import WorldConfig, build_world, sampling_prompts, sft_data, verify

torch.set_num_threads(2)

# tests/test_world.py's TINY (a real 23k-parameter Llama) trained 150 steps instead of 30 (~13 s):
# long enough that it answers in the world's format ("0405"), so a reward has something to move.
# After 30 steps its logits are still near the small initial embeddings and barely respond to LoRA.
TINY = WorldConfig(
    n_sft=2_000, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, steps=150,
    batch_size=32, warmup_steps=5, n_eval_task=40, n_eval_general=20,
)
# Small and fast; a high lr so a handful of steps moves the 23k-parameter model measurably.
FAST = PPOConfig(max_steps=3, per_device_train_batch_size=8, mini_batch_size=4, ppo_epochs=2, max_new_tokens=6, learning_rate=1e-2, lora_r=4,
                 lora_alpha=8, max_kl=None)


def digit_reward(prompts: list[str], completions: list[str]) -> list[float]:
    """The verifier's 1.0 for a right answer, plus the share of digits: the tiny model samples
    mostly letters, so this rule reward varies from the first batch on and PPO has a signal."""
    return [float(verify(p, c)) + sum(ch.isdigit() for ch in c) / max(len(c), 1) for p, c in zip(prompts, completions)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(TINY, cache=tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def prompts():
    return sampling_prompts(TINY, 64)


@pytest.fixture(scope="module")
def sft():
    return [(ex.prompt, ex.completion) for ex in sft_data(TINY)[:200]]


def _base(world):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(world.sft, dtype=torch.float32).eval()


def _probe(tokenizer):
    enc = tokenizer(["347+058=0405", "rev:abc=cba"], return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


def test_ppo_trains_the_adapter_and_value_head_only(world, prompts, sft):
    tokenizer, model, value_head = load_policy(world.sft, FAST, torch.device("cpu"))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    head_before = value_head.weight.detach().clone()
    history = train(model, value_head, tokenizer, digit_reward, prompts, FAST, sft_examples=sft)

    assert len(history) == FAST.max_steps
    for row in history:
        for key in ("reward_mean", "kl", "kl_coef", "policy_loss", "value_loss", "entropy", "clip_fraction",
                    "ptx_loss", "seconds"):
            assert row[key] is not None and torch.isfinite(torch.tensor(row[key])), (key, row)
    lora = {n for n, p in model.named_parameters() if p.requires_grad}
    assert lora and all("lora_" in n for n in lora)
    for name, p in model.named_parameters():
        if name in lora:
            assert not torch.equal(p, before[name]), f"LoRA parameter {name} did not change"
        else:
            assert torch.equal(p, before[name]), f"base parameter {name} changed"
    assert not torch.equal(value_head.weight, head_before)

    # The reference is the base with the adapter off: bit-for-bit the base model's logits, while
    # the policy (adapter on) has moved away from them.
    base = _base(world)
    ids, mask = _probe(tokenizer)
    with torch.no_grad():
        base_logits = base(input_ids=ids, attention_mask=mask).logits
        with model.disable_adapter():
            ref_logits = model(input_ids=ids, attention_mask=mask).logits
        policy_logits = model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(ref_logits, base_logits)
    assert not torch.allclose(policy_logits, base_logits, atol=1e-4)


def test_ppo_raises_the_reward_it_is_given(world, prompts):
    # The model starts most answers with "0" (the world's fixed width); reward every other first
    # character. Measured exactly on the model's first-token distribution, not on samples: a sign
    # error in the advantages or the clipped loss, or the score on the wrong token, would leave
    # P("0") where it is or raise it. (Measured: 0.69 -> 0.04 in 10 steps.)
    def not_zero_first(prompts: list[str], completions: list[str]) -> list[float]:
        return [float(c[:1] not in ("0", "")) for c in completions]

    config = replace(FAST, max_steps=10, per_device_train_batch_size=16, mini_batch_size=8, ppo_epochs=4)
    tokenizer, model, value_head = load_policy(world.sft, config, torch.device("cpu"))
    zero = tokenizer.convert_tokens_to_ids("0")

    def p_zero_first() -> float:
        tokenizer.padding_side = "left"
        enc = tokenizer(prompts[:32], return_tensors="pt", padding=True)
        with torch.no_grad():
            return float(torch.softmax(model(**enc).logits[:, -1], -1)[:, zero].mean())

    before = p_zero_first()
    history = train(model, value_head, tokenizer, not_zero_first, prompts, config)
    after = p_zero_first()
    assert before > 0.5 and after < 0.5 * before, (before, after)
    assert sum(r["reward_mean"] for r in history[-3:]) > sum(r["reward_mean"] for r in history[:3])


def test_rollout_logprobs_are_those_generate_sampled_from(world, prompts):
    # Left-padded prompts: the scoring forward must use generate's position ids, or the log-probs
    # (and the PPO ratio) would belong to a different distribution than the one sampled.
    tokenizer, model, value_head = load_policy(world.sft, FAST, torch.device("cpu"))
    tokenizer.padding_side = "left"
    enc = tokenizer(["347+58=", "7+5=", "rev:ab="], return_tensors="pt", padding=True)
    assert (enc["attention_mask"] == 0).any()  # really padded
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=4, output_logits=True, return_dict_in_generate=True,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        width = enc["input_ids"].size(1)
        response = out.sequences[:, width:]
        mask = response_mask(response, tokenizer.eos_token_id)
        attn = torch.cat([enc["attention_mask"], mask.long()], dim=1)
        logits, values = forward_response(model, value_head, out.sequences, attn, width, temperature=1.0)
    gen_logits = torch.stack(out.logits, dim=1)
    m = mask.bool()
    assert torch.allclose(logits[m], gen_logits[m], atol=1e-4)
    assert values.shape == response.shape


def test_response_mask_stops_after_the_first_eos():
    eos = 2
    response = torch.tensor([[5, 2, 0, 0], [5, 6, 7, 8], [2, 5, 2, 0]])
    assert response_mask(response, eos).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]


def test_run_ppo_saves_a_merged_model_that_loads(world, prompts, sft, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lines: list[str] = []
    out = tmp_path / "ppo"
    metrics = run_ppo(replace(FAST, max_steps=2), world.sft, prompts, digit_reward, out, sft_examples=sft, log=lines.append)
    assert metrics["steps"] == 2 and len(metrics["history"]) == 2 and len(lines) == 2
    assert "policy_loss" in lines[0] and "ptx_loss" in lines[0]
    assert json.loads((out / "ppo_history.json").read_text())["history"][1]["step"] == 1

    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.padding_side == "left"  # restored after the rollouts, as the world saved it
    with_adapter = PeftModel.from_pretrained(_base(world), out / "adapter").eval()
    ids, mask = _probe(tokenizer)
    with torch.no_grad():
        merged_logits = merged(input_ids=ids, attention_mask=mask).logits
        adapter_logits = with_adapter(input_ids=ids, attention_mask=mask).logits
        base_logits = _base(world)(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(merged_logits, adapter_logits, atol=1e-5)
    assert not torch.allclose(merged_logits, base_logits, atol=1e-4)
    assert (out / "value_head.pt").is_file()


def test_ptx_term_only_with_sft_examples(world, prompts, sft):
    tokenizer, model, value_head = load_policy(world.sft, FAST, torch.device("cpu"))
    without = train(model, value_head, tokenizer, digit_reward, prompts, replace(FAST, max_steps=1))
    assert without[0]["ptx_loss"] is None
    off = train(model, value_head, tokenizer, digit_reward, prompts, replace(FAST, max_steps=1, sft_ratio=0.0), sft)
    assert off[0]["ptx_loss"] is None
    on = train(model, value_head, tokenizer, digit_reward, prompts, replace(FAST, max_steps=1), sft)
    # the next-token loss of the world's SFT data on its own (barely trained) model: finite, > 0
    assert on[0]["ptx_loss"] is not None and 0 < on[0]["ptx_loss"] < 10


def test_a_raising_callback_stops_the_run(world, prompts, tmp_path):
    seen: list[int] = []

    def guard(step: int, metrics: dict) -> None:
        seen.append(step)
        assert "kl" in metrics and "reward_mean" in metrics
        if step == 1:
            raise RuntimeError("guard fired")

    out = tmp_path / "stopped"
    with pytest.raises(RuntimeError, match="guard fired"):
        run_ppo(replace(FAST, max_steps=5), world.sft, prompts, digit_reward, out, callbacks=[guard])
    assert seen == [0, 1]
    assert not (out / "config.json").exists()  # a stopped run leaves no model behind


def test_max_kl_stops_a_run_that_leaves_the_reference(world, prompts, tmp_path):
    config = replace(FAST, max_steps=6, learning_rate=5e-2, target_kl=1e-4, max_kl=1e-3)
    with pytest.raises(KLBoundExceeded, match="above max_kl"):
        run_ppo(config, world.sft, prompts, digit_reward, tmp_path / "kl")


def test_reward_model_folder_scores_like_trl_get_reward(world, prompts, tmp_path):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification
    from trl.experimental.utils import get_reward

    tokenizer = AutoTokenizer.from_pretrained(world.sft)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, num_labels=1, pad_token_id=tokenizer.pad_token_id,
                      max_position_embeddings=64)
    torch.manual_seed(0)
    rm_dir = tmp_path / "rm"
    LlamaForSequenceClassification(cfg).save_pretrained(rm_dir)
    tokenizer.save_pretrained(rm_dir)

    scorer = RewardModelScorer(rm_dir, torch.device("cpu"))
    ps, cs = ["347+058=", "007+005="], ["0405", "12"]  # same-width prompts, ragged completions
    ours = scorer(ps, cs)
    # TRL's PPO-era scoring: right-padded prompt + response, the score head at the last non-pad token
    query = tokenizer(ps, return_tensors="pt", padding=True, padding_side="right")["input_ids"]
    assert (query != tokenizer.pad_token_id).all()  # same-width prompts: context_length is exact
    full = tokenizer([p + c + tokenizer.eos_token for p, c in zip(ps, cs)], return_tensors="pt", padding=True,
                     padding_side="right")["input_ids"]
    with torch.no_grad():
        _, trl_scores, _ = get_reward(scorer.model, full, tokenizer.pad_token_id, context_length=query.size(1))
    assert ours == pytest.approx(trl_scores.tolist(), abs=1e-5)

    # and PPO runs with the folder as its reward, loaded as its own frozen model
    metrics = run_ppo(replace(FAST, max_steps=1), world.sft, prompts, rm_dir, tmp_path / "ppo-rm")
    assert metrics["steps"] == 1


def test_config_validation_names_both_values():
    with pytest.raises(ValueError, match=r"mini_batch_size \(5\) must divide per_device_train_batch_size \(8\)"):
        PPOConfig(per_device_train_batch_size=8, mini_batch_size=5)
    with pytest.raises(ValueError, match="kl_estimator"):
        PPOConfig(kl_estimator="k2")
    with pytest.raises(ValueError, match=r"max_kl \(0.1\) must be above target_kl \(0.5\)"):
        PPOConfig(max_kl=0.1, target_kl=0.5)


def test_activation_checkpointing_recomputes_the_same_update(world, prompts):
    """activation_checkpointing trades a recomputed forward for the activations a PPO update keeps
    (bench/RESULTS.md, PPO memory); the losses, KL and rewards are those of the plain run."""
    config = replace(FAST, max_steps=2)
    runs = []
    for checkpointing in (False, True):
        torch.manual_seed(0)  # the LoRA A matrices are drawn in load_policy: the same draw for both runs
        tokenizer, model, value_head = load_policy(world.sft, replace(config, activation_checkpointing=checkpointing),
                                                   torch.device("cpu"))
        base = model.get_base_model()
        assert getattr(base, "is_activation_checkpointing", None) is checkpointing or (
            base.is_gradient_checkpointing == checkpointing)
        runs.append(train(model, value_head, tokenizer, digit_reward, prompts,
                          replace(config, activation_checkpointing=checkpointing)))
    for plain, checked in zip(*runs):
        for key in ("reward_mean", "kl", "policy_loss", "value_loss"):
            assert checked[key] == pytest.approx(plain[key], abs=1e-5), key


# -- memory: what a step keeps alive (bench/RESULTS.md, PPO memory) -------------------------------------


class _SavedBytes:
    """Bytes of activations autograd holds for backward right now and at most (parameters left out),
    counted through saved-tensor hooks per storage (two ops saving the same tensor count once): a
    storage counts from when a forward first saves it until the last graph holding it is freed (by
    backward or by going out of scope)."""

    class _Box:
        __slots__ = ("tensor", "__weakref__")

    def __init__(self, model):
        self.params = {p.data_ptr() for p in model.parameters()}
        self.now = self.peak = 0
        self.held: dict[int, int] = {}  # storage address -> saves of it still held
        self.vocab_sized: list[tuple[int, ...]] = []  # shapes of saved storages whose last dim is the vocab
        self.vocab = model.get_base_model().config.vocab_size

    def _pack(self, tensor):
        import weakref

        box = self._Box()
        box.tensor = tensor
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self.params:
            if key not in self.held:
                self.held[key] = 0
                self.now += storage.nbytes()
                self.peak = max(self.peak, self.now)
                if tensor.dim() and tensor.size(-1) == self.vocab:
                    self.vocab_sized.append(tuple(tensor.shape))
            self.held[key] += 1
            weakref.finalize(box, self._release, key, storage.nbytes())
        return box

    def _release(self, key: int, nbytes: int) -> None:
        self.held[key] -= 1
        if not self.held[key]:
            del self.held[key]
            self.now -= nbytes

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda box: box.tensor)


def _one_rollout(world, prompts, config):
    from prefdata.trainers.ppo_step import rollout

    torch.manual_seed(0)  # the LoRA A matrices: the same draw in every call
    tokenizer, model, value_head = load_policy(world.sft, config, torch.device("cpu"))
    torch.manual_seed(1)
    batch = rollout(model, value_head, tokenizer, prompts[:config.per_device_train_batch_size], digit_reward,
                    config.init_kl_coef, config, torch.device("cpu"))
    return tokenizer, model, value_head, batch


def test_rollout_scores_a_minibatch_at_a_time_on_response_positions_only(world, prompts):
    """The rollout's scoring passes (policy + values, reference) run `mini_batch_size` rows at a time and
    the LM head only on the positions that predict response tokens, so no full-vocabulary logits of the
    whole batch and its prompts are ever held (with a real vocabulary they dwarf the model); the numbers
    are those of one pass over the whole batch."""
    from prefdata.trainers.ppo_step import rollout
    from prefdata.models.logprobs import logprobs_from_logits
    from prefdata.trainers.ppo_math import per_token_kl

    config = replace(FAST, per_device_train_batch_size=8, mini_batch_size=2)
    torch.manual_seed(0)
    tokenizer, model, value_head = load_policy(world.sft, config, torch.device("cpu"))
    base = model.get_base_model()
    seen: list[tuple[int, int]] = []  # (rows, positions the LM head ran on) of every scoring pass

    def head_rows(_module, args):
        seen.append(tuple(args[0].shape[:2]))

    def scoring(_module, _args, kwargs):
        scoring.on = kwargs.get("use_cache") is False  # generate's passes use the cache; the scoring ones do not

    scoring.on = False
    hooks = [base.register_forward_pre_hook(scoring, with_kwargs=True),
             base.lm_head.register_forward_pre_hook(lambda m, a: head_rows(m, a) if scoring.on else None)]
    torch.manual_seed(1)
    batch = rollout(model, value_head, tokenizer, prompts[:8], digit_reward, 0.05, config, torch.device("cpu"))
    for hook in hooks:
        hook.remove()
    response_width = batch["response"].size(1)
    assert seen and max(rows for rows, _ in seen) <= config.mini_batch_size, seen
    assert {positions for _, positions in seen} == {response_width + 1}, (seen, response_width)

    # the same numbers as one pass over the whole batch, full logits sliced to the response
    ids, attn, width, mask = batch["ids"], batch["attn"], batch["width"], batch["mask"]
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=attn, position_ids=positions, output_hidden_states=True, use_cache=False)
        with model.disable_adapter():
            ref = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False).logits
    logp = logprobs_from_logits(out.logits[:, width - 1:-1] / config.temperature, batch["response"])
    ref_logp = logprobs_from_logits(ref[:, width - 1:-1] / config.temperature, batch["response"])
    values = value_head(out.hidden_states[-1][:, width - 1:-1]).squeeze(-1)
    assert torch.allclose(batch["logp"], logp * mask, atol=1e-5)
    assert torch.allclose(batch["values"], values * mask, atol=1e-5)
    assert torch.allclose(batch["kl"], (per_token_kl(logp, ref_logp) * mask).sum(-1), atol=1e-5)


def test_an_update_holds_one_graph_and_no_entropy_graph(world, prompts, sft):
    """A PPO update backpropagates the PPO loss before the ptx term's SFT forward, so the activations of
    the two forwards are never held together (the gradients add up the same); with ent_coef 0 the
    entropy is a metric, computed outside autograd, so the only vocabulary-sized tensor it keeps is the
    log-softmax of the policy log-probs."""
    from prefdata.trainers.ppo import _sft_stream
    from prefdata.trainers.ppo_step import ppo_update
    from prefdata.trainers.ppo_math import ptx_loss

    config = replace(FAST, per_device_train_batch_size=8, mini_batch_size=8, ppo_epochs=1, sft_ratio=0.5)
    tokenizer, model, value_head, batch = _one_rollout(world, prompts, config)
    params = [p for p in model.parameters() if p.requires_grad] + list(value_head.parameters())
    peaks = {}
    for name, examples in (("ppo", None), ("ppo+sft", sft)):
        optimizer = torch.optim.AdamW(params, lr=0.0)  # lr 0: every pass sees the same weights
        stream = _sft_stream(tokenizer, examples, 4, config.seed, torch.device("cpu"))
        saved = _SavedBytes(model)
        with saved.hooks():
            ppo_update(model, value_head, optimizer, batch, config, stream, torch.Generator().manual_seed(0),
                       torch.device("cpu"))
        peaks[name] = saved.peak
        if name == "ppo":
            vocab = saved.vocab
            assert saved.vocab_sized == [(8, batch["response"].size(1), vocab)], saved.vocab_sized
    ids, attn, labels = next(_sft_stream(tokenizer, sft, 4, config.seed, torch.device("cpu")))
    saved = _SavedBytes(model)
    model.train()
    with saved.hooks():
        ptx_loss(model(input_ids=ids, attention_mask=attn, use_cache=False).logits, labels).backward()
    model.zero_grad(set_to_none=True)
    peaks["sft"] = saved.peak
    assert peaks["sft"] > 0.2 * peaks["ppo"], peaks  # big enough that holding both graphs would show
    assert peaks["ppo+sft"] <= 1.01 * max(peaks["ppo"], peaks["sft"]), peaks


@pytest.mark.parametrize("ent_coef", [0.0, 0.01])
def test_the_update_is_the_textbook_minibatch_step(world, prompts, sft, ent_coef):
    """ppo_update against the plain PPO-ptx step written out here (full logits, one loss, one backward):
    the same metrics and the same weights after the step, so the memory work changes no maths (with the
    entropy bonus on, and off, when the entropy is only a metric)."""
    from prefdata.trainers.ppo import _sft_stream
    from prefdata.trainers.ppo_step import ppo_update
    from prefdata.models.logprobs import logprobs_from_logits
    from prefdata.trainers.ppo_math import (
        clipped_policy_loss, clipped_value_loss, entropy_from_logits, masked_mean, ptx_loss,
    )

    config = replace(FAST, per_device_train_batch_size=8, mini_batch_size=8, ppo_epochs=1, sft_ratio=0.5, ent_coef=ent_coef)
    results = []
    for ours in (True, False):
        tokenizer, model, value_head, batch = _one_rollout(world, prompts, config)
        params = [p for p in model.parameters() if p.requires_grad] + list(value_head.parameters())
        optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.0)
        stream = _sft_stream(tokenizer, sft, 4, config.seed, torch.device("cpu"))
        if ours:
            metrics = ppo_update(model, value_head, optimizer, batch, config, stream, torch.Generator().manual_seed(0),
                                 torch.device("cpu"))
        else:
            model.train()
            rows = torch.randperm(8, generator=torch.Generator().manual_seed(0))
            ids, attn, width, m = batch["ids"][rows], batch["attn"][rows], batch["width"], batch["mask"][rows]
            out = model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0),
                        output_hidden_states=True, use_cache=False)
            logits = out.logits[:, width - 1:-1] / config.temperature
            values = value_head(out.hidden_states[-1][:, width - 1:-1]).squeeze(-1)
            pg, clip, approx_kl = clipped_policy_loss(logprobs_from_logits(logits, batch["response"][rows]),
                                                      batch["logp"][rows], batch["advantages"][rows], m, config.clip_range)
            vf, vclip = clipped_value_loss(values, batch["values"][rows], batch["returns"][rows], m, config.clip_range_value)
            entropy = masked_mean(entropy_from_logits(logits), m)
            sft_ids, sft_attn, labels = next(stream)
            ptx = ptx_loss(model(input_ids=sft_ids, attention_mask=sft_attn, use_cache=False).logits, labels)
            (pg + config.vf_coef * vf - config.ent_coef * entropy + config.ptx_coef * ptx).backward()
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            metrics = {"policy_loss": pg.item(), "value_loss": vf.item(), "entropy": entropy.item(),
                       "clip_fraction": clip.item(), "value_clip_fraction": vclip.item(), "approx_kl": approx_kl.item(),
                       "ptx_loss": ptx.item()}
        results.append((metrics, [p.detach().clone() for p in params]))
    (ours, ours_params), (plain, plain_params) = results
    assert ours.keys() == plain.keys()
    for key in plain:
        assert ours[key] == pytest.approx(plain[key], abs=1e-5), key
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours_params, plain_params))
