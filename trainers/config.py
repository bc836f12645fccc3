"""The configs' shared parts: the fields every method adds to its own config (MixConfig), the
defaults prefdata sets over TRL's (RunDefaults, PairTrainDefaults), a config read from a YAML file
(`load_config_file`, `parse_config`; `config_fields` for `--show-config`), and the LoRA set-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from prefdata.base.errors import UnusableInput
from prefdata.models.chat import chat_mode

DEFAULT_SFT_RATIO = 0.2  # seed pitfall 6: "1 preference pair : 0.2 SFT"


@dataclass
class MixConfig:
    """The fields every method adds to its own config (TRL's, where one exists)."""

    base_model: str | None = field(default=None, metadata={"help": "The SFT model to start from: a folder or a hub name (from_pretrained)."})
    general_sft: str | None = field(default=None, metadata={"help": "JSONL/Parquet with prompt, completion: the general SFT data the base model was trained on, mixed in against the alignment tax."})
    sft_sources: list[str] = field(default_factory=lambda: ["chosen", "general"], metadata={"help": "SFT data to mix in: 'chosen' (the version's chosen-only subset, checklist item 11) and/or 'general' (general_sft)."})
    sft_ratio: float = field(default=DEFAULT_SFT_RATIO, metadata={"help": "SFT examples per preference example in each step; 0 turns mixing off."})
    sft_weight: float = field(default=1.0, metadata={"help": "Weight of the mixed-in next-token loss (the ptx term)."})
    eval_sft: str | None = field(default=None, metadata={"help": "JSONL/Parquet with prompt, completion held out from training: its loss before and after is the alignment tax."})
    evaluator: str | None = field(default=None, metadata={"help": "A registered evaluator (prefdata.base.registry) taking a model folder and returning {metric: value}, run before and after (e.g. world)."})
    evaluator_kwargs: dict | None = field(default=None, metadata={"help": "Keyword arguments for the evaluator (e.g. {world: .prefdata/world/KEY})."})
    use_lora: bool = field(default=True, metadata={"help": "Train LoRA adapters (PEFT); the reference policy is the base with adapters disabled."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    guards: bool = field(default=True, metadata={"help": "Stop the run when a guard from the KL tuning table fires."})
    length_max_new_tokens: int = field(default=128, metadata={"help": "Greedy tokens per held-out prompt for the card's mean_response_length before/after (0 skips it)."})
    allowed_waivers: list[str] | None = field(default=None, metadata={"help": "Checks the dataset's validation may have waived (by id, e.g. [min_size, safety]); a version validated with any other check waived is refused. None accepts every recorded waiver; either way each one is in the run's log and on the model card."})
    check_template: bool = field(default=True, metadata={"help": "Before training, run the template_fit check (checks/template_fit.py) on the training pairs with the base model's tokenizer, the run's rendering and the config's max_length, and refuse the run when a pair would be cut or mis-tokenised; false trains anyway (methods without TRL's max_length, grpo and ppo, never tokenise the pairs' responses and skip it)."})
    chat: str = field(default="auto", metadata={"help": "Render prompts through the base model's chat template (prefdata.models.chat): auto (on when the tokenizer has a template that writes the assistant's turn; a version that records how it was sampled is rendered that way), true, or false (plain text)."})
    system_prompt: str | None = field(default=None, metadata={"help": "A system prompt put before every prompt (as a system turn with the chat template, before a blank line in plain text); None: the one the version records, if any."})
    allow_rendering_mismatch: bool = field(default=False, metadata={"help": "Train even when the version records a rendering (chat template, its sha256, system prompt) other than the one the base model's tokenizer gives: the model is then trained on other text than it was sampled on. The card records both."})



@dataclass
class RunDefaults:
    """Defaults every TRL-based method config shares, listed first among its bases so these win over
    TRL's: log each step (the guards read each log), prefdata saves the model itself, TensorBoard as
    the tracker, and device_defaults for bf16 / checkpointing / use_cpu."""

    logging_steps: float = field(default=1, metadata={"help": "Log every N steps (the guards read each log)."})
    save_strategy: str = field(default="no", metadata={"help": "The final model is saved by prefdata."})
    report_to: Any = field(default="tensorboard", metadata={"help": "Trackers: tensorboard (the default: OUTPUT_DIR/runs, `tensorboard --logdir` it while the run goes), wandb (pip install 'prefdata[wandb]'; WANDB_MODE=offline needs no account), a list of them, or none."})
    bf16: bool | None = field(default=None, metadata={"help": "None: bf16 on a GPU that supports it, off on CPU."})
    # TRL 1.16 turns checkpointing on even on CPU; transformers 5 names it activation_checkpointing.
    activation_checkpointing: bool | None = field(default=False, metadata={"help": "Recompute activations to save memory (slower)."})

    def __post_init__(self):
        device_defaults(self)
        super().__post_init__()  # the TRL config's own checks


@dataclass
class PairTrainDefaults:
    """prefdata's defaults for the TRL methods that train on the pairs' text (dpo, rm, sft), listed
    before the TRL config among a method's bases so these win over TRL's: LoRA-sized steps and rate,
    and a max_length the template_fit check holds the pairs to before training."""

    learning_rate: float = field(default=5e-4, metadata={"help": "LoRA learning rate."})
    max_steps: int = field(default=100, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Pairs (sft: examples) per step and device."})
    max_length: int | None = field(default=256, metadata={"help": "Truncate prompt+completion to this many tokens."})


def parse_config(cls: type, values: dict[str, Any] | None) -> Any:
    """A config dataclass from a YAML mapping: unknown keys and wrong types are one clear line."""
    values = dict(values or {})
    renamed = getattr(cls, "RENAMED", {})  # old name -> the TRL name a field took (PPO's lr, steps, batch_size)
    for old in sorted(set(values) & set(renamed)):
        raise UnusableInput(f"config: {old!r} is now {renamed[old]!r} (TRL's name) in {cls.__name__}: "
                            f"use {renamed[old]}: {values[old]!r}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        close = {k: [n for n in known if n.startswith(k[:4])][:3] for k in unknown}
        raise UnusableInput(f"config: unknown key(s) {unknown} for {cls.__name__}" +
                            "".join(f"; did you mean {c}?" for c in close.values() if c))
    try:
        config = cls(**values)  # the configs validate themselves in __post_init__ (TRL's, and ours)
        if isinstance(config, MixConfig):  # TRL's __post_init__ ends the chain before a MixConfig's would run
            config.chat = chat_mode(config.chat)  # auto, true or false (a YAML bool as well)
    except (TypeError, ValueError) as exc:
        raise UnusableInput(f"config for {cls.__name__}: {exc}") from None
    return config


def config_fields(cls: type) -> list[tuple[str, Any, str]]:
    """(name, default, help) of every field a config takes, in the dataclass's order: TRL's and
    prefdata's alike (`prefdata train METHOD --show-config`). A field without a default has `MISSING`."""
    from dataclasses import MISSING

    out = []
    for f in fields(cls):
        if not f.init:
            continue
        default = f.default if f.default is not MISSING else f.default_factory() if f.default_factory is not MISSING else MISSING
        out.append((f.name, default, " ".join(str(f.metadata.get("help", "")).split())))
    return out


def load_config_file(path: str | Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    from prefdata.base.files import read_side_file
    from prefdata.base.yamlkeys import load_yaml

    path = Path(path)
    data = load_yaml(read_side_file(path, "--config"), str(path)) or {}
    if not isinstance(data, dict):
        raise UnusableInput(f"{path}: a trainer config is a mapping of field: value")
    return data


def device_defaults(config) -> None:
    """Fill what TRL 1.16 gets wrong off a GPU: bf16 (None -> on only where a CUDA device supports it)
    and use_cpu (on where there is no CUDA device, so a torchrun launch on CPU runs data-parallel over
    gloo instead of N unrelated single-process runs)."""
    import torch

    cuda = torch.cuda.is_available()
    if config.bf16 is None:
        config.bf16 = cuda and torch.cuda.is_bf16_supported()
    if not cuda:
        config.use_cpu = True


def lora_config(mix: MixConfig, task_type: str = "CAUSAL_LM"):
    from peft import LoraConfig

    return LoraConfig(r=mix.lora_r, lora_alpha=mix.lora_alpha, lora_dropout=mix.lora_dropout,
                      target_modules="all-linear", task_type=task_type)
