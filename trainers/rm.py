"""`rm`: a Bradley-Terry reward model with TRL's RewardTrainer (sequence classification, one score).

Its output serves the label-direction check (`prefdata check --scorer rm:DIR`), GRPO (`rewards:
[rm:DIR]`) and PPO. The held-out figure is pairwise accuracy: the share of held-out pairs whose chosen
side it scores higher, through prefdata.judging.RewardModelJudge, the same scorer the checks use.
A reward model is not a policy, so nothing is mixed in: there is no generation skill to tax.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trl import RewardConfig, RewardTrainer

from prefdata.trainers import Plugin
from prefdata.trainers.common import (
    MixConfig,
    RunDefaults,
    Timer,
    TrainingData,
    lora_config,
    train_and_measure,
)


@dataclass
class RMTrainConfig(RunDefaults, RewardConfig, MixConfig):
    """TRL's RewardConfig plus prefdata's LoRA fields (MixConfig; its SFT mixing fields do not apply)."""

    learning_rate: float = field(default=1e-3, metadata={"help": "Learning rate (LoRA and the new score head)."})
    max_steps: int = field(default=100, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Pairs per step and device."})
    max_length: int | None = field(default=256, metadata={"help": "Truncate prompt+completion to this many tokens."})
    sft_ratio: float = field(default=0.0, metadata={"help": "Not used by rm (a reward model has no generation to protect)."})


def pairwise_accuracy(model_dir: Path | str, pairs: list[dict[str, str]]) -> float | None:
    """Share of pairs whose chosen side the reward model scores strictly higher."""
    from prefdata.judging import PairToJudge, RewardModelJudge

    if not pairs:
        return None
    verdicts = RewardModelJudge(model_dir).judge([PairToJudge(p["prompt"], p["chosen"], p["rejected"]) for p in pairs])
    return sum(v.label == "a" for v in verdicts) / len(pairs)


def run(cfg: RMTrainConfig, data: TrainingData, output_dir: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    timer = Timer()
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # A causal LM checkpoint loads with a new, randomly initialised one-output score head.
    model = AutoModelForSequenceClassification.from_pretrained(cfg.base_model, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    cfg.output_dir = str(output_dir / "trainer")
    trainer = RewardTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(data.train), processing_class=tokenizer,
                            peft_config=lora_config(cfg, "SEQ_CLS") if cfg.use_lora else None)
    metrics = train_and_measure("rm", trainer, tokenizer, output_dir, cfg, data, log)
    metrics = {"heldout_pairwise_accuracy": pairwise_accuracy(output_dir, data.eval),
               "train_pairwise_accuracy": pairwise_accuracy(output_dir, data.train[:500]),
               **metrics, "seconds": timer.seconds()}
    log(f"rm: held-out pairwise accuracy {metrics['heldout_pairwise_accuracy']}")
    return output_dir, metrics

plugin = Plugin("rm", RMTrainConfig, run, "Bradley-Terry reward model (TRL RewardTrainer) on LoRA adapters")
