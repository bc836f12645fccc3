"""Build the demo world once per config and reuse it: tokenizer + SFT model + world.json.

    .prefdata/world/<config key>/sft/         model and tokenizer (save_pretrained), loadable with
                                              AutoModelForCausalLM / AutoTokenizer.from_pretrained
    .prefdata/world/<config key>/world.json   config, metrics, build seconds, library versions

The folder appears by one rename of a fully written temporary folder, under a file lock, so two
processes asking for the same world build it once and a crashed build leaves no half world behind.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from prefdata.world.config import WORLD_FORMAT, WorldConfig
from prefdata.world.tasks import Example, eval_examples, heldout_prompts, sft_examples, task_prompts

DEFAULT_CACHE = Path(".prefdata") / "world"


@dataclass(frozen=True)
class WorldPaths:
    root: Path
    sft: Path  # the SFT model and its tokenizer
    world_json: Path
    reused: bool  # True when the world was already built and nothing was trained

    @property
    def judge(self) -> Path:
        """The judge model: the SFT model itself; no tiny judge beat chance (see judge.py)."""
        return self.sft

    def info(self) -> dict:
        return json.loads(self.world_json.read_text())


def heldout(config: WorldConfig) -> tuple[list[Example], list[Example]]:
    """The fixed held-out (arithmetic, reverse) examples, with true answers."""
    return eval_examples(config.seed, config.n_eval_task, config.n_eval_general)


def sft_data(config: WorldConfig) -> list[Example]:
    """The flawed SFT mix the world's model is trained on."""
    exclude = heldout_prompts(config.seed, config.n_eval_task, config.n_eval_general)
    return sft_examples(config.seed, config.n_sft, config.general_share, config.flaw_share, exclude)


def sampling_prompts(config: WorldConfig, n: int) -> list[str]:
    """n distinct arithmetic prompts for candidates, pairs and RL; never an eval prompt."""
    return task_prompts(config.seed, n, heldout_prompts(config.seed, config.n_eval_task, config.n_eval_general))


def cache_dir() -> Path:
    return Path(os.environ.get("PREFDATA_WORLD", DEFAULT_CACHE))


def _paths(root: Path, reused: bool) -> WorldPaths:
    return WorldPaths(root=root, sft=root / "sft", world_json=root / "world.json", reused=reused)


def build_world(config: WorldConfig | None = None, cache: Path | str | None = None,
                log: Callable[[str], None] | None = None) -> WorldPaths:
    """The world for `config` under `cache` (default $PREFDATA_WORLD or .prefdata/world), built if missing."""
    from filelock import FileLock

    if "torch" not in sys.modules:
        # Two training threads on two cores shared with one busy process, per step: 4.5 s with
        # OpenMP's default spin-waiting, 0.10-0.23 s waiting passively. On an idle machine passive
        # costs 0.097 s against 0.062 s; we take the build that always finishes. libgomp reads
        # this once, when torch loads, so it only applies to a process that has not loaded torch.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    config = config or WorldConfig()
    cache = Path(cache) if cache is not None else cache_dir()
    root = cache / config.key()
    if (root / "world.json").is_file():
        return _paths(root, reused=True)
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f"{config.key()}.lock")):
        if (root / "world.json").is_file():  # another process built it while we waited
            return _paths(root, reused=True)
        tmp = cache / f"{config.key()}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build(config, tmp, log or (lambda _msg: None))
            shutil.rmtree(root, ignore_errors=True)  # a folder without world.json is a crashed build
            tmp.rename(root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _paths(root, reused=False)


def _build(config: WorldConfig, out: Path, log: Callable[[str], None]) -> None:
    import torch
    import transformers

    from prefdata.world.model import new_model, train
    from prefdata.world.tokenizer import build_tokenizer, save_tokenizer

    started = time.perf_counter()
    tokenizer = build_tokenizer()
    examples = sft_data(config)
    model = new_model(config, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"training a {n_params / 1e6:.2f}M-parameter Llama for {config.steps} steps on {len(examples)} examples")
    every = max(1, config.steps // 10)
    t_train = time.perf_counter()
    losses = train(model, tokenizer, examples, config,
                   lambda step, loss: (step + 1) % every == 0 and log(f"step {step + 1}/{config.steps} loss {loss:.4f}"))
    train_seconds = time.perf_counter() - t_train
    model.save_pretrained(out / "sft")
    save_tokenizer(tokenizer, out / "sft")
    # Score the saved files through the public loading path, so the world proves it loads.
    t_eval = time.perf_counter()
    metrics = evaluate(out / "sft", config)
    eval_seconds = time.perf_counter() - t_eval
    log(f"task accuracy {metrics['task_accuracy']:.3f}, general accuracy {metrics['general_accuracy']:.3f}")
    arithmetic = [ex for ex in examples if ex.kind == "arithmetic"]
    info = {
        "format": WORLD_FORMAT,
        "key": config.key(),
        "config": asdict(config),
        "metrics": {
            **metrics,
            "n_params": n_params,
            "final_loss": sum(losses[-20:]) / len(losses[-20:]),
        },
        "data": {
            "n_sft": len(examples),
            "n_arithmetic": len(arithmetic),
            "n_flawed": sum(ex.flawed for ex in arithmetic),
            "n_carry": sum(ex.carry for ex in arithmetic),
        },
        "build_seconds": {
            "train": round(train_seconds, 1),
            "eval": round(eval_seconds, 1),
            "total": round(time.perf_counter() - started, 1),
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (out / "world.json").write_text(json.dumps(info, indent=2) + "\n")


def evaluate(model_path: Path | str, config: WorldConfig | None = None, world: Path | str | None = None) -> dict[str, float]:
    """Greedy held-out accuracy of any causal LM on disk: {"task_accuracy", "general_accuracy"}.

    The eval prompts are those of `config`, else of the world folder `world` (its world.json), else
    of the world the model sits in (../world.json), else of the default world. A model trained
    elsewhere names its world, so before and after are scored on the same prompts.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prefdata.world.model import general_accuracy, task_accuracy

    model_path = Path(model_path)
    if config is None:
        world_json = Path(world) / "world.json" if world is not None else model_path.parent / "world.json"
        if world is not None and not world_json.is_file():
            raise FileNotFoundError(f"{world_json} not found: `world` must be a built world's folder")
        config = WorldConfig.from_dict(json.loads(world_json.read_text())["config"]) if world_json.is_file() else WorldConfig()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    task, general = heldout(config)
    return {
        "task_accuracy": task_accuracy(model, tokenizer, [ex.prompt for ex in task]),
        "general_accuracy": general_accuracy(model, tokenizer, [ex.prompt for ex in general]),
    }
