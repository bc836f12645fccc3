"""One run of a TRL trainer, what every TRL-based plugin shares: train, stop on a guard's alarm, save
the merged model once (rank 0 under `accelerate launch`) after checking the ranks agree, and measure.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from prefdata.trainers.config import MixConfig
from prefdata.trainers.data import TrainingData
from prefdata.trainers.evaluation import before_after, evaluate_model
from prefdata.trainers.guards import GuardTripped
from prefdata.trainers.runlog import route_step_logs


def is_main_process() -> bool:
    """True in a single process and on rank 0 of an `accelerate launch` run (DDP, FSDP, DeepSpeed)."""
    from accelerate import PartialState

    return PartialState().is_main_process


def rank_checksums(trainer) -> dict[str, Any]:
    """Every rank's checksum of its trainable weights, gathered: under DDP they must be identical after
    each step, so `ranks_agree` False means the replicas diverged (a broken all-reduce or seed)."""
    import torch

    params = [p.detach().double() for p in trainer.model.parameters() if p.requires_grad]
    local = torch.stack([sum(p.sum() for p in params), sum(p.abs().sum() for p in params)]).to(trainer.accelerator.device)
    gathered = trainer.accelerator.gather(local.unsqueeze(0)).cpu().tolist()
    return {"world_size": trainer.accelerator.num_processes, "checksums": gathered,
            "ranks_agree": all(row == gathered[0] for row in gathered)}


def finish(trainer, tokenizer, output_dir: Path) -> dict[str, Any]:
    """After trainer.train(): check the ranks agree, save the merged model once (rank 0), and let every
    rank wait until it is on disk, so whatever reads it next finds it whole."""
    ranks = rank_checksums(trainer)
    if trainer.accelerator.is_main_process:
        save_merged(trainer.model, tokenizer, output_dir)
    trainer.accelerator.wait_for_everyone()
    return ranks


def train_and_measure(method: str, trainer, tokenizer, output_dir: Path, mix: MixConfig, data: TrainingData,
                      log: Callable[[str], None], *, before: dict | None = None, guards=None,
                      final_keys: tuple = (), pool: list | None = None) -> dict[str, Any]:
    """Train, stop on a guard's alarm, save once (rank 0), and measure: the figures every plugin reports.
    `before` given: evaluate the saved model the same way and report before/after/change."""
    route_step_logs(trainer, log)  # per-step dicts to DIR/train.log (and the console with --verbose), not stdout
    timer = Timer()
    trainer.train()
    train_seconds = timer.seconds()
    steps = trainer.state.global_step
    if guards is not None and guards.alarm:
        raise GuardTripped(f"{method} stopped at step {steps}: {guards.alarm}", history=guards.history)
    ranks = finish(trainer, tokenizer, output_dir)
    history = [h for h in (guards.history if guards is not None else trainer.state.log_history) if "loss" in h]
    metrics: dict[str, Any] = {}
    if before is not None:
        after = evaluate_model(output_dir, mix, data)
        log(f"{method}: after {after}")
        metrics.update(before_after(before, after))
    metrics.update(steps=steps, ranks=ranks, train_seconds=train_seconds,
                   seconds_per_step=round(train_seconds / max(steps, 1), 3))
    if final_keys:
        metrics["final"] = {k: history[-1][k] for k in final_keys if history and k in history[-1]}
    if guards is not None and guards.warnings:  # advisories: the run went on; the card says what was seen
        metrics["warnings"] = list(guards.warnings)
        for warning in guards.warnings:
            log(f"{method}: {warning}")
    if pool is not None:
        metrics["sft_mix"] = {"sources": mix.sft_sources, "ratio": mix.sft_ratio if pool else 0.0, "pool": len(pool)}
    metrics["log"] = history
    return metrics


def save_merged(model, tokenizer, output_dir: Path) -> Path:
    """Save the trained model so `from_pretrained(output_dir)` loads it: LoRA merged into the base
    weights, the adapter itself kept under adapter/ for reuse on the same base."""
    output_dir.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):
        model.save_pretrained(output_dir / "adapter")
        model = model.merge_and_unload()
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


class Timer:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return round(time.perf_counter() - self.start, 2)
