"""PPO-RLHF on transformers + PEFT (TRL removed its PPOTrainer after 1.12), after the first seed.

One base causal LM is loaded once and plays three of PPO's four roles:

    policy     the base with a trainable LoRA adapter (PEFT)
    value      a linear head on the policy's last hidden state, trained with it
    reference  the same base with the adapter disabled (`with model.disable_adapter():`), no copy
    reward     a Python callable (a rule verifier), or a reward model folder: when `prefdata train
               rm` trained it with LoRA on the same base, its adapter is loaded as a second adapter
               ("reward") on this base, with its score head (RewardAdapterScorer: no second copy);
               otherwise it loads once as its own frozen model (RewardModelScorer). Both are
               prefdata.models.reward's, which renders and scores every reward model the same way

A step: sample completions for a batch of prompts (left-padded, `generate` with sampling); score
them; per-token KL to the reference becomes a penalty on every response token, the score lands on
the last one; GAE runs backwards over the response mask; then `ppo_epochs` passes of minibatches
minimise the clipped policy loss + vf_coef * clipped value loss - ent_coef * entropy
+ ptx_coef * the next-token loss of a fresh SFT batch (InstructGPT's PPO-ptx, against the
alignment tax). An adaptive KL controller (Ziegler et al. 2019) steers beta toward `target_kl`.
The math lives in ppo_math.py as pure functions; this module only wires models and data to it.
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

from prefdata.models.reward import REWARD_ADAPTER, RewardAdapterScorer, RewardModelScorer, reward_adapter_dir
from prefdata.trainers.guards import GuardTripped

Reward = Callable[[list[str], list[str]], list[float]]


class KLBoundExceeded(GuardTripped):
    """The run's KL went above `max_kl`: the policy left the reference (exit 1, like every guard)."""


@dataclass
class PPOConfig:
    # Defaults measured on the demo world (bench/RESULTS.md, "PPO"): a 1M-parameter Llama, a 0/1
    # verifier reward, 4-character answers. A real model wants a lower lr (seed: 5e-6 - 1e-5).
    # Names as TRL's configs spell them (learning_rate, max_steps, per_device_train_batch_size), so a
    # field means the same in every method's YAML; the old names are refused with the new one (RENAMED).
    learning_rate: float = field(default=2e-4, metadata={"help": "AdamW learning rate for the LoRA adapter and the value head."})
    max_steps: int = field(default=60, metadata={"help": "PPO steps (rollout + update rounds)."})
    per_device_train_batch_size: int = field(default=64, metadata={"help": "Prompts sampled per step (one completion each)."})
    mini_batch_size: int = field(default=16, metadata={"help": "Rollouts per optimizer update; must divide per_device_train_batch_size."})
    ppo_epochs: int = field(default=2, metadata={"help": "Passes over each step's rollouts."})
    gamma: float = field(default=1.0, metadata={"help": "Discount; 1.0 since a response is one episode (seed 2, 3.3)."})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda: 0 = one-step TD, 1 = Monte Carlo."})
    clip_range: float = field(default=0.2, metadata={"help": "PPO policy ratio clip epsilon."})
    clip_range_value: float = field(default=0.2, metadata={"help": "Value clip: how far V may move from the rollout's V per update."})
    vf_coef: float = field(default=0.1, metadata={"help": "Weight of the value loss."})
    ent_coef: float = field(default=0.0, metadata={"help": "Weight of the entropy bonus (raise it if entropy drops suddenly)."})
    init_kl_coef: float = field(default=0.05, metadata={"help": "Initial KL penalty coefficient beta."})
    adaptive_kl: bool = field(default=True, metadata={"help": "Adapt beta toward target_kl (Ziegler et al. 2019); else keep init_kl_coef."})
    target_kl: float = field(default=0.5, metadata={"help": "Target KL to the reference, nats per response (summed over its tokens)."})
    kl_horizon: int = field(default=10_000, metadata={"help": "Adaptive KL horizon in samples: beta changes by at most 20% x batch/horizon per step."})
    kl_estimator: str = field(default="k1", metadata={"help": "Per-token KL in the reward: 'k1' (log p - log p_ref) or 'k3' ((r-1) - log r, r = p_ref/p)."})
    max_kl: float | None = field(default=5.0, metadata={"help": "Stop with KLBoundExceeded when a step's KL (nats per response) exceeds this; None turns it off."})
    max_new_tokens: int = field(default=8, metadata={"help": "Longest sampled completion."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature; log-probs use the same temperature."})
    top_k: int = field(default=0, metadata={"help": "Top-k sampling; 0 samples the full distribution (what the log-probs assume)."})
    whiten_advantages: bool = field(default=True, metadata={"help": "Normalise advantages over each step's tokens."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout; 0 keeps the ratio at exactly 1 on the first update."})
    lora_target_modules: str | list[str] = field(default="all-linear", metadata={"help": "PEFT target_modules."})
    ptx_coef: float = field(default=1.0, metadata={"help": "Weight of the next-token loss on mixed-in SFT examples (PPO-ptx)."})
    sft_ratio: float = field(default=0.2, metadata={"help": "SFT examples per rollout in each minibatch when sft_examples are given; 0 turns the ptx term off."})
    seed: int = field(default=0, metadata={"help": "Seeds prompt order, sampling and the value head."})
    activation_checkpointing: bool = field(default=False, metadata={"help": "Recompute each layer's activations in the backward pass instead of keeping them: less memory per update (they dominate once the base is shared), a slower update."})

    RENAMED: ClassVar[dict[str, str]] = {"lr": "learning_rate", "steps": "max_steps",
                                         "batch_size": "per_device_train_batch_size"}

    def __post_init__(self) -> None:
        for name in ("learning_rate", "max_steps", "per_device_train_batch_size", "mini_batch_size", "ppo_epochs", "max_new_tokens", "temperature",
                     "target_kl", "kl_horizon", "lora_r", "clip_range", "clip_range_value", "max_grad_norm"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.per_device_train_batch_size % self.mini_batch_size:
            raise ValueError(f"mini_batch_size ({self.mini_batch_size}) must divide per_device_train_batch_size "
                             f"({self.per_device_train_batch_size})")
        for name in ("gamma", "lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("vf_coef", "ent_coef", "init_kl_coef", "ptx_coef", "sft_ratio", "top_k", "lora_dropout"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.kl_estimator not in ("k1", "k3"):
            raise ValueError(f"kl_estimator must be 'k1' or 'k3', got {self.kl_estimator!r}")
        if self.max_kl is not None and self.max_kl <= self.target_kl:
            raise ValueError(f"max_kl ({self.max_kl}) must be above target_kl ({self.target_kl})")


# --- the reward ----------------------------------------------------------------------------------

def _reward_fn(reward: Reward | str | Path, device, model=None, base_model: str | Path | None = None) -> Reward:
    """The reward as a callable: a callable as it is; a reward model folder through prefdata.models.reward,
    as a second adapter on `model` when its LoRA adapter was trained on `base_model`, else as its own model."""
    if callable(reward):
        return reward
    path = Path(reward)
    if not (path / "config.json").is_file():
        raise ValueError(f"reward {reward!r} is neither a callable nor a model folder with config.json")
    adapter = reward_adapter_dir(path, base_model) if model is not None and base_model is not None else None
    if adapter is not None:
        return RewardAdapterScorer(model, path, adapter)
    return RewardModelScorer(path, device=device, batch_size=64)


# --- models --------------------------------------------------------------------------------------

def _device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _autocast(device):
    """bf16 autocast on a GPU (weights stay fp32 for the optimizer); plain fp32 on CPU."""
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def load_policy(base_model: str | Path, config: PPOConfig, device):
    """(tokenizer, peft model, value head): one base, a LoRA adapter, a zero-initialised V head."""
    import torch
    from peft import LoraConfig, get_peft_model
    from prefdata.models.loading import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    base = load_causal_lm(base_model, dtype=torch.float32).to(device)
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=config.lora_target_modules, task_type="CAUSAL_LM")
    # The adapter keeps PEFT's name "default" so save_pretrained writes it at the top of adapter/.
    # Seeded first: get_peft_model draws the LoRA A matrices from torch's global generator, so without
    # it a run's start (and its result) depends on whatever drew from that generator before.
    torch.manual_seed(config.seed)
    model = get_peft_model(base, lora)
    if config.activation_checkpointing:  # non-reentrant: gradients reach the LoRA weights without input grads
        if hasattr(base, "activation_checkpointing_enable"):  # transformers 5's name
            base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(config.seed)
    value_head = torch.nn.Linear(base.config.get_text_config().hidden_size, 1).to(device)
    # V = 0 at the start: the first advantages are the (whitened) returns, never a random baseline.
    torch.nn.init.zeros_(value_head.weight)
    torch.nn.init.zeros_(value_head.bias)
    return tokenizer, model, value_head


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


# --- one step ------------------------------------------------------------------------------------

def rollout(model, value_head, tokenizer, prompts: list[str], reward: Reward, kl_coef: float, config: PPOConfig,
            device) -> dict:
    """Sample, score, and turn scores into per-token advantages and returns (no gradients)."""
    import torch

    from prefdata.trainers.ppo_math import gae, kl_shaped_rewards, masked_mean, masked_whiten, per_token_kl

    tokenizer.padding_side = "left"  # every prompt ends at the same column, where generation starts
    enc = tokenizer(prompts, return_tensors="pt", padding=True).to(device)
    width = enc["input_ids"].size(1)
    model.eval()
    with torch.no_grad(), _autocast(device):
        gen = model.generate(**enc, do_sample=True, temperature=config.temperature, top_k=config.top_k, top_p=1.0,
                             max_new_tokens=config.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id)
    response = gen[:, width:]
    mask = response_mask(response, tokenizer.eos_token_id)
    attn = torch.cat([enc["attention_mask"], mask.long()], dim=1)
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


def _rollout_scores(model, value_head, ids, attn, response, width: int, config: PPOConfig, device):
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


def ppo_update(model, value_head, optimizer, batch: dict, config: PPOConfig, sft_batches, generator, device) -> dict:
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


def _sft_stream(tokenizer, examples: Sequence[tuple[str, str]] | None, per_batch: int, seed: int, device):
    """Endless SFT minibatches (ids, mask, labels) of `per_batch` examples (reshuffled each pass), or nothing."""
    from prefdata.models.logprobs import lm_batch

    if not examples or per_batch == 0:
        return
    rng = random.Random(seed)
    order: list[int] = []
    while True:
        if len(order) < per_batch:
            extra = list(range(len(examples)))
            rng.shuffle(extra)
            order += extra
        chunk, order = order[:per_batch], order[per_batch:]
        batch = lm_batch(tokenizer, [examples[i] for i in chunk], device)  # prompt + completion + eos
        yield batch["input_ids"], batch["attention_mask"], batch["labels"]


def _prompt_batches(prompts: list[str], batch_size: int, seed: int):
    """Endless batches of prompts, reshuffled each epoch over the prompt list."""
    rng = random.Random(seed)
    order: list[str] = []
    while True:
        if len(order) < batch_size:
            extra = list(prompts)
            rng.shuffle(extra)
            order += extra
        batch, order = order[:batch_size], order[batch_size:]
        yield batch


# --- the loop ------------------------------------------------------------------------------------

def train(model, value_head, tokenizer, reward: Reward, prompts: list[str], config: PPOConfig,
          sft_examples: Sequence[tuple[str, str]] | None = None,
          callbacks: Sequence[Callable[[int, dict], None]] = (), log: Callable[[str], None] | None = None
          ) -> list[dict]:
    """`config.max_steps` PPO steps on a loaded policy, in place; returns the per-step metrics."""
    import torch

    from prefdata.trainers.ppo_math import AdaptiveKLController, FixedKLController

    if not prompts:
        raise ValueError("no prompts to train on")
    log = log or (lambda _msg: None)
    device = value_head.weight.device
    params = [p for p in model.parameters() if p.requires_grad] + list(value_head.parameters())
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.0)
    kl_ctl = (AdaptiveKLController(config.init_kl_coef, config.target_kl, config.kl_horizon) if config.adaptive_kl
              else FixedKLController(config.init_kl_coef))
    per_minibatch = math.ceil(config.sft_ratio * config.mini_batch_size) if sft_examples else 0
    sft_batches = _sft_stream(tokenizer, sft_examples, per_minibatch, config.seed, device)
    batches = _prompt_batches(list(prompts), config.per_device_train_batch_size, config.seed)
    generator = torch.Generator().manual_seed(config.seed)  # minibatch order
    torch.manual_seed(config.seed)  # sampling
    history: list[dict] = []
    for step in range(config.max_steps):
        t0 = time.perf_counter()
        kl_coef = kl_ctl.value
        batch = rollout(model, value_head, tokenizer, next(batches), reward, kl_coef, config, device)
        losses = ppo_update(model, value_head, optimizer, batch, config, sft_batches, generator, device)
        kl = float(batch["kl"].mean())
        kl_ctl.update(kl, config.per_device_train_batch_size)
        metrics = {
            "step": step,
            "reward_mean": float(batch["scores"].mean()),
            "reward_std": float(batch["scores"].std()) if config.per_device_train_batch_size > 1 else 0.0,
            "kl": kl,
            "kl_coef": kl_coef,
            "rollout_entropy": float(batch["entropy"]),
            "response_length": float(batch["mask"].sum(-1).mean()),
            "value_mean": float(batch["values"].sum() / batch["mask"].sum()),
            "ptx_loss": None,
            **losses,
            "seconds": time.perf_counter() - t0,
        }
        history.append(metrics)
        log(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
        if not all(math.isfinite(metrics[k]) for k in ("policy_loss", "value_loss", "kl")):
            raise FloatingPointError(f"step {step}: non-finite loss or KL: {metrics}")
        for cb in callbacks:
            cb(step, metrics)
        if config.max_kl is not None and kl > config.max_kl:
            raise KLBoundExceeded(f"step {step}: KL {kl:.3g} nats per response is above max_kl {config.max_kl:g}; "
                                  f"lower learning_rate, or raise init_kl_coef / lower target_kl", history=history)
    return history


def run_ppo(config: PPOConfig, base_model: str | Path, prompts: list[str], reward: Reward | str | Path,
            output_dir: Path, sft_examples: list[tuple[str, str]] | None = None,
            callbacks: Sequence[Callable[[int, dict], None]] = (), log: Callable[[str], None] | None = None) -> dict:
    """Train a LoRA policy on `base_model` with PPO and save the merged model to `output_dir`.

    `reward(prompts, completions) -> scores`, or a reward model folder. Each callback is called as
    `cb(step, metrics)` after every step; an exception from it stops the run and propagates (the
    guards use this); nothing is saved then. Returns the last step's metrics, `train_seconds`,
    `steps`, the per-step `history` and `reward_as` (callable, adapter: a reward model's LoRA adapter
    on this base, model: a reward model loaded as its own copy).
    Output: output_dir holds the merged model + tokenizer (AutoModelForCausalLM.from_pretrained),
    output_dir/adapter the LoRA adapter, value_head.pt the value head, ppo_history.json the log.
    """
    device = _device()
    tokenizer, model, value_head = load_policy(base_model, config, device)
    padding_side = tokenizer.padding_side
    reward_fn = _reward_fn(reward, device, model, base_model)  # an rm adapter on this base rides on the policy's base
    reward_as = ("callable" if callable(reward) else
                 "adapter" if isinstance(reward_fn, RewardAdapterScorer) else "model")
    started = time.perf_counter()
    history = train(model, value_head, tokenizer, reward_fn, prompts, config, sft_examples, callbacks, log)
    seconds = time.perf_counter() - started
    tokenizer.padding_side = padding_side
    output_dir = Path(output_dir)
    save_policy(model, value_head, tokenizer, output_dir)
    (output_dir / "ppo_history.json").write_text(json.dumps({"config": asdict(config), "history": history}, indent=1))
    return {**history[-1], "train_seconds": seconds, "steps": len(history), "history": history, "reward_as": reward_as}


def save_policy(model, value_head, tokenizer, output_dir: Path) -> None:
    """The adapter to output_dir/adapter, then the merged model + tokenizer to output_dir."""
    import torch

    output_dir.mkdir(parents=True, exist_ok=True)
    if REWARD_ADAPTER in model.peft_config:  # the reward model's adapter is not the policy's: never merged or saved
        model.delete_adapter(REWARD_ADAPTER)
    model.save_pretrained(output_dir / "adapter")
    torch.save(value_head.state_dict(), output_dir / "value_head.pt")
    merged = model.merge_and_unload()  # folds B @ A into the base weights; the PEFT wrapper is gone
    merged.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)


# -- the `ppo` plugin: run_ppo from a validated version -----------------------------------------------


from prefdata.trainers import Plugin  # noqa: E402 - the plugin part needs only the light registry
from prefdata.trainers.config import MixConfig  # noqa: E402
from prefdata.trainers.rewards import DEFAULT_MIN_RM_ACCURACY, MIN_RM_ACCURACY_HELP  # noqa: E402


@dataclass
class PPOTrainConfig(PPOConfig, MixConfig):
    """PPOConfig plus prefdata's rewards, mixing and evaluation fields. LoRA is how PPO shares one base
    between policy, value and reference, so `use_lora: false` is refused; `sft_weight` is unused
    here: the ptx weight is `ptx_coef`."""

    rewards: list[str] = field(default_factory=list, metadata={"help": "One reward: 'rule:module:function' or 'rm:PATH'."})
    report_to: Any = field(default="tensorboard", metadata={"help": "tensorboard (the default: each step's figures under OUTPUT_DIR/runs) or none."})
    output_dir: str | None = field(default=None, metadata={"help": "Where the model goes (set by `prefdata train`)."})
    min_rm_accuracy: float | None = field(default=DEFAULT_MIN_RM_ACCURACY, metadata={"help": MIN_RM_ACCURACY_HELP})

    def __post_init__(self):
        super().__post_init__()
        if not self.use_lora:
            raise ValueError("ppo: use_lora must stay true: the reference policy is the base with the adapter off")
        if len(self.rewards) != 1:
            raise ValueError(f"ppo: give exactly one reward in rewards, got {self.rewards}")


def _run_plugin(cfg, data, output_dir: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    from prefdata.base.errors import UnusableInput
    from prefdata.trainers.evaluation import before_after, evaluate_model
    from prefdata.trainers.mixing import sft_pool
    from prefdata.trainers.rewards import check_reward_models, rule_reward
    from prefdata.trainers.run import Timer
    from prefdata.trainers.curves import reports_to, tensorboard_callback
    from prefdata.trainers.guards import defaults, step_guard

    timer = Timer()
    kind, _, target = cfg.rewards[0].partition(":")
    if kind == "rule":
        reward: Reward | str = rule_reward(target)
    elif kind == "rm" and Path(target).exists():
        reward = target
    else:
        raise UnusableInput(f"rewards: {cfg.rewards[0]!r}: use rule:module:function or rm:PATH (an existing folder)")
    check_reward_models(cfg.rewards, cfg.min_rm_accuracy)  # the reward-model gate: a JSON read, before any model loads
    before = evaluate_model(cfg.base_model, cfg, data)
    log(f"ppo: before {before}")
    prompts = sorted({row["prompt"] for row in data.train})
    pool = sft_pool(cfg, data) if cfg.sft_ratio > 0 else []
    if not cfg.guards:
        cfg.max_kl = None
    callbacks = [step_guard(defaults("ppo", cfg.rewards))] if cfg.guards else []
    if reports_to(cfg.report_to, "tensorboard"):  # TRL's trainers write their own; this loop is ours
        callbacks.append(tensorboard_callback(output_dir))
    # Each step's line goes to the run's train.log (the console only with --verbose): log.step when given.
    result = run_ppo(cfg, cfg.base_model, prompts, reward, output_dir, sft_examples=pool or None, callbacks=callbacks,
                     log=getattr(log, "step", log))
    after = evaluate_model(output_dir, cfg, data)
    log(f"ppo: after {after}")
    history = result.pop("history")
    metrics = {
        **before_after(before, after),
        "steps": result["steps"],
        "train_seconds": round(result["train_seconds"], 2),
        "seconds_per_step": round(result["train_seconds"] / max(result["steps"], 1), 3),
        "seconds": timer.seconds(),
        "final": {k: result.get(k) for k in ("reward_mean", "kl", "kl_coef", "policy_loss", "value_loss", "ptx_loss")},
        "reward_as": result["reward_as"],  # callable (rule), adapter (rm on the same base), model (its own copy)
        "sft_mix": {"sources": cfg.sft_sources, "ratio": cfg.sft_ratio if pool else 0.0, "pool": len(pool)},
        "log": history,
    }
    for cb in callbacks:
        getattr(cb, "close", lambda: None)()
    warnings = [w for cb in callbacks for w in getattr(cb, "warnings", ())]
    if warnings:  # advisories: the run went on; the card says what was seen
        metrics["warnings"] = warnings
        for warning in warnings:
            log(f"ppo: {warning}")
    return Path(output_dir), metrics


plugin = Plugin("ppo", PPOTrainConfig, _run_plugin, "PPO on transformers + PEFT: one base, LoRA policy, value head")
