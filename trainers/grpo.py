"""`grpo`: TRL's GRPOTrainer on LoRA adapters, rewards from a rule verifier, a reward model, or both.

    rewards: ["rule:world"] or ["world"]         a registered verifier (prompt, completion) -> bool | float
    rewards: ["rm:.prefdata/runs/rm-x"]          a sequence-classification reward model folder
    rewards: ["NAME:TARGET"]                     another registered backend offering the reward role

Each entry is a spec of the one syntax (prefdata.base.specs), parsed and checked as `collect --judge`
and `check --scorer` are, and made a reward function by its backend (trainers/rewards.py).

A reward model must have a card from `prefdata train rm` recording held-out pairwise accuracy at or
above `min_rm_accuracy` (0.6): below it, or with no figure, the run is refused before anything loads.

The prompts are the validated version's training prompts (each once), handed to TRL rendered as the
base model reads them (trainers/rendering.py, prefdata.models.chat), so what is generated from is what
was sampled on; the dataset's `raw_prompt` column carries each original prompt to the rule rewards,
whose verifiers parse the user's text. A ptx term (SFT batches, see mixing.py) protects skills the
prompts never touch. Guards: KL above a bound, KL collapsing while
the reward climbs, and advantages all ~0 (every group scored alike: group too small or reward flat).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trl import GRPOConfig, GRPOTrainer

from prefdata.base.errors import UnusableInput
from prefdata.trainers import Plugin
from prefdata.trainers.config import MixConfig, RunDefaults, lora_config
from prefdata.trainers.data import TrainingData
from prefdata.trainers.evaluation import evaluate_model
from prefdata.trainers.guards import defaults, guard_callback
from prefdata.trainers.mixing import SFTMixer, sft_batch_size, sft_pool, with_sft_mix
from prefdata.trainers.rendering import as_rendered, prompts_to_render
from prefdata.trainers.rewards import (
    DEFAULT_MIN_RM_ACCURACY, MIN_RM_ACCURACY_HELP, RAW_PROMPT, check_reward_models, reward_function, reward_specs,
)
from prefdata.trainers.run import Timer, train_and_measure


@dataclass
class GRPOTrainConfig(RunDefaults, GRPOConfig, MixConfig):
    """TRL's GRPOConfig plus prefdata's rewards, mixing, LoRA and evaluation fields."""

    rewards: list[str] = field(default_factory=list, metadata={"help": "Reward sources, weighted by reward_weights: 'rule:NAME' (or 'world'), 'rm:PATH', or another registered reward backend's 'NAME:TARGET'."})
    # Measured on the demo's validated version (bench/RESULTS.md, "GRPO defaults"): 2e-3 x 60 steps
    # reached 0.59 -> 0.72 task accuracy; 2e-3 x 150 ran its KL away (the KLAbove guard at step 94);
    # 1e-3 x 150 reaches 0.81 with no guard firing, in under two minutes on 2 cores.
    learning_rate: float = field(default=1e-3, metadata={"help": "LoRA learning rate."})
    max_steps: int = field(default=150, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Completions per step and device (prompts x num_generations)."})
    num_generations: int | None = field(default=8, metadata={"help": "Completions per prompt (the group); must divide the generation batch."})
    max_completion_length: int | None = field(default=8, metadata={"help": "Tokens per completion."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature for the group."})
    beta: float = field(default=0.04, metadata={"help": "KL coefficient (seed table: 0.02-0.06 for GRPO)."})
    min_rm_accuracy: float | None = field(default=DEFAULT_MIN_RM_ACCURACY, metadata={"help": MIN_RM_ACCURACY_HELP})


def reward_funcs(specs: list[str]) -> list:
    """A TRL reward function for each `rewards:` entry, by its backend (trainers/rewards.py)."""
    if not specs:
        raise UnusableInput("grpo needs rewards: e.g. rewards: ['rule:world'] or ['rm:PATH']")
    return [reward_function(spec) for spec in reward_specs(specs)]


def run(cfg: GRPOTrainConfig, data: TrainingData, output_dir: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    from datasets import Dataset
    from prefdata.models.loading import load_causal_lm, load_tokenizer

    timer = Timer()
    check_reward_models(cfg.rewards, cfg.min_rm_accuracy)  # the reward-model gate: a JSON read, before any model loads
    funcs = reward_funcs(cfg.rewards)
    data = as_rendered(cfg, data, "grpo")  # rendered by `train` already; a direct call renders it the same way
    before = evaluate_model(cfg.base_model, cfg, data)
    log(f"grpo: before {before}")
    tokenizer = load_tokenizer(cfg.base_model, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_causal_lm(cfg.base_model)
    prompts = [{"prompt": text, RAW_PROMPT: original} for original, text in prompts_to_render(data)]
    guards = guard_callback(defaults("grpo", cfg.rewards) if cfg.guards else [])
    pool = sft_pool(cfg, data)
    trainer_cls = with_sft_mix(GRPOTrainer) if pool and cfg.sft_ratio > 0 else GRPOTrainer
    cfg.output_dir = str(output_dir / "trainer")
    trainer = trainer_cls(
        model=model, reward_funcs=funcs, args=cfg, train_dataset=Dataset.from_list(prompts),
        processing_class=tokenizer, callbacks=[guards], peft_config=lora_config(cfg) if cfg.use_lora else None,
    )
    if trainer_cls is not GRPOTrainer:
        # Per optimizer step: sft_ratio SFT examples per prompt of the step's groups.
        prompts_per_step = max(1, cfg.per_device_train_batch_size // (cfg.num_generations or 1))
        trainer.sft_mixer = SFTMixer(pool, tokenizer, sft_batch_size(prompts_per_step, cfg.sft_ratio), cfg.sft_weight,
                                     cfg.seed + trainer.accelerator.process_index)  # each rank its own draws
    metrics = train_and_measure("grpo", trainer, tokenizer, output_dir, cfg, data, log, before=before, guards=guards,
                                pool=pool, final_keys=("loss", "reward", "reward_std", "kl", "frac_reward_zero_std", "sft_loss"))
    return output_dir, {**metrics, "seconds": timer.seconds()}

plugin = Plugin("grpo", GRPOTrainConfig, run, "Group Relative Policy Optimization (TRL GRPOTrainer) on LoRA adapters")
