"""Build the demo world once per config and reuse it: tokenizer + SFT model + judge + world.json.

    .prefdata/world/<config key>/sft/         the policy: model and tokenizer (save_pretrained), loadable
                                              with AutoModelForCausalLM / AutoTokenizer.from_pretrained
    .prefdata/world/<config key>/judge/       the reference judge (config.judge_recipe()), the same way
    .prefdata/world/<config key>/world.json   the manifest: config, figures, build seconds, library
                                              versions, sha256 of every model file

The default world ships in the package (prefdata/world/weights/, the same layout; `prefdata world
build --ship` writes it), so build_world() returns it without training anything.

The folder appears by one rename of a fully written temporary folder, under a file lock, so two
processes asking for the same world build it once and a crashed build leaves no half world behind.
"""

from __future__ import annotations

import hashlib
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
# The default world, built by `prefdata world build --ship` and shipped in the package, so the demo
# loads it and builds nothing. world.json beside the models is its manifest (recipe, seed, sha256,
# held-out figures).
SHIPPED = Path(__file__).parent / "weights"
MODEL_DIRS = ("sft", "judge")


@dataclass(frozen=True)
class WorldPaths:
    root: Path
    sft: Path  # the SFT model and its tokenizer
    world_json: Path
    reused: bool  # True when the world was already built and nothing was trained

    @property
    def judge(self) -> Path:
        """The reference judge: the world's shape trained longer on correct problems (see judge.py)."""
        if not (self.root / "judge").is_dir():
            raise FileNotFoundError(f"the world {self.root} has no judge model: build it with "
                                    "build_world(config, judge=True)")
        return self.root / "judge"

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


def shipped_world(config: WorldConfig | None = None) -> WorldPaths | None:
    """The world shipped in the package, when it is the one `config` (default: WorldConfig()) asks for."""
    config = config or WorldConfig()
    manifest = SHIPPED / "world.json"
    if manifest.is_file() and json.loads(manifest.read_text()).get("key") == config.key():
        return _paths(SHIPPED, reused=True)
    return None


WORLD_MODEL = "world"  # a base model, policy or prompts spec that names the demo world's own


def model_or_world(spec: str | None) -> str | None:
    """A base model spec with "world" taken to the demo world's SFT model folder (built or taken
    from its cache): `prefdata train --base-model world` and the train flow's `base_model: world`."""
    return str(build_world().sft) if spec == WORLD_MODEL else spec


def build_world(config: WorldConfig | None = None, cache: Path | str | None = None,
                log: Callable[[str], None] | None = None, use_shipped: bool = True,
                judge: bool | None = None) -> WorldPaths:
    """The world for `config`: the shipped one when it matches (and `use_shipped`), else the one under
    `cache` (default $PREFDATA_WORLD or .prefdata/world), built if missing. `judge`: also train the
    judge model (default: only for the default world, whose judge the demo uses; a small test world
    should not pay for 1,558 judge steps); a world without one sits in `<key>-sft`."""
    from filelock import FileLock

    if use_shipped and cache is None and (shipped := shipped_world(config)) is not None:
        return shipped

    if "torch" not in sys.modules:
        # Two training threads on two cores shared with one busy process, per step: 4.5 s with
        # OpenMP's default spin-waiting, 0.10-0.23 s waiting passively. On an idle machine passive
        # costs 0.097 s against 0.062 s; we take the build that always finishes. libgomp reads
        # this once, when torch loads, so it only applies to a process that has not loaded torch.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    config = config or WorldConfig()
    judge = config == WorldConfig() if judge is None else judge
    name = config.key() if judge else f"{config.key()}-sft"
    cache = Path(cache) if cache is not None else cache_dir()
    root = cache / name
    if (root / "world.json").is_file():
        return _paths(root, reused=True)
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f"{name}.lock")):
        if (root / "world.json").is_file():  # another process built it while we waited
            return _paths(root, reused=True)
        tmp = cache / f"{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build(config, tmp, log or (lambda _msg: None), judge)
            shutil.rmtree(root, ignore_errors=True)  # a folder without world.json is a crashed build
            tmp.rename(root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _paths(root, reused=False)


def _train_model(config: WorldConfig, out: Path, log: Callable[[str], None], what: str) -> dict:
    """Train one model of the world's shape on sft_data(config), save it (safetensors, with the
    tokenizer) to `out`, score it through the public loading path; returns its figures."""
    from prefdata.world.model import new_model, train
    from prefdata.world.tokenizer import build_tokenizer, save_tokenizer

    tokenizer = build_tokenizer()
    examples = sft_data(config)
    model = new_model(config, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{what}: training a {n_params / 1e6:.2f}M-parameter Llama for {config.steps} steps on {len(examples)} examples")
    every = max(1, config.steps // 10)
    t_train = time.perf_counter()
    losses = train(model, tokenizer, examples, config,
                   lambda step, loss: (step + 1) % every == 0 and log(f"{what}: step {step + 1}/{config.steps} loss {loss:.4f}"))
    train_seconds = time.perf_counter() - t_train
    model.save_pretrained(out)
    save_tokenizer(tokenizer, out)
    # Score the saved files through the public loading path, so the world proves it loads.
    t_eval = time.perf_counter()
    metrics = evaluate(out, config)
    log(f"{what}: task accuracy {metrics['task_accuracy']:.3f}, general accuracy {metrics['general_accuracy']:.3f}")
    arithmetic = [ex for ex in examples if ex.kind == "arithmetic"]
    return {
        "metrics": {**metrics, "n_params": n_params, "final_loss": sum(losses[-20:]) / len(losses[-20:])},
        "data": {"n_sft": len(examples), "n_arithmetic": len(arithmetic),
                 "n_flawed": sum(ex.flawed for ex in arithmetic), "n_carry": sum(ex.carry for ex in arithmetic)},
        "seconds": {"train": round(train_seconds, 1), "eval": round(time.perf_counter() - t_eval, 1)},
    }


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under the world's model folders, by path relative to the world root."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for sub in MODEL_DIRS if (root / sub).is_dir() for p in sorted((root / sub).rglob("*")) if p.is_file()}


def _build(config: WorldConfig, out: Path, log: Callable[[str], None], with_judge: bool) -> None:
    started = time.perf_counter()
    sft = _train_model(config, out / "sft", log, "sft")
    judge = _train_model(config.judge_recipe(), out / "judge", log, "judge") if with_judge else None
    write_manifest(out, config, sft, judge, time.perf_counter() - started)


def write_manifest(out: Path, config: WorldConfig, sft: dict, judge: dict | None, seconds: float) -> dict:
    """world.json: the recipe (config, judge recipe), figures, build seconds, versions and the sha256
    of every model file; `sft` and `judge` are _train_model's results (judge None: no judge built)."""
    import torch
    import transformers

    info = {
        "format": WORLD_FORMAT,
        "key": config.key(),
        "reproduce": "prefdata world build --ship (fixed seed, steps and data order; two training threads)",
        "config": asdict(config),
        "metrics": sft["metrics"],  # the SFT model's: the policy the demo starts from
        "data": sft["data"],
        "judge": judge and {
            "recipe": "the SFT model's shape and seed, trained on correct arithmetic only (config.judge_recipe())",
            "metrics": judge["metrics"],  # task_accuracy: how often it solves a held-out problem exactly
            "data": judge["data"],
        },
        "build_seconds": {
            "sft_train": sft["seconds"]["train"], "judge_train": judge and judge["seconds"]["train"],
            "total": round(seconds, 1),
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "sha256": file_hashes(out),
    }
    (out / "world.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def ship(world: WorldPaths, dest: Path = SHIPPED, max_file_bytes: int = 5_000_000) -> WorldPaths:
    """Copy a built world's models and manifest into the package (replacing what is there), so the
    demo loads it and builds nothing. Every file must stay small enough to commit."""
    if world.info().get("judge") is None:
        raise ValueError(f"{world.root} has no judge model to ship: build it with judge=True")
    big = [f"{p} ({p.stat().st_size} bytes)" for sub in MODEL_DIRS for p in (world.root / sub).rglob("*")
           if p.is_file() and p.stat().st_size > max_file_bytes]
    if big:
        raise ValueError(f"files over {max_file_bytes} bytes cannot ship in the package: {', '.join(big)}")
    if file_hashes(world.root) != world.info()["sha256"]:
        raise ValueError(f"{world.root}: files differ from its world.json sha256; rebuild it")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for sub in MODEL_DIRS:
        shutil.copytree(world.root / sub, tmp / sub)
    shutil.copy2(world.world_json, tmp / "world.json")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return _paths(dest, reused=True)


def evaluate(model_path: Path | str, config: WorldConfig | None = None, world: Path | str | None = None) -> dict[str, float]:
    """Greedy held-out accuracy of any causal LM on disk: {"task_accuracy", "general_accuracy"}.

    The eval prompts are those of `config`, else of the world folder `world` (its world.json), else
    of the world the model sits in (../world.json), else of the default world. A model trained
    elsewhere names its world, so before and after are scored on the same prompts.
    """
    from prefdata.models.loading import load_causal_lm, load_tokenizer
    from prefdata.world.model import general_accuracy, task_accuracy

    model_path = Path(model_path)
    if config is None:
        world_json = Path(world) / "world.json" if world is not None else model_path.parent / "world.json"
        if world is not None and not world_json.is_file():
            raise FileNotFoundError(f"{world_json} not found: `world` must be a built world's folder")
        config = WorldConfig.from_dict(json.loads(world_json.read_text())["config"]) if world_json.is_file() else WorldConfig()
    tokenizer = load_tokenizer(model_path)
    model = load_causal_lm(model_path).eval()
    task, general = heldout(config)
    return {
        "task_accuracy": task_accuracy(model, tokenizer, [ex.prompt for ex in task]),
        "general_accuracy": general_accuracy(model, tokenizer, [ex.prompt for ex in general]),
    }
