"""The model card a run writes beside its model: README.md with a YAML header the Hub reads (its
`base_model` a hub id, only when the base came from the hub), the dataset version and its content hash,
the rendering its text was trained in (prefdata.models.chat: chat template on or off, the template's
sha256, the system prompt; and the version's own when `allow_rendering_mismatch` let them differ), the
waivers, the effective config and the run's summary figures; each logged step's metrics go to
train_steps.jsonl, which the card links (once on the card they made it 134 KB, twice over). The whole
record, local base model path and steps included, is prefdata_train.json.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from prefdata.trainers.curves import CURVES_FILE
from prefdata.trainers.data import TrainingData, recorded_waivers
from prefdata.trainers.rendering import rendering_record


def write_card(output_dir: Path, method: str, data: TrainingData, base_model: str, config: Any,
               metrics: dict[str, Any]) -> Path:
    """README.md with a YAML header naming the exact dataset version and hash (and the base model's hub
    id), train_steps.jsonl, and prefdata_train.json."""
    import yaml

    record = {"method": method, "dataset": data.ref, "dataset_hash": data.content_hash, "base_model": str(base_model),
              "rendering": rendering_record(data), "waivers": recorded_waivers(data.manifest),
              "config": config_record(config), "metrics": metrics}
    summary = {k: v for k, v in metrics.items() if k != "log"}
    header = {
        **({"base_model": str(base_model)} if hub_id(base_model) else {}),
        "library_name": "transformers",
        "tags": ["prefdata", method, "trl", "peft"],
        "prefdata": {**{k: v for k, v in record.items() if k != "base_model"}, "metrics": summary},
    }
    steps = metrics.get("log") or []
    (output_dir / STEPS_FILE).write_text("".join(json.dumps(row, default=str) + "\n" for row in steps))
    rendering = record["rendering"]
    waivers = record["waivers"]
    body = [
        "---", yaml.safe_dump(json.loads(json.dumps(header, default=str)), sort_keys=False).rstrip(), "---",
        f"# {method} from {data.ref}", "",
        f"Trained by prefdata `{method}` from the validated dataset version `{data.ref}` "
        f"(content hash `{data.content_hash}`), starting from `{base_model if hub_id(base_model) else Path(str(base_model)).name}`.", "",
        *([f"Its text was rendered as {data.renderer.rendering.describe()} (prefdata.models.chat), "
           "as the model reads it; "
           + (f"the version records {data.rendering.describe()} (trained anyway: allow_rendering_mismatch)."
              if rendering.get("version_rendering") else "the version records the same." if data.rendering
              else "the version records none."), ""] if rendering else []),
        *(["## Waivers", "", "The dataset passed its checklist with these checks waived (from its signed report):", "",
           *[f"- `{check}`: {reason}" for check, reason in waivers.items()], ""] if waivers else []),
        *(["## Warnings", "", *[f"- {w}" for w in metrics.get("warnings", [])], ""] if metrics.get("warnings") else []),
        "## Figures", "", "```json", json.dumps(summary, indent=2, default=str), "```", "",
        f"Each logged step's metrics: [{STEPS_FILE}]({STEPS_FILE}) ({len(steps)} steps).", "",
    ]
    if (output_dir / CURVES_FILE).is_file():  # drawn by trainers.train before the card
        body += ["## Training curves", "", f"![training curves]({CURVES_FILE})", ""]
    card = output_dir / "README.md"
    card.write_text("\n".join(body), encoding="utf-8")
    (output_dir / "prefdata_train.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return card


STEPS_FILE = "train_steps.jsonl"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_id(base_model: Any) -> bool:
    """Whether the base model was named by a hub id (`org/name`, no such local path): the Hub's
    `base_model` takes only that; a local folder or file stays in prefdata_train.json."""
    text = str(base_model)
    return bool(_HUB_ID.match(text)) and not Path(text).exists() and not text.startswith((".", "/"))


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
