"""What a trainer trains from: the pairs of a validated, intact version (its held-out split and its
chosen-only SFT subset), the waivers its signed check report records, and SFT files (JSONL or
Parquet with prompt, completion).

No plugin trains from a version that is not validated or fails `verify`: the card it writes names
the version and its content hash, so a model can always be traced to the exact data behind it.

The pairs here are the version's text as stored; `TrainingData.rendering` is how the version's
lineage says its prompts were rendered when they were sampled (prefdata.models.chat), and each pair
keeps its `prompt_messages` (the turns of a conversational import). trainers/rendering.py turns them
into the text TRL gets, with the one chat rendering.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefdata.base.errors import GateFailed, UnusableInput, ways_out
from prefdata.models.chat import Rendering


@dataclass
class TrainingData:
    """A version's pairs as a run reads them. As `load_validated` returns it, the text is the stored
    text; `trainers.rendering.rendered` returns a copy whose pairs and examples are the rendered text
    the model reads (`renderer` set, `source` the stored data)."""

    ref: str
    content_hash: str
    manifest: dict[str, Any]
    train: list[dict[str, str]]      # prompt, chosen, rejected (and prompt_messages, when the version has it)
    eval: list[dict[str, str]]       # held-out pairs for the preference metric
    chosen_sft: list[tuple[str, str]]  # (prompt, completion): the version's chosen-only subset
    rendering: Rendering | None = None  # as the version's lineage records it; None: it records none (imported data)
    messages: dict[str, str] = field(default_factory=dict)  # prompt -> its prompt_messages JSON (conversational imports)
    renderer: Any = None  # trainers.rendering.Renderer once rendered: the text above is then the model's input
    source: TrainingData | None = None  # the stored text this rendered copy was made from


def load_validated(ref: str, store: str | None = None, eval_share: float = 0.1, seed: int = 0) -> TrainingData:
    """The pairs of a validated, intact version. Its `test`/`eval` split is the held-out set when it
    has one; otherwise a fixed share of prompts is held out (by prompt, so no prompt is in both)."""
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
    columns = ["prompt", "chosen", "rejected"] + (["prompt_messages"] if "prompt_messages" in pairs.columns else [])
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
    messages: dict[str, str] = {}
    if "prompt_messages" in pairs.columns:
        for prompt, turns in pairs.select("prompt", "prompt_messages").drop_nulls().iter_rows():
            messages.setdefault(prompt, turns)
    return TrainingData(v.ref, v.version, v.manifest, train.select(columns).to_dicts(), held_out.select(columns).to_dicts(),
                        list(zip(sft["prompt"].to_list(), sft["completion"].to_list())),
                        rendering=Rendering.from_record((v.manifest.get("lineage") or {}).get("rendering")),
                        messages=messages)


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
