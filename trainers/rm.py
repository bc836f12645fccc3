"""`rm`: a Bradley-Terry reward model with TRL's RewardTrainer (sequence classification, one score).

Its output serves the label-direction check (`prefdata check --scorer rm:DIR`), GRPO (`rewards:
[rm:DIR]`) and PPO. The held-out figure is pairwise accuracy: the share of held-out pairs whose chosen
side it scores higher, through prefdata.models.reward.RewardModelScorer, the scorer the checks and PPO use.
A reward model is not a policy, so nothing is mixed in: there is no generation skill to tax.

The pairs reach TRL as rendered text (trainers/rendering.py, prefdata.models.chat): the prompt as
the base model reads it, each side ending with the eos token, so TRL adds nothing; the card records
that rendering, and RewardModelScorer renders what it scores the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from trl import RewardConfig, RewardTrainer

from prefdata.base.verdicts import decide
from prefdata.trainers import Plugin
from prefdata.trainers.config import MixConfig, PairTrainDefaults, RunDefaults, lora_config
from prefdata.trainers.data import TrainingData
from prefdata.trainers.rendering import as_rendered
from prefdata.trainers.run import Timer, train_and_measure


@dataclass
class RMTrainConfig(RunDefaults, PairTrainDefaults, RewardConfig, MixConfig):
    """TRL's RewardConfig plus prefdata's LoRA fields (MixConfig; its SFT mixing fields do not apply)."""

    learning_rate: float = field(default=1e-3, metadata={"help": "Learning rate (LoRA and the new score head)."})
    # On the demo's validated version (269 training pairs), same seed: 100 steps left the reward model
    # unfit (loss 0.70 -> 0.64, train pairwise accuracy 0.64, held-out 0.45: below chance); 300 fit it
    # (loss -> 0.23, train 0.89, held-out 0.69). bench/RESULTS.md, "rm defaults".
    max_steps: int = field(default=300, metadata={"help": "Optimizer steps."})
    sft_ratio: float = field(default=0.0, metadata={"help": "Not used by rm (a reward model has no generation to protect)."})


CHANCE = 0.5  # a coin ranks half the held-out pairs right


def pairwise_accuracy(model_dir: Path | str, pairs: list[dict[str, str]]) -> float | None:
    """Share of `pairs` (rendered: trainers/rendering.py) whose chosen side the reward model scores
    strictly higher.

    Each side is scored as TRL's RewardTrainer trained it on non-chat data, by the one shared scorer
    (prefdata.models.reward) taking the rendered text as it is: prompt + completion, which ends with
    the eos token, the score read there. Without the eos the score is read at the answer's last
    token, where the head was never trained (on the demo version: train pairs ranked right 0.53
    against 0.65)."""
    from prefdata.models.reward import RewardModelScorer

    if not pairs:
        return None
    scorer = RewardModelScorer(model_dir, rendering=None)  # the text is rendered already
    prompts = [p["prompt"] for p in pairs]
    chosen, rejected = scorer(prompts, [p["chosen"] for p in pairs]), scorer(prompts, [p["rejected"] for p in pairs])
    # the one rule of two scores (prefdata.base.verdicts): equal, NaN or no score is not ranked right
    return sum(decide(c, r).label == "a" for c, r in zip(chosen, rejected)) / len(pairs)


def chance_warning(accuracy: float | None, n_eval: int, n_train: int) -> str | None:
    """A line for the log and the card when held-out accuracy is at or below chance, with its usual causes."""
    if accuracy is None or accuracy > CHANCE:
        return None
    return (f"warning: held-out pairwise accuracy {accuracy:.3f} on {n_eval} pairs is at or below chance ({CHANCE}): "
            f"this reward model ranks unseen pairs no better than a coin. Usual causes: too few pairs ({n_train} "
            f"trained on), a base model too small to tell the answers apart, or noisy labels (`prefdata check "
            f"--votes` reports agreement, `--scorer` label direction); do not use it as a reward or a scorer as is")


def run(cfg: RMTrainConfig, data: TrainingData, output_dir: Path, log: Callable[[str], None]) -> tuple[Path, dict]:
    from datasets import Dataset
    from transformers import set_seed

    from prefdata.models.loading import load_reward_model, load_tokenizer

    timer = Timer()
    data = as_rendered(cfg, data, "rm")  # rendered by `train` already; a direct call renders it the same way
    set_seed(cfg.seed)  # the new score head is drawn here, before the trainer seeds anything: same seed, same model
    tokenizer = load_tokenizer(cfg.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # A causal LM checkpoint loads with a new, randomly initialised one-output score head.
    model = load_reward_model(cfg.base_model, num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    cfg.output_dir = str(output_dir / "trainer")
    trainer = RewardTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(data.train), processing_class=tokenizer,
                            peft_config=lora_config(cfg, "SEQ_CLS") if cfg.use_lora else None)
    metrics = train_and_measure("rm", trainer, tokenizer, output_dir, cfg, data, log)
    metrics = {"heldout_pairwise_accuracy": pairwise_accuracy(output_dir, data.eval),
               "train_pairwise_accuracy": pairwise_accuracy(output_dir, data.train[:500]),
               **metrics, "seconds": timer.seconds()}
    log(f"rm: held-out pairwise accuracy {metrics['heldout_pairwise_accuracy']}")
    warning = chance_warning(metrics["heldout_pairwise_accuracy"], len(data.eval), len(data.train))
    if warning:  # the run is not wrong, its model is weak: said in the log and on the card, not an exit code
        metrics["warnings"] = [warning]
        log(f"rm: {warning}")
    return output_dir, metrics

plugin = Plugin("rm", RMTrainConfig, run, "Bradley-Terry reward model (TRL RewardTrainer) on LoRA adapters")
