"""`dpo`: TRL's DPOTrainer on LoRA adapters, the reference being the base with adapters disabled.

Defaults are the settings that made DPO help on the demo world (bench/RESULTS.md): the `sft` loss
term beside `sigmoid` (TRL 1.16 has no `rpo_alpha`; `loss_type=["sigmoid", "sft"]` with
`loss_weights` is its form), and SFT batches mixed in each step (the ptx term). Plain sigmoid DPO on
pairs whose sides differ by a digit pushes both likelihoods down; the ChosenCollapse guard stops
such a run with a message naming the fix.

The pairs reach TRL as rendered text (trainers/rendering.py, prefdata.models.chat): the prompt as
the base model reads it, each side ending with the eos token, so TRL templates and adds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trl import DPOConfig, DPOTrainer

from prefdata.trainers import Plugin
from prefdata.trainers.config import MixConfig, PairTrainDefaults, RunDefaults, lora_config
from prefdata.trainers.data import TrainingData
from prefdata.trainers.evaluation import evaluate_model
from prefdata.trainers.guards import defaults, guard_callback
from prefdata.trainers.mixing import SFTMixer, sft_batch_size, sft_pool, with_sft_mix
from prefdata.trainers.rendering import as_rendered
from prefdata.trainers.run import Timer, train_and_measure


@dataclass
class DPOTrainConfig(RunDefaults, PairTrainDefaults, DPOConfig, MixConfig):
    """TRL's DPOConfig plus prefdata's mixing, LoRA and evaluation fields (MixConfig)."""

    loss_type: list[str] = field(default_factory=lambda: ["sigmoid", "sft"], metadata={"help": "TRL DPO loss types, combined with loss_weights."})
    loss_weights: list[float] | None = field(default_factory=lambda: [1.0, 1.0], metadata={"help": "One weight per loss type."})
    beta: float = field(default=0.1, metadata={"help": "KL strength of DPO's implicit reward."})

    def __post_init__(self):
        super().__post_init__()
        if self.use_weighting and "sft" in self.loss_type:
            # TRL 1.16 multiplies the sft term's expanded (shared-memory) loss in place and fails mid-step.
            raise ValueError("use_weighting cannot be combined with the 'sft' loss type in TRL 1.16 (its in-place "
                             "weighting fails on the sft term): drop 'sft' from loss_type (and its loss_weights entry) "
                             "or turn use_weighting off; the SFT mix (sft_ratio) still protects the chosen answers")


def run(cfg: DPOTrainConfig, data: TrainingData, output_dir: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    from datasets import Dataset
    from prefdata.models.loading import load_causal_lm, load_tokenizer

    timer = Timer()
    data = as_rendered(cfg, data, "dpo")  # rendered by `train` already; a direct call renders it the same way
    before = evaluate_model(cfg.base_model, cfg, data)
    log(f"dpo: before {before}")
    tokenizer = load_tokenizer(cfg.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_causal_lm(cfg.base_model)
    guards = guard_callback(defaults("dpo") if cfg.guards else [])
    pool = sft_pool(cfg, data)
    trainer_cls = with_sft_mix(DPOTrainer) if pool and cfg.sft_ratio > 0 else DPOTrainer
    cfg.output_dir = str(output_dir / "trainer")
    trainer = trainer_cls(
        model=model, ref_model=None, args=cfg, train_dataset=Dataset.from_list(data.train),
        processing_class=tokenizer, callbacks=[guards], peft_config=lora_config(cfg) if cfg.use_lora else None,
    )
    if trainer_cls is not DPOTrainer:
        trainer.sft_mixer = SFTMixer(pool, tokenizer, sft_batch_size(cfg.per_device_train_batch_size, cfg.sft_ratio),
                                     cfg.sft_weight, cfg.seed + trainer.accelerator.process_index)  # each rank its own draws
    metrics = train_and_measure("dpo", trainer, tokenizer, output_dir, cfg, data, log, before=before, guards=guards, pool=pool,
                                final_keys=("loss", "rewards/chosen", "rewards/rejected", "rewards/margins",
                                            "rewards/accuracies", "sft_loss"))
    # What TRL's trainer itself took of the length controls (README: "Length"), as read back from it.
    metrics["length_controls"] = {"loss_type": list(trainer.loss_types), "ld_alpha": trainer.ld_alpha,
                                  "use_weighting": trainer.use_weighting}
    return output_dir, {**metrics, "seconds": timer.seconds()}

plugin = Plugin("dpo", DPOTrainConfig, run, "Direct Preference Optimization (TRL DPOTrainer) on LoRA adapters")
