"""What every trainer plugin shares: the validated data it trains from, the SFT mix against the
alignment tax, the LoRA set-up, evaluation before and after, and the model card.

No plugin trains from a version that is not validated or fails `verify`: the card it writes names
the version and its content hash, so a model can always be traced to the exact data behind it.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Callable

from prefdata.base.errors import GateFailed, UnusableInput, ways_out

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
    evaluator: str | None = field(default=None, metadata={"help": "'module:function' taking a model folder and returning {metric: value}, run before and after (e.g. prefdata.world:evaluate)."})
    evaluator_kwargs: dict | None = field(default=None, metadata={"help": "Keyword arguments for the evaluator (e.g. {world: .prefdata/world/KEY})."})
    use_lora: bool = field(default=True, metadata={"help": "Train LoRA adapters (PEFT); the reference policy is the base with adapters disabled."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    guards: bool = field(default=True, metadata={"help": "Stop the run when a guard from the KL tuning table fires."})
    length_max_new_tokens: int = field(default=128, metadata={"help": "Greedy tokens per held-out prompt for the card's mean_response_length before/after (0 skips it)."})
    allowed_waivers: list[str] | None = field(default=None, metadata={"help": "Checks the dataset's validation may have waived (by id, e.g. [min_size, safety]); a version validated with any other check waived is refused. None accepts every recorded waiver; either way each one is in the run's log and on the model card."})
    check_template: bool = field(default=True, metadata={"help": "Before training, run the template_fit check (checks/template_fit.py) on the training pairs with the base model's tokenizer and the config's max_length, and refuse the run when a pair would be cut or mis-tokenised; false trains anyway (methods without TRL's max_length, grpo and ppo, never tokenise the pairs' responses and skip it)."})


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


@dataclass
class TrainResult:
    method: str
    dataset: str
    model_dir: Path
    card: Path
    metrics: dict[str, Any]


@dataclass
class TrainingData:
    ref: str
    content_hash: str
    manifest: dict[str, Any]
    train: list[dict[str, str]]      # prompt, chosen, rejected
    eval: list[dict[str, str]]       # held-out pairs for the preference metric
    chosen_sft: list[tuple[str, str]]  # (prompt, completion): the version's chosen-only subset


def load_validated(ref: str, store: str | None = None, eval_share: float = 0.1, seed: int = 0) -> TrainingData:
    """The pairs of a validated, intact version. Its `test`/`eval` split is the held-out set when it
    has one; otherwise a fixed share of prompts is held out (by prompt, so no prompt is in both)."""
    import polars as pl

    from prefdata.data.store import Store

    st = Store(store)
    v = st.get(ref)
    if v.status != "validated":
        raise GateFailed(_not_validated(v))
    # Read from a private copy whose bytes were checked against the signed manifest as they were
    # copied (Store.pinned): no window between the check and the read for a writer of the store.
    with st.pinned(v.ref) as (copy, v):
        if v.status != "validated":
            raise GateFailed(_not_validated(v))
        return _training_data(copy, v, eval_share, seed)


def _not_validated(v) -> str:
    """Why a version cannot train, and what to do: publish a draft; for a rejected one, every way out."""
    if v.status != "rejected":
        return f"{v.ref} is {v.status}, not validated: run `prefdata publish {v.ref}` and train once the gate passes"
    report = v.manifest.get("check_report") or {}
    failing = [c["id"] for c in report.get("checks") or () if c.get("status") in ("fail", "error")]
    return (f"{v.ref} is rejected: its checklist failed ({', '.join(failing) or 'see `prefdata show`'}). "
            f"Ways out: {ways_out(v.ref, failing)}")


def _training_data(st, v, eval_share: float, seed: int) -> TrainingData:
    import polars as pl

    pairs = st.load(v.ref)
    columns = ["prompt", "chosen", "rejected"]
    split = pairs["split"].fill_null("train") if "split" in pairs.columns else None
    if split is not None and split.is_in(["test", "eval"]).any():
        held = split.is_in(["test", "eval"])
        train, held_out = pairs.filter(~held), pairs.filter(held)
    else:
        prompts = sorted(pairs["prompt"].unique().to_list())
        random.Random(seed).shuffle(prompts)
        held_prompts = set(prompts[: max(1, int(len(prompts) * eval_share))]) if len(prompts) > 1 else set()
        mask = pairs["prompt"].is_in(list(held_prompts))
        train, held_out = pairs.filter(~mask), pairs.filter(mask)
    if train.height == 0:
        raise UnusableInput(f"{v.ref} has no training pairs")
    # The chosen-only subset, minus held-out prompts: mixing those in would leak the eval pairs' answers.
    sft = st.load(v.ref, "sft").filter(pl.col("prompt").is_in(train["prompt"].unique().to_list()))
    return TrainingData(v.ref, v.version, v.manifest, train.select(columns).to_dicts(), held_out.select(columns).to_dicts(),
                        list(zip(sft["prompt"].to_list(), sft["completion"].to_list())))


def recorded_waivers(manifest: dict[str, Any]) -> dict[str, str]:
    """The checks a validated version's signed check report waived, with the reason given for each."""
    report = manifest.get("check_report") or {}
    return {c["id"]: str(c.get("message") or "").removeprefix("waived: ")
            for c in report.get("checks") or () if c.get("status") == "skip" and (c.get("details") or {}).get("waived")}


def check_waivers(data: TrainingData, allowed: list[str] | None) -> dict[str, str]:
    """The version's waivers; with `allowed`, a waiver of any other check refuses the run (exit 1)."""
    waivers = recorded_waivers(data.manifest)
    if allowed is not None:
        outside = sorted(set(waivers) - set(allowed))
        if outside:
            raise GateFailed(f"{data.ref} was validated with {', '.join(outside)} waived, outside allowed_waivers "
                             f"({', '.join(allowed) or 'none'}): publish a version that passes them, or allow them in "
                             "the config")
    return waivers


def read_sft_file(path: str | Path) -> list[tuple[str, str]]:
    """(prompt, completion) rows from JSONL or Parquet; a missing column or a non-text value names the row."""
    import polars as pl

    path = Path(path)
    if not path.is_file():
        raise UnusableInput(f"SFT file {path} not found: give a JSONL or Parquet file with prompt and completion columns")
    try:
        frame = pl.read_parquet(path) if path.suffix == ".parquet" else pl.read_ndjson(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure is the file's problem
        raise UnusableInput(f"{path}: cannot read it as {'Parquet' if path.suffix == '.parquet' else 'JSONL'} ({exc})") from None
    missing = {"prompt", "completion"} - set(frame.columns)
    if missing:
        raise UnusableInput(f"{path}: missing column(s) {sorted(missing)}; an SFT file needs prompt and completion")
    for col in ("prompt", "completion"):
        if frame[col].dtype != pl.String:
            raise UnusableInput(f"{path}: column {col!r} is {frame[col].dtype}, not text")
        bad = frame.with_row_index("row").filter(pl.col(col).is_null())
        if bad.height:
            raise UnusableInput(f"{path}: row {bad['row'][0] + 1} has no {col}; remove or fill it")
    return list(zip(frame["prompt"].to_list(), frame["completion"].to_list()))


def write_sft_file(path: str | Path, examples: list[tuple[str, str]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for prompt, completion in examples:
            out.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
    return path


def sft_pool(mix: MixConfig, data: TrainingData) -> list[tuple[str, str]]:
    """The SFT examples mixed into preference training, from the configured sources."""
    unknown = set(mix.sft_sources) - {"chosen", "general"}
    if unknown:
        raise UnusableInput(f"sft_sources: unknown {sorted(unknown)}; use 'chosen' and/or 'general'")
    pool: list[tuple[str, str]] = []
    if "chosen" in mix.sft_sources:
        pool += data.chosen_sft
    if "general" in mix.sft_sources and mix.general_sft:
        pool += read_sft_file(mix.general_sft)
    return pool


def sft_batch_size(batch_size: int, ratio: float) -> int:
    """SFT examples per step for `batch_size` preference examples: ceil(batch * ratio), 0 when off."""
    return math.ceil(batch_size * ratio) if ratio > 0 else 0


# -- configs ---------------------------------------------------------------------------------------


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
        return cls(**values)  # the configs validate themselves in __post_init__ (TRL's, and ours)
    except (TypeError, ValueError) as exc:
        raise UnusableInput(f"config for {cls.__name__}: {exc}") from None


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
    import yaml

    if path is None:
        return {}
    path = Path(path)
    if not path.is_file():
        raise UnusableInput(f"config file {path} not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UnusableInput(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UnusableInput(f"{path}: a trainer config is a mapping of field: value")
    return data


def check_base_model(spec: str) -> None:
    """Refuse, in one line (exit 2), a base model that cannot load, before any training starts: a
    missing path, a folder or file that is not a saved model, a hub name that cannot be fetched. A GGUF
    file is converted here, once (prefdata.models.loading), so the checks below read the converted folder."""
    from prefdata.models.loading import load_config, local_model

    fix = ("give a model folder written by save_pretrained (config.json and weights; the demo world's "
           "is printed by `prefdata world build`), a .gguf file or a hub model name")
    path = Path(local_model(spec)).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise UnusableInput(f"base model {spec} is a {'folder' if path.is_dir() else 'file'} without config.json, "
                                f"not a model: {fix}")
        try:
            load_config(path)
        except (OSError, ValueError) as exc:
            raise UnusableInput(f"base model {spec}: its config.json cannot be read ({str(exc).splitlines()[0]}): {fix}") from None
        return
    # A hub id is "name" or "org/name"; anything else that does not exist is a path that is not there.
    if path.is_absolute() or spec.startswith((".", "~")) or spec.count("/") > 1:
        raise UnusableInput(f"base model {spec} not found: {fix}")
    try:
        load_config(spec)
    except (OSError, ValueError) as exc:
        raise UnusableInput(f"base model {spec!r} is no local folder and cannot be loaded from the hub "
                            f"({str(exc).splitlines()[0]}): {fix}") from None


def check_template(method: str, cfg: Any, data: TrainingData) -> None:
    """Refuse, in one line (GateFailed, exit 1), training pairs the trainer would truncate at the config's
    max_length or tokenise badly (checks/template_fit.py), before any model loads. Rendered as plain text,
    not with the chat template: the trainers hand TRL plain strings, which it never templates. Only
    methods with TRL's max_length field (dpo, rm, sft) tokenise the pairs; grpo and ppo generate their own
    responses. `check_template: false` waives it."""
    if not getattr(cfg, "check_template", True) or not hasattr(cfg, "max_length") or not data.train:
        return
    import polars as pl

    from prefdata.checks.template_fit import check_template_fit, load_tokenizer

    try:
        tokenizer = load_tokenizer(cfg.base_model)
    except ValueError as exc:
        raise UnusableInput(f"{method}: {exc}") from None
    result = check_template_fit(pl.DataFrame(data.train), tokenizer, max_length=cfg.max_length, chat_template=False)
    if result.status == "fail":
        raise GateFailed(f"{method}: template_fit fails on {data.ref}: {result.message}: raise max_length, shorten the "
                         f"pairs, or set check_template: false in the config to train anyway")


def config_record(config: Any) -> dict[str, Any]:
    """The config as plain data for the card. TrainingArguments.to_dict() already masks hub tokens;
    any other field named like a secret is dropped all the same."""
    data = config.to_dict() if hasattr(config, "to_dict") else asdict(config) if is_dataclass(config) else dict(config)
    secret = ("token", "api_key", "password", "secret")
    def keep(key: str) -> bool:
        if key.startswith("_"):
            return False
        return key.endswith("_tokens") or not any(s in key.lower() for s in secret)  # max_new_tokens is no secret

    return {k: v for k, v in data.items() if keep(k)}


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


def rule_reward(spec: str) -> Callable:
    """A TRL reward function from 'module:function', a verifier (prompt, completion) -> bool | float."""
    from prefdata.base.targets import load_target

    verifier = load_target(spec, what="rewards: rule")
    name = spec.partition(":")[2]

    def reward(prompts, completions, completion_ids=None, **_):
        return [float(verifier(p, c)) for p, c in zip(prompts, completions)]

    reward.__name__ = f"rule_{name}"  # TRL logs each reward function's mean under its name
    return reward


# -- the reward-model gate ---------------------------------------------------------------------------


DEFAULT_MIN_RM_ACCURACY = 0.6  # seed pitfall 3: a reward model should rank > 0.6 of held-out pairs right
MIN_RM_ACCURACY_HELP = ("Refuse an rm:DIR reward whose card (DIR/prefdata_train.json, written by `prefdata train rm`) "
                        "records a held-out pairwise accuracy below this, or records none; null turns the gate off "
                        "(a reward model from elsewhere, without a card).")


def check_reward_models(rewards: list[str], min_accuracy: float | None) -> None:
    """Refuse, in one line, each `rm:DIR` reward whose card says it ranks held-out pairs too poorly:
    below `min_accuracy` or no figure at all (GateFailed, exit 1); a folder with no card (or an unreadable
    one) is UnusableInput (exit 2). Reads only a JSON file: it runs before any model is loaded."""
    if min_accuracy is None:
        return
    waive = "set min_rm_accuracy: null in the config to use it anyway"
    for spec in rewards:
        kind, _, target = str(spec).partition(":")
        if kind != "rm" or not Path(target).is_dir():
            continue  # rule rewards have no card; a missing folder is the plugin's own one-line error
        record = Path(target) / "prefdata_train.json"
        if not record.is_file():
            raise UnusableInput(f"rewards: rm:{target} has no prefdata_train.json, so its held-out accuracy is unknown "
                                f"and min_rm_accuracy {min_accuracy:g} cannot be checked: train it with `prefdata train "
                                f"rm`, or {waive}")
        try:
            accuracy = json.loads(record.read_text(encoding="utf-8"))["metrics"].get("heldout_pairwise_accuracy")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UnusableInput(f"rewards: rm:{target}: {record.name} cannot be read ({exc}): retrain it with "
                                f"`prefdata train rm`, or {waive}") from None
        if not isinstance(accuracy, (int, float)) or isinstance(accuracy, bool):
            raise GateFailed(f"rewards: rm:{target} records no held-out pairwise accuracy in {record.name} (a version "
                             f"with no held-out pairs?), so min_rm_accuracy {min_accuracy:g} cannot be checked: retrain "
                             f"it on a version with an eval split, or {waive}")
        if accuracy < min_accuracy:
            raise GateFailed(f"rewards: rm:{target}: held-out pairwise accuracy {accuracy:.3g} is below min_rm_accuracy "
                             f"{min_accuracy:g}: it ranks unseen pairs too poorly to train against (a policy would learn "
                             f"its errors); train it longer or on more pairs, or lower min_rm_accuracy")


# -- evaluation --------------------------------------------------------------------------------------


def load_evaluator(spec: str | None) -> Callable[[Path], dict[str, float]] | None:
    if not spec:
        return None
    from prefdata.base.targets import load_target

    return load_target(spec, what="evaluator")


def sft_loss(model, tokenizer, examples: list[tuple[str, str]]) -> float:
    """Mean next-token loss of the completions (+ eos) given their prompts: the held-out SFT loss."""
    from prefdata.models.logprobs import completion_logprobs

    total, count = 0.0, 0
    for logps, mask in completion_logprobs(model, tokenizer, examples):
        total -= (logps * mask).sum().item()
        count += int(mask.sum())
    return total / max(count, 1)


def preference_accuracy(model, tokenizer, pairs: list[dict[str, str]]) -> float | None:
    """Share of held-out pairs where the model gives the chosen completion a higher mean token log-prob
    than the rejected one (seed pitfall 3's sanity check; > 0.6 expected after training)."""
    from prefdata.models.logprobs import mean_logprobs

    if not pairs:
        return None
    chosen = mean_logprobs(model, tokenizer, [(p["prompt"], p["chosen"]) for p in pairs])
    rejected = mean_logprobs(model, tokenizer, [(p["prompt"], p["rejected"]) for p in pairs])
    return sum(c > r for c, r in zip(chosen, rejected)) / len(pairs)


LENGTH_PROMPTS = 128  # held-out prompts generated on for the length figure: enough for a stable mean, cheap


def mean_response_length(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int = 32) -> float | None:
    """Mean length in tokens of the model's greedy responses to the first LENGTH_PROMPTS held-out
    prompts, up to (not counting) the first EOS, capped at max_new_tokens. Greedy, so the figure is the
    same for the same weights: before and after differ only by what training changed."""
    import torch

    prompts = prompts[:LENGTH_PROMPTS]
    if not prompts or max_new_tokens <= 0:
        return None
    side, tokenizer.padding_side = tokenizer.padding_side, "left"  # every prompt ends where generation starts
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    lengths: list[int] = []
    model.eval()
    try:
        with torch.inference_mode():
            for lo in range(0, len(prompts), batch_size):
                enc = tokenizer(prompts[lo:lo + batch_size], return_tensors="pt", padding=True).to(model.device)
                # Never past the model's context (a tiny model's may be 64 tokens): the cap is then the room left.
                room = (getattr(model.config.get_text_config(), "max_position_embeddings", None) or 1 << 30) - enc["input_ids"].size(1)
                out = model.generate(**enc, do_sample=False, max_new_tokens=max(1, min(max_new_tokens, room)), pad_token_id=pad,
                                     eos_token_id=tokenizer.eos_token_id)
                for row in out[:, enc["input_ids"].size(1):].tolist():
                    ends = [i for i, t in enumerate(row) if t == tokenizer.eos_token_id]
                    lengths.append(ends[0] if ends else len(row))
    finally:
        tokenizer.padding_side = side
    return sum(lengths) / len(lengths)


def evaluate_model(model_dir: Path | str, mix: MixConfig, data: TrainingData) -> dict[str, float]:
    """The figures a run reports before and after: preference accuracy on held-out pairs, held-out SFT
    loss (the alignment tax), and whatever the configured evaluator measures."""
    from prefdata.models.loading import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir)
    metrics: dict[str, float] = {}
    accuracy = preference_accuracy(model, tokenizer, data.eval)
    if accuracy is not None:
        metrics["preference_accuracy"] = accuracy
    length = mean_response_length(model, tokenizer, sorted({p["prompt"] for p in data.eval}), mix.length_max_new_tokens)
    if length is not None:
        metrics["mean_response_length"] = length
    if mix.eval_sft:
        metrics["heldout_sft_loss"] = sft_loss(model, tokenizer, read_sft_file(mix.eval_sft))
    del model
    evaluator = load_evaluator(mix.evaluator)
    if evaluator is not None:
        metrics.update(evaluator(Path(model_dir), **(mix.evaluator_kwargs or {})))
    return metrics


def before_after(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    out = {"before": before, "after": after,
           "change": {k: after[k] - before[k] for k in after if k in before and before[k] is not None}}
    if "mean_response_length" in before and "mean_response_length" in after:
        # Also at the top of the card: a run that "wins" by growing its answers shows it at a glance.
        out["mean_response_length"] = {k: out[k]["mean_response_length"] for k in ("before", "after")}
    return out


# -- distributed runs (accelerate launch) ------------------------------------------------------------


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
    from prefdata.trainers.guards import GuardTripped

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


# -- the run's log -----------------------------------------------------------------------------------


class RunLog:
    """The run's log: stage lines (`log(line)`) go to the console and DIR/train.log; per-step lines
    (`log.step(line)`: TRL's metric dict per logged step, PPO's per-step line) go to train.log, and to
    the console only when `verbose`. The file opens on the first line, so a run refused before it
    starts leaves no folder behind. Plugins that only call `log(line)` work as before."""

    def __init__(self, path: Path, echo: Callable[[str], None], verbose: bool = False) -> None:
        self.path, self.echo, self.verbose = Path(path), echo, verbose
        self._main: bool | None = None
        self._started = False
        self._preface: list[str] = []

    def preface(self, line: str) -> None:
        """A line about the run said before it starts (its waivers, where its curves go): on the console
        now, in the file only once the run writes its first line, so a refused run still leaves no folder."""
        self._preface.append(str(line))
        self.echo(line)

    def _write(self, line: str) -> None:
        if self._preface:
            lines, self._preface = self._preface, []
            for early in lines:
                self._write(early)
        if self._main is None:
            # Under torchrun / `accelerate launch` (both set RANK), rank 0 alone writes the file. Read from the
            # environment, not accelerate's PartialState, so logging never sets up the process group early.
            import os

            self._main = os.environ.get("RANK", "0") == "0"
        if self._main:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a" if self._started else "w", encoding="utf-8") as out:  # a rerun starts it afresh
                out.write(line + "\n")
            self._started = True

    def __call__(self, line: str) -> None:
        self._write(str(line))
        self.echo(line)

    def step(self, line: str) -> None:
        self._write(str(line))
        if self.verbose:
            self.echo(line)


def route_step_logs(trainer, log: Callable[[str], None]) -> None:
    """Send a transformers Trainer's per-step metric dicts to `log.step` instead of stdout: its
    ProgressCallback prints each log dict through tqdm.write (stdout) and PrinterCallback prints it.
    The progress bar itself (stderr) stays. A plain `log` callable (no .step) leaves TRL as it is."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback

    step = getattr(log, "step", None)
    if step is None:
        return

    class BarOnly(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            return None

    class StepLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and logs:
                step(str({k: f"{v:.4g}" if isinstance(v, float) else v for k, v in logs.items() if k != "total_flos"}))

    names = {type(cb) for cb in trainer.callback_handler.callbacks}
    if ProgressCallback in names:
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(BarOnly)
    if PrinterCallback in names:
        trainer.remove_callback(PrinterCallback)
    trainer.add_callback(StepLog)


# -- saving ----------------------------------------------------------------------------------------


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


CURVES_FILE = "curves.png"  # beside the model card, which shows it


def write_card(output_dir: Path, method: str, data: TrainingData, base_model: str, config: Any,
               metrics: dict[str, Any]) -> Path:
    """README.md with a YAML header naming the base model and the exact dataset version and hash."""
    import yaml

    header = {
        "base_model": base_model,
        "library_name": "transformers",
        "tags": ["prefdata", method, "trl", "peft"],
        "prefdata": {"method": method, "dataset": data.ref, "dataset_hash": data.content_hash,
                     "waivers": recorded_waivers(data.manifest), "config": config_record(config), "metrics": metrics},
    }
    waivers = header["prefdata"]["waivers"]
    body = [
        "---", yaml.safe_dump(json.loads(json.dumps(header, default=str)), sort_keys=False).rstrip(), "---",
        f"# {method} from {data.ref}", "",
        f"Trained by prefdata `{method}` from the validated dataset version `{data.ref}` "
        f"(content hash `{data.content_hash}`), starting from `{base_model}`.", "",
        *(["## Waivers", "", "The dataset passed its checklist with these checks waived (from its signed report):", "",
           *[f"- `{check}`: {reason}" for check, reason in waivers.items()], ""] if waivers else []),
        *(["## Warnings", "", *[f"- {w}" for w in metrics.get("warnings", [])], ""] if metrics.get("warnings") else []),
        "```json", json.dumps(metrics, indent=2, default=str), "```", "",
    ]
    if (output_dir / CURVES_FILE).is_file():  # drawn by trainers.train before the card
        body += ["## Training curves", "", f"![training curves]({CURVES_FILE})", ""]
    card = output_dir / "README.md"
    card.write_text("\n".join(body), encoding="utf-8")
    (output_dir / "prefdata_train.json").write_text(json.dumps(header["prefdata"], indent=2, default=str) + "\n")
    return card


class Timer:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return round(time.perf_counter() - self.start, 2)
