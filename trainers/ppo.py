"""PPO-RLHF on transformers + PEFT (TRL removed its PPOTrainer after 1.12), after the first seed.

One base causal LM is loaded once and plays three of PPO's four roles:

    policy     the base with a trainable LoRA adapter (PEFT)
    value      a linear head on the policy's last hidden state, trained with it
    reference  the same base with the adapter disabled (`with model.disable_adapter():`), no copy
    reward     a Python callable (a rule verifier, or another reward backend's: prefdata.base.specs),
               or a reward model folder: when `prefdata train
               rm` trained it with LoRA on the same base, its adapter is loaded as a second adapter
               ("reward") on this base, with its score head (RewardAdapterScorer: no second copy);
               otherwise it loads once as its own frozen model (RewardModelScorer). Both are
               prefdata.models.reward's, which renders and scores every reward model the same way

A step: sample completions for a batch of prompts (left-padded, `generate` with sampling, from the
prompts rendered as the base model reads them: trainers/rendering.py, prefdata.models.chat); score
them (the reward gets the original prompts: a verifier parses the user's text, a reward model
renders them as its card records); per-token KL to the reference becomes a penalty on every response token, the score lands on
the last one; GAE runs backwards over the response mask; then `ppo_epochs` passes of minibatches
minimise the clipped policy loss + vf_coef * clipped value loss - ent_coef * entropy
+ ptx_coef * the next-token loss of a fresh SFT batch (InstructGPT's PPO-ptx, against the
alignment tax; the plugin's SFT examples are rendered as the prompts are, each ending with eos). An adaptive KL controller (Ziegler et al. 2019) steers beta toward `target_kl`.
The math lives in ppo_math.py as pure functions, a step (rollout, update) in ppo_step.py; this
module holds the config, loads the policy, picks the reward and runs the loop.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

from prefdata.models.reward import REWARD_ADAPTER, RewardAdapterScorer, RewardModelScorer, reward_adapter_dir
from prefdata.trainers.guards import GuardTripped
from prefdata.trainers.ppo_step import Reward, ppo_update, rollout


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


# --- the loop ------------------------------------------------------------------------------------

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


def train(model, value_head, tokenizer, reward: Reward, prompts: list[str], config: PPOConfig,
          sft_examples: Sequence[tuple[str, str]] | None = None,
          callbacks: Sequence[Callable[[int, dict], None]] = (), log: Callable[[str], None] | None = None,
          prompt_texts: Mapping[str, str] | None = None) -> list[dict]:
    """`config.max_steps` PPO steps on a loaded policy, in place; returns the per-step metrics.
    `prompt_texts`: original prompt -> the rendered text the policy generates from (the reward gets
    the original); without it the prompts are generated from as they are."""
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
        chosen = next(batches)
        texts = [prompt_texts[p] for p in chosen] if prompt_texts is not None else None
        batch = rollout(model, value_head, tokenizer, chosen, reward, kl_coef, config, device, texts)
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
            callbacks: Sequence[Callable[[int, dict], None]] = (), log: Callable[[str], None] | None = None,
            prompt_texts: Mapping[str, str] | None = None) -> dict:
    """Train a LoRA policy on `base_model` with PPO and save the merged model to `output_dir`.
    `prompt_texts`: each prompt's rendered text, generated from (see `train`).

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
    history = train(model, value_head, tokenizer, reward_fn, prompts, config, sft_examples, callbacks, log, prompt_texts)
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

    rewards: list[str] = field(default_factory=list, metadata={"help": "One reward: 'rule:NAME' (or 'world'), 'rm:PATH', or another registered reward backend's 'NAME:TARGET'."})
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
    from prefdata.trainers.evaluation import before_after, evaluate_model
    from prefdata.trainers.mixing import sft_pool
    from prefdata.trainers.rendering import as_rendered, prompts_to_render
    from prefdata.trainers.rewards import check_reward_models, reward_function, reward_specs
    from prefdata.trainers.run import Timer
    from prefdata.trainers.curves import reports_to, tensorboard_callback
    from prefdata.trainers.guards import defaults, step_guard

    timer = Timer()
    [spec] = reward_specs(cfg.rewards)  # parsed and checked by its backend (prefdata.base.specs): one line if not
    # A reward-model folder is handed to run_ppo as it is: it loads it as a second adapter on the policy's base
    # when it was trained there (_reward_fn), with no copy of the base; every other reward by its backend.
    reward: Reward | str = spec.target if spec.kind == "rm" else reward_function(spec)
    check_reward_models(cfg.rewards, cfg.min_rm_accuracy)  # the reward-model gate: a JSON read, before any model loads
    data = as_rendered(cfg, data, "ppo")  # rendered by `train` already; a direct call renders it the same way
    before = evaluate_model(cfg.base_model, cfg, data)
    log(f"ppo: before {before}")
    texts = dict(prompts_to_render(data))  # original prompt -> rendered: generated from, the original to the reward
    prompts = sorted(texts)
    pool = sft_pool(cfg, data) if cfg.sft_ratio > 0 else []  # rendered examples, each ending with eos
    if not cfg.guards:
        cfg.max_kl = None
    callbacks = [step_guard(defaults("ppo", cfg.rewards))] if cfg.guards else []
    if reports_to(cfg.report_to, "tensorboard"):  # TRL's trainers write their own; this loop is ours
        callbacks.append(tensorboard_callback(output_dir))
    # Each step's line goes to the run's train.log (the console only with --verbose): log.step when given.
    result = run_ppo(cfg, cfg.base_model, prompts, reward, output_dir, sft_examples=pool or None, callbacks=callbacks,
                     log=getattr(log, "step", log), prompt_texts=texts)
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
