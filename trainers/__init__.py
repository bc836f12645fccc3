"""Trainer plugins: train a model from a validated dataset version.

    from prefdata.trainers import train
    result = train("dpo", "hh@1a2b3c", "dpo.yaml")   # -> TrainResult(model_dir, card, metrics)

Built-ins: rm (TRL RewardTrainer), dpo (TRL DPOTrainer), grpo (TRL GRPOTrainer), ppo (our own, on
transformers + PEFT), and sft (TRL SFTTrainer on the chosen answers: the control a preference method
must beat). The built-ins are prefdata's own entry points (pyproject.toml); another package
adds a method through the entry-point group `prefdata.trainers`, naming a module attribute that is a
`Plugin` (or an operator, under [trainers] in the file PREFDATA_REGISTRY names; prefdata/base/registry.py):

    [project.entry-points."prefdata.trainers"]
    kto = "my_package.kto:plugin"

Targets load lazily: listing the methods imports neither torch nor TRL.

What the plugins share, one job a module: config (the fields every method adds, YAML configs),
data (validated versions, SFT files), rendering (the data as the model reads it: every trainer
hands TRL text rendered by prefdata.models.chat, the one chat rendering sampling used), preflight
(refusals before a model loads), rewards (rule rewards, the reward-model gate), mixing (the SFT
mix), evaluation (the before/after figures), run (a TRL trainer's run, saved once across ranks),
runlog (train.log), card (the model card), curves and guards. PPO is ppo (config, loop, plugin),
ppo_step (rollout, update) and ppo_math.

`train` resolves the run's rendering on the base model's tokenizer (config `chat`, `system_prompt`),
refuses a version sampled through another one (`allow_rendering_mismatch: true` trains anyway), and
hands the plugin the rendered TrainingData: its pairs and examples are the text TRL tokenises as it
is, the prompt rendered once, each completion ending with the eos token.

May import: prefdata.base, prefdata.models, prefdata.data (validated versions), and
prefdata.checks.template_fit alone (`train` refuses pairs the trainer would cut, with the check
`prefdata check` runs).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from prefdata.base.errors import UnusableInput

@dataclass
class TrainResult:
    """What `train` returns: the trained model's folder, its card, and the run's figures."""

    method: str
    dataset: str
    model_dir: Path
    card: Path
    metrics: dict[str, Any]


@dataclass(frozen=True)
class Plugin:
    """A training method: its config dataclass (shared by the CLI and YAML) and its run function
    `run(config, data: TrainingData, output_dir: Path, log) -> (model_dir, metrics)`; `train` hands
    it the data rendered (trainers/rendering.py)."""

    name: str
    config_class: type
    run: Callable[..., tuple[Path, dict[str, Any]]]
    description: str = ""


def targets() -> dict[str, str]:
    """method -> "module:attribute": the registry's trainers (prefdata/base/registry.py: prefdata's own
    first, then other packages' entry points in `prefdata.trainers` and the operator's registry file;
    none may shadow a built-in)."""
    from prefdata.base.registry import entries

    return {name: entry.target for name, entry in entries("trainer").items()}


def methods() -> list[str]:
    return sorted(targets())


def load(method: str) -> Plugin:
    from prefdata.base.registry import load as load_registered

    plugin = load_registered("trainer", method, f"training method")
    if not isinstance(plugin, Plugin):
        raise UnusableInput(f"training method {method!r} ({targets()[method]}) is not a prefdata.trainers.Plugin")
    return plugin


def train(method: str, dataset: str, config: str | Path | dict | None = None, *, store: str | None = None,
          output_dir: str | Path | None = None, base_model: str | Path | None = None,
          chat: str | None = None, system_prompt: str | None = None,
          log: Callable[[str], None] | None = None, verbose: bool = False):
    """Train `method` from the validated version `dataset` ("NAME@VERSION"); returns a TrainResult.

    `base_model`, `chat` and `system_prompt`, when given, replace the config's (None: the config's).

    `log` gets the stage lines; the per-step metrics go to OUTPUT_DIR/train.log (and the card), and to
    `log` as well only when `verbose`."""
    from prefdata.trainers.card import write_card
    from prefdata.trainers.config import load_config_file, parse_config
    from prefdata.trainers.curves import CURVES_FILE, draw_curves, reports_to, tensorboard_dir
    from prefdata.trainers.data import check_waivers, load_validated, read_sft_file
    from prefdata.trainers.preflight import base_tokenizer, check_base_model, check_rendering, check_template
    from prefdata.trainers.rendering import rendered
    from prefdata.trainers.run import is_main_process
    from prefdata.trainers.runlog import RunLog

    # The data first, before the method, the config or the model load: a version that is not
    # validated, or whose files or signed status fail verify, is refused at once (exit 1).
    data = load_validated(dataset, store)  # one held-out split per version, whatever the training seed
    if method not in targets():
        load(method)  # the one line naming the known methods
    values = dict(config) if isinstance(config, dict) else load_config_file(config)
    for field, given in (("base_model", base_model), ("chat", chat), ("system_prompt", system_prompt)):
        if given is not None:
            values[field] = str(given)
    if not values.get("base_model"):
        raise UnusableInput(f"{method}: no base model: set base_model in the config or pass --base-model")
    # What the config names is checked before the method's libraries load (TRL and torch take seconds
    # to import; a mistyped path should not): an SFT file that is missing or unreadable (exit 2), a
    # waiver outside allowed_waivers (exit 1), a base model that is not a model (exit 2).
    for field in ("general_sft", "eval_sft"):
        if values.get(field):
            read_sft_file(values[field])
    allowed = values.get("allowed_waivers")  # a wrong type is parse_config's one line, below
    waivers = check_waivers(data, allowed if isinstance(allowed, list) else None)
    check_base_model(values["base_model"])
    plugin = load(method)
    output_dir = Path(output_dir or values.get("output_dir") or Path(".prefdata") / "runs" / f"{method}-{dataset.replace('@', '-')}")
    values["output_dir"] = str(output_dir)
    cfg = parse_config(plugin.config_class, values)
    # The tokenizer only (no weights): how the version was sampled against how this base renders it
    # (one line, exit 1), then pairs the trainer would cut or mis-tokenise in that rendering (exit 1).
    tokenizer = base_tokenizer(method, cfg.base_model)
    rendering = check_rendering(method, cfg, data, tokenizer)
    check_template(method, cfg, data, tokenizer, rendering)
    data = rendered(data, tokenizer, rendering)  # what every plugin trains and evaluates on
    run_log = RunLog(output_dir / "train.log", log or (lambda _msg: None), verbose)
    if reports_to(getattr(cfg, "report_to", None), "tensorboard"):
        run_log.preface(f"curves while it runs: tensorboard --logdir {tensorboard_dir(output_dir)}")
    run_log.preface(f"rendering: {rendering.describe()} ({rendering.why})")
    if data.rendering is not None and data.rendering.difference(rendering) is not None:
        run_log.preface(f"warning: {data.ref} was sampled as {data.rendering.describe()}; trained as "
                        f"{rendering.describe()} (allow_rendering_mismatch)")
    if waivers:
        run_log.preface(f"{data.ref} passed its checklist with {len(waivers)} check(s) waived: "
                        + "; ".join(f"{check} ({reason})" for check, reason in waivers.items()))
    with warnings.catch_warnings():
        # PEFT reads transformers 5's deprecated `is_gradient_checkpointing` whenever it wraps a model: a
        # FutureWarning about the seam between two libraries on every run, nothing a user can act on
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        model_dir, metrics = plugin.run(cfg, data, output_dir, run_log)
    card = model_dir / "README.md"
    if is_main_process():  # under `accelerate launch`, rank 0 writes the card once
        draw_curves(metrics.get("log") or [], metrics.get("before") or {}, metrics.get("after") or {},
                    Path(model_dir) / CURVES_FILE, title=f"{method} from {data.ref}")
        card = write_card(model_dir, method, data, cfg.base_model, cfg, metrics)
    return TrainResult(method, data.ref, model_dir, card, metrics)
