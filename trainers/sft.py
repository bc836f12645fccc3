"""`sft`: continued supervised fine-tuning on the version's chosen answers (TRL SFTTrainer, LoRA).

The control for every preference method: the same validated version, the chosen side only, the same
evaluation. A gain that continued SFT also gets is not the preference data's doing. Mixing works as
for the other methods: general SFT examples (`general_sft`) join the chosen-only subset.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trl import SFTConfig, SFTTrainer

from prefdata.errors import UnusableInput
from prefdata.trainers import Plugin
from prefdata.trainers.common import (
    MixConfig,
    Timer,
    TrainingData,
    before_after,
    device_defaults,
    evaluate_model,
    lora_config,
    read_sft_file,
    finish,
)


@dataclass
class SFTTrainConfig(SFTConfig, MixConfig):
    """TRL's SFTConfig plus prefdata's mixing, LoRA and evaluation fields."""

    learning_rate: float = field(default=5e-4, metadata={"help": "LoRA learning rate."})
    max_steps: int = field(default=100, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Examples per step and device."})
    completion_only_loss: bool | None = field(default=True, metadata={"help": "Loss on the completion only."})
    logging_steps: float = field(default=1, metadata={"help": "Log every N steps."})
    save_strategy: str = field(default="no", metadata={"help": "The final model is saved by prefdata."})
    report_to: Any = field(default="none", metadata={"help": "Trackers (wandb, tensorboard...)."})
    bf16: bool | None = field(default=None, metadata={"help": "None: bf16 on a GPU that supports it, off on CPU."})
    activation_checkpointing: bool | None = field(default=False, metadata={"help": "Recompute activations to save memory (slower)."})
    max_length: int | None = field(default=256, metadata={"help": "Truncate prompt+completion to this many tokens."})

    def __post_init__(self):
        device_defaults(self)
        super().__post_init__()


def training_examples(cfg: SFTTrainConfig, data: TrainingData) -> list[tuple[str, str]]:
    """The chosen-only subset (source "chosen"), plus sft_ratio general examples per chosen one (source
    "general"); with "general" alone, the whole general_sft file (e.g. the model's own SFT data)."""
    chosen = list(data.chosen_sft) if "chosen" in cfg.sft_sources else []
    if "general" not in cfg.sft_sources or not cfg.general_sft:
        return chosen
    general = read_sft_file(cfg.general_sft)
    if not chosen:
        return general
    rng = random.Random(cfg.seed)
    return chosen + [general[rng.randrange(len(general))] for _ in range(int(len(chosen) * cfg.sft_ratio))]


def run(cfg: SFTTrainConfig, data: TrainingData, output_dir: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    timer = Timer()
    before = evaluate_model(cfg.base_model, cfg, data)
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(cfg.base_model)
    examples = training_examples(cfg, data)
    if not examples:
        raise UnusableInput("sft: nothing to train on; sft_sources names no data (chosen, or general with general_sft)")
    cfg.output_dir = str(output_dir / "trainer")
    trainer = SFTTrainer(model=model, args=cfg, processing_class=tokenizer,
                         train_dataset=Dataset.from_list([{"prompt": p, "completion": c} for p, c in examples]),
                         peft_config=lora_config(cfg) if cfg.use_lora else None)
    train_timer = Timer()
    trainer.train()
    train_seconds = train_timer.seconds()
    ranks = finish(trainer, tokenizer, output_dir)
    after = evaluate_model(output_dir, cfg, data)
    log(f"sft: before {before} after {after}")
    history = [h for h in trainer.state.log_history if "loss" in h]
    return output_dir, {
        **before_after(before, after),
        "steps": trainer.state.global_step,
        "ranks": ranks,
        "train_seconds": train_seconds,
        "seconds_per_step": round(train_seconds / max(trainer.state.global_step, 1), 3),
        "seconds": timer.seconds(),
        "examples": len(examples),
        "log": history,
    }


plugin = Plugin("sft", SFTTrainConfig, run, "Continued SFT on the chosen answers (TRL SFTTrainer): the control")
