"""What `train` refuses before any model loads, in one line each: a base model that cannot load, a
version sampled through another rendering than the base model's tokenizer gives (trainers/rendering.py),
and training pairs the trainer would cut or mis-tokenise (the template_fit check).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefdata.base.errors import GateFailed, UnusableInput
from prefdata.models.chat import Rendering
from prefdata.trainers.data import TrainingData


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
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        why = "HF_HUB_OFFLINE is set (prefdata's default): set HF_HUB_OFFLINE=0 to download it, or " if offline else ""
        raise UnusableInput(f"base model {spec!r} is no local folder and cannot be loaded from the hub "
                            f"({str(exc).splitlines()[0]}): {why}{fix}") from None


def base_tokenizer(method: str, spec: str) -> Any:
    """The base model's tokenizer (cheap: no weights), or one line (exit 2) when it has none."""
    from prefdata.models.loading import load_tokenizer

    try:
        return load_tokenizer(spec)
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError... for a bad folder
        raise UnusableInput(f"{method}: {spec}: cannot load a tokenizer ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}); give a model folder saved with "
                            "save_pretrained") from None


def check_rendering(method: str, cfg: Any, data: TrainingData, tokenizer: Any) -> Rendering:
    """The rendering the run will use (trainers/rendering.py), before any model loads: a version
    sampled through another rendering than the base model's (another chat template, none, another
    system prompt) is refused in one line (GateFailed, exit 1) unless `allow_rendering_mismatch`."""
    from prefdata.trainers.rendering import training_rendering

    return training_rendering(cfg, data, tokenizer, method)


def check_template(method: str, cfg: Any, data: TrainingData, tokenizer: Any, rendering: Rendering) -> None:
    """Refuse, in one line (GateFailed, exit 1), training pairs the trainer would truncate at the config's
    max_length or tokenise badly (checks/template_fit.py), before any model loads. Rendered with the
    rendering the run uses (`check_rendering`): the text the trainers hand TRL is that rendering's,
    which TRL tokenises as it is. Only methods with TRL's max_length field (dpo, rm, sft) tokenise the
    pairs; grpo and ppo generate their own responses. `check_template: false` waives it."""
    if not getattr(cfg, "check_template", True) or not hasattr(cfg, "max_length") or not data.train:
        return
    import polars as pl

    from prefdata.checks.template_fit import check_template_fit

    result = check_template_fit(pl.DataFrame(data.train), tokenizer, max_length=cfg.max_length, rendering=rendering)
    if result.status == "fail":
        raise GateFailed(f"{method}: template_fit fails on {data.ref}: {result.message}: raise max_length, shorten the "
                         f"pairs, or set check_template: false in the config to train anyway")
