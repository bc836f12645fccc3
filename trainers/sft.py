"""`sft`: continued supervised fine-tuning on the version's chosen answers (TRL SFTTrainer, LoRA).

The control for every preference method: the same validated version, the chosen side only, the same
evaluation. A gain that continued SFT also gets is not the preference data's doing. Mixing works as
for the other methods: general SFT examples (`general_sft`) join the chosen-only subset. Every
example reaches TRL as rendered text (trainers/rendering.py, prefdata.models.chat): the prompt as
the base model reads it and a completion ending with the eos token, so TRL adds nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trl import SFTConfig, SFTTrainer

from prefdata.base.errors import UnusableInput
from prefdata.trainers import Plugin
from prefdata.trainers.config import MixConfig, PairTrainDefaults, RunDefaults, lora_config
from prefdata.trainers.data import TrainingData, read_sft_file
from prefdata.trainers.evaluation import evaluate_model
from prefdata.trainers.rendering import as_rendered, render_sft
from prefdata.trainers.run import Timer, train_and_measure


@dataclass
class SFTTrainConfig(RunDefaults, PairTrainDefaults, SFTConfig, MixConfig):
    """TRL's SFTConfig plus prefdata's mixing, LoRA and evaluation fields."""

    completion_only_loss: bool | None = field(default=True, metadata={"help": "Loss on the completion only."})


def training_examples(cfg: SFTTrainConfig, data: TrainingData) -> list[tuple[str, str]]:
    """The chosen-only subset (source "chosen"), plus sft_ratio general examples per chosen one (source
    "general"); with "general" alone, the whole general_sft file (e.g. the model's own SFT data).
    Rendered as `data` is (a rendered version's examples, the file's rendered the same way)."""
    chosen = list(data.chosen_sft) if "chosen" in cfg.sft_sources else []
    if "general" not in cfg.sft_sources or not cfg.general_sft:
        return chosen
    general = read_sft_file(cfg.general_sft)
    if not chosen:
        return render_sft(data, general)
    rng = random.Random(cfg.seed)
    return chosen + render_sft(data, [general[rng.randrange(len(general))] for _ in range(int(len(chosen) * cfg.sft_ratio))])


def run(cfg: SFTTrainConfig, data: TrainingData, output_dir: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    from datasets import Dataset
    from prefdata.models.loading import load_causal_lm, load_tokenizer

    timer = Timer()
    data = as_rendered(cfg, data, "sft")  # rendered by `train` already; a direct call renders it the same way
    before = evaluate_model(cfg.base_model, cfg, data)
    tokenizer = load_tokenizer(cfg.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_causal_lm(cfg.base_model)
    examples = training_examples(cfg, data)
    if not examples:
        raise UnusableInput("sft: nothing to train on; sft_sources names no data (chosen, or general with general_sft)")
    cfg.output_dir = str(output_dir / "trainer")
    trainer = SFTTrainer(model=model, args=cfg, processing_class=tokenizer,
                         train_dataset=Dataset.from_list([{"prompt": p, "completion": c} for p, c in examples]),
                         peft_config=lora_config(cfg) if cfg.use_lora else None)
    metrics = train_and_measure("sft", trainer, tokenizer, output_dir, cfg, data, log, before=before)
    return output_dir, {**metrics, "seconds": timer.seconds(), "examples": len(examples)}

plugin = Plugin("sft", SFTTrainConfig, run, "Continued SFT on the chosen answers (TRL SFTTrainer): the control")
