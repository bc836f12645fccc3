"""One PPO step on the shared base (ppo.py's loop calls these; `config` is its PPOConfig):

    rollout      sample completions for a batch of prompts (from their rendered text, prefdata.models.chat,
                 when given: what the policy reads), score them with the reward (given the original
                 prompts), and turn the scores and the per-token KL to the reference into advantages
                 and returns
    ppo_update   `ppo_epochs` passes of clipped policy + value (+ entropy, + ptx) minibatch updates

The math is ppo_math.py's; the log-probabilities of the sampled tokens are prefdata.models.logprobs';
the sampling is prefdata.models.generation's one generate loop (one batch, torch's RNG as the trainer seeded it).
"""

from __future__ import annotations

import functools
from contextlib import nullcontext
from typing import Callable

Reward = Callable[[list[str], list[str]], list[float]]


def _autocast(device):
    """bf16 autocast on a GPU (weights stay fp32 for the optimizer); plain fp32 on CPU."""
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def response_mask(response, eos_token_id: int):
    """1 up to and including each row's first EOS (all ones when it has none), 0 after: [B, T]."""
    import torch

    is_eos = response == eos_token_id
    width = response.size(1)
    cols = torch.arange(width, device=response.device).expand_as(response)
    first_eos = torch.where(is_eos, cols, width).min(-1).values
    return (cols <= first_eos.unsqueeze(-1)).float()


def _takes_logits_to_keep(model) -> bool:
    """Whether the causal LM under `model` (a PEFT wrapper or not) computes only its last N positions'
    logits when asked (`logits_to_keep`, transformers' Llama, Qwen, Mistral, Gemma ...)."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _forward_takes(type(lm), "logits_to_keep")


@functools.lru_cache(maxsize=None)
def _forward_takes(cls, name: str) -> bool:
    import inspect

    return name in inspect.signature(cls.forward).parameters


def forward_response(model, value_head, ids, attention_mask, prompt_width: int, temperature: float, with_values=True):
    """Logits (/ temperature) and values at the positions that predict each response token.

    Position ids count only attended tokens, as `generate` does for left-padded prompts, so the
    log-probs here are those of the distribution the tokens were sampled from. The LM head runs only
    on the positions that predict response tokens (`logits_to_keep`, where the model has it): the
    prompt's vocabulary-sized logits, which nothing reads, are never made.
    """
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    keep = ids.size(1) - prompt_width + 1  # prompt_width - 1 .. the end: one more than the response
    extra = {"logits_to_keep": keep} if _takes_logits_to_keep(model) else {}
    out = model(input_ids=ids, attention_mask=attention_mask, position_ids=positions,
                output_hidden_states=with_values, use_cache=False, **extra)
    logits = out.logits[:, -keep:-1] if extra else out.logits[:, prompt_width - 1 : -1]
    logits = logits.float() / temperature
    if not with_values:
        return logits, None
    values = value_head(out.hidden_states[-1][:, prompt_width - 1 : -1].float()).squeeze(-1)
    return logits, values


def rollout(model, value_head, tokenizer, prompts: list[str], reward: Reward, kl_coef: float, config, device,
            texts: list[str] | None = None) -> dict:
    """Sample, score, and turn scores into per-token advantages and returns (no gradients). `texts`:
    each prompt as the model reads it (rendered), generated from; `prompts` (the original text) go to
    the reward. Without `texts` the prompts are generated from as they are."""
    import torch

    from prefdata.models.generation import Decoding, generate_batch
    from prefdata.trainers.ppo_math import gae, kl_shaped_rewards, masked_mean, masked_whiten, per_token_kl

    if texts is not None and len(texts) != len(prompts):
        raise ValueError(f"{len(texts)} rendered prompts for {len(prompts)} prompts")
    model.eval()
    # Left-padded (generation pads the batch itself): every prompt ends at column `width`, where the
    # response starts. top_p 1: the full distribution (with top_k, what the log-probs below assume);
    # the tokenizer's eos is the one stop id, the one response_mask cuts at.
    decoding = Decoding(config.max_new_tokens, config.temperature, top_p=1.0, top_k=config.top_k)
    with _autocast(device):
        batch = generate_batch(model, tokenizer, texts if texts is not None else prompts, decoding,
                               stops=[tokenizer.eos_token_id], device=device)
    gen, width = batch.ids, batch.width
    response = batch.new_ids
    mask = response_mask(response, tokenizer.eos_token_id)
    attn = torch.cat([batch.prompt_mask, mask.long()], dim=1)
    logp, ref_logp, values, entropy = _rollout_scores(model, value_head, gen, attn, response, width, config, device)
    completions = tokenizer.batch_decode(response * mask.long() + tokenizer.pad_token_id * (1 - mask.long()),
                                         skip_special_tokens=True)
    scores = torch.tensor(reward(prompts, completions), dtype=torch.float32, device=device)
    if scores.shape != (len(prompts),):
        raise ValueError(f"the reward returned {tuple(scores.shape)} scores for {len(prompts)} completions")
    kl = per_token_kl(logp, ref_logp, config.kl_estimator) * mask
    rewards = kl_shaped_rewards(scores, kl, mask, kl_coef)
    values = values * mask
    advantages, returns = gae(rewards, values, mask, config.gamma, config.lam)
    if config.whiten_advantages:
        advantages = masked_whiten(advantages, mask)
    return {
        "ids": gen, "attn": attn, "response": response, "mask": mask, "width": width,
        "logp": logp * mask, "values": values, "advantages": advantages, "returns": returns,
        "scores": scores, "kl": kl.sum(-1), "entropy": masked_mean(entropy, mask),
        "completions": completions,
    }


def _rollout_scores(model, value_head, ids, attn, response, width: int, config, device):
    """Per-token log-probs of the sampled tokens under the policy and the reference (adapter off), the
    values and the policy's entropies, `mini_batch_size` rows at a time: a chunk's vocabulary-sized
    logits are gone before the next chunk's are made, so a rollout never holds them for the whole batch
    (with a real vocabulary they outweigh the model); the numbers are those of one whole-batch pass."""
    import torch

    from prefdata.models.logprobs import logprobs_from_logits

    parts = []
    with torch.no_grad():
        for start in range(0, ids.size(0), config.mini_batch_size):
            rows = slice(start, start + config.mini_batch_size)
            with _autocast(device):
                logits, values = forward_response(model, value_head, ids[rows], attn[rows], width, config.temperature)
            logp = logprobs_from_logits(logits, response[rows])
            entropy = torch.distributions.Categorical(logits=logits).entropy()
            del logits
            with _autocast(device), model.disable_adapter():  # the reference policy: the same weights, adapter off
                ref_logits, _ = forward_response(model, value_head, ids[rows], attn[rows], width, config.temperature,
                                                 with_values=False)
            parts.append((logp, logprobs_from_logits(ref_logits, response[rows]), values, entropy))
            del ref_logits
    return [torch.cat(column) for column in zip(*parts)]


def ppo_update(model, value_head, optimizer, batch: dict, config, sft_batches, generator, device) -> dict:
    """`ppo_epochs` passes of minibatch updates on one rollout batch; returns mean losses."""
    import torch

    from prefdata.models.logprobs import logprobs_from_logits
    from prefdata.trainers.ppo_math import (
        clipped_policy_loss, clipped_value_loss, entropy_from_logits, masked_mean, ptx_loss,
    )

    model.train()
    params = [p for p in model.parameters() if p.requires_grad] + list(value_head.parameters())
    sums: dict[str, float] = {}
    n = 0
    for _ in range(config.ppo_epochs):
        order = torch.randperm(batch["ids"].size(0), generator=generator).to(device)
        for rows in order.split(config.mini_batch_size):
            m = batch["mask"][rows]
            with _autocast(device):
                logits, values = forward_response(model, value_head, batch["ids"][rows], batch["attn"][rows],
                                                  batch["width"], config.temperature)
            logp = logprobs_from_logits(logits, batch["response"][rows])
            pg_loss, clip_fraction, approx_kl = clipped_policy_loss(
                logp, batch["logp"][rows], batch["advantages"][rows], m, config.clip_range)
            vf_loss, vf_clip_fraction = clipped_value_loss(
                values, batch["values"][rows], batch["returns"][rows], m, config.clip_range_value)
            loss = pg_loss + config.vf_coef * vf_loss
            if config.ent_coef:
                entropy = masked_mean(entropy_from_logits(logits), m)
                loss = loss - config.ent_coef * entropy
            else:  # only a metric: outside autograd, a row at a time, so its softmax copies of the logits stay small
                with torch.no_grad():
                    entropy = masked_mean(torch.cat([entropy_from_logits(row) for row in logits.split(1)]), m)
            step = {"policy_loss": pg_loss.item(), "value_loss": vf_loss.item(), "entropy": entropy.item(),
                    "clip_fraction": clip_fraction.item(), "value_clip_fraction": vf_clip_fraction.item(),
                    "approx_kl": approx_kl.item()}
            del logits, values, logp
            # The PPO loss's backward frees its activations before the ptx term's SFT forward makes its own:
            # the two graphs are never held together, and the gradients add up to those of their sum.
            loss.backward()
            sft = next(sft_batches, None)
            if sft is not None:
                ids, attn, labels = sft
                with _autocast(device):
                    sft_logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits
                ptx = ptx_loss(sft_logits, labels)
                (config.ptx_coef * ptx).backward()
                step["ptx_loss"] = ptx.item()
                del sft_logits
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            for k, v in step.items():
                sums[k] = sums.get(k, 0.0) + v
            n += 1
    return {k: v / n for k, v in sums.items()}
