"""A validated version's pairs as another trainer reads them: `prefdata export NAME@VERSION --format F
--out DIR` writes one JSON Lines file per split (`datasets.load_dataset("json", data_files=...)`
loads each) and a sidecar, `prefdata_export.json`, naming the version, its content hash, the
format, the rows per split and the time of the export.

The rows come from the version's stored text (the same pairs `prefdata train` reads), never from a
chat-template rendering: the trainer that reads them applies its own template. The formats:

    trl            prompt, chosen, rejected as text: TRL's standard preference format
    trl-chat       TRL's conversational preference format: prompt as {role, content} messages (a
                   multi-turn import's turns, as its `prompt_messages` keeps them; else one user
                   message), chosen and rejected as one assistant message each
    openrlhf       chosen and rejected as whole conversations (the prompt's messages, then the
                   answer), under the keys OpenRLHF's reward and DPO trainers read by default
                   (`--chosen_key chosen --rejected_key rejected`, no `--prompt_key`), for its
                   `--apply_chat_template`
    llama-factory  LLaMA-Factory's alpaca preference rows (instruction, input, chosen, rejected),
                   with the `dataset_info.json` that describes them (`ranking: true`)

Text formats keep the prompt as the store flattens a conversation ("User: ...\\n\\nAssistant: ...").
The folder is written a file at a time, each by an atomic rename, the sidecar last; a folder that a
previous export wrote is replaced (the files its sidecar lists), any other folder must be empty.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from prefdata import __version__
from prefdata.base.errors import UnusableInput
from prefdata.base.files import read_side_file

EXPORT_FORMATS = ("trl", "trl-chat", "openrlhf", "llama-factory")
SIDECAR = "prefdata_export.json"
DATASET_INFO = "dataset_info.json"  # LLaMA-Factory's list of datasets (data/README.md)
HELD_OUT = ("test", "eval")  # the splits `prefdata train` holds out (prefdata.trainers.data)


def check_format(fmt: str) -> str:
    if fmt not in EXPORT_FORMATS:
        raise UnusableInput(f"--format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    return fmt


def check_out_dir(out: Path) -> list[str]:
    """Before any work: the files a previous export wrote into `out` (replaced by this one), or []
    for a new or empty folder; a folder holding anything else is refused (exit 2), so that no file
    of another export, or of anything else, is left beside this one's or overwritten."""
    if not out.is_dir():
        return []
    try:
        entries = sorted(p.name for p in out.iterdir())
    except OSError as exc:
        raise UnusableInput(f"--out {out}: cannot list it ({exc.strerror})") from None
    if not entries:
        return []
    if SIDECAR not in entries:
        raise UnusableInput(f"--out {out}: is not empty and holds no {SIDECAR}: name a new or empty folder "
                            "(or one a previous export wrote)")
    text = read_side_file(out / SIDECAR, "--out")
    try:
        files = [str(f) for f in json.loads(text)["files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise UnusableInput(f"--out {out}: its {SIDECAR} cannot be read ({exc}): name a new or empty folder") from None
    outside = [f for f in files if Path(f).name != f or f in (".", "..", SIDECAR)]
    if outside:
        raise UnusableInput(f"--out {out}: its {SIDECAR} lists {outside[0]!r}, no file of an export: "
                            "name a new or empty folder")
    stray = sorted(set(entries) - set(files) - {SIDECAR})
    if stray:
        raise UnusableInput(f"--out {out}: holds files no export wrote ({', '.join(stray[:3])}): name a new or "
                            "empty folder")
    return files


def _messages(pair: dict[str, Any]) -> list[dict[str, str]]:
    """The prompt as {role, content} messages: a conversational import's turns as stored, else the
    prompt text as one user message (what `import --format trl-chat` reads back as the same text)."""
    turns = pair.get("prompt_messages")
    if turns:
        return [{"role": m["role"], "content": m["content"]} for m in json.loads(turns)]
    return [{"role": "user", "content": pair["prompt"]}]


def _reply(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def export_row(fmt: str, pair: dict[str, Any]) -> dict[str, Any]:
    """One stored pair (prompt, chosen, rejected and its prompt_messages, if any) as `fmt`'s row."""
    if fmt == "trl":
        return {"prompt": pair["prompt"], "chosen": pair["chosen"], "rejected": pair["rejected"]}
    if fmt == "trl-chat":
        return {"prompt": _messages(pair), "chosen": _reply(pair["chosen"]), "rejected": _reply(pair["rejected"])}
    if fmt == "openrlhf":
        prompt = _messages(pair)
        return {"chosen": prompt + _reply(pair["chosen"]), "rejected": prompt + _reply(pair["rejected"])}
    if fmt == "llama-factory":
        return {"instruction": pair["prompt"], "input": "", "chosen": pair["chosen"], "rejected": pair["rejected"]}
    raise ValueError(f"unknown export format {fmt!r}")  # check_format refuses it first


def llama_factory_info(name: str, version: str, files: dict[str, str]) -> dict[str, Any]:
    """dataset_info.json: one entry per split file, alpaca preference columns, `ranking: true`
    (LLaMA-Factory's data/README.md, "Preference Dataset"). Train is `NAME_VERSION`, another split
    `NAME_VERSION_SPLIT`."""
    columns = {"prompt": "instruction", "query": "input", "chosen": "chosen", "rejected": "rejected"}
    return {f"{name}_{version}" + ("" if split == "train" else f"_{split}"):
            {"file_name": file, "formatting": "alpaca", "ranking": True, "columns": columns}
            for split, file in files.items()}


def _write(out: Path, rel: str, lines: list[str]) -> str:
    """One file, whole or not at all (a temporary name, then an atomic rename); its sha256."""
    target = out / rel
    temporary = out / f".{rel}.tmp-{os.getpid()}"
    digest = hashlib.sha256()
    try:
        with open(temporary, "w", encoding="utf-8", newline="\n") as handle:
            for line in lines:
                handle.write(line)
                digest.update(line.encode("utf-8"))
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return digest.hexdigest()


def write_export(out: Path, fmt: str, splits: dict[str, list[dict[str, Any]]], *, ref: str, content_hash: str,
                 previous: list[str] = (), extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write `splits` (split -> stored pairs) into `out` as `fmt`, then the sidecar; return it.
    `previous`: the files of an earlier export there (check_out_dir), removed once these are written."""
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, str] = {}
    written: dict[str, dict[str, Any]] = {}
    for split, pairs in splits.items():
        rel = f"{split}.jsonl"
        lines = [json.dumps(export_row(fmt, p), ensure_ascii=False) + "\n" for p in pairs]
        written[rel] = {"split": split, "rows": len(lines), "sha256": _write(out, rel, lines)}
        files[split] = rel
    if fmt == "llama-factory":
        name, _, version = ref.partition("@")
        info = json.dumps(llama_factory_info(name, version, files), indent=2, ensure_ascii=False) + "\n"
        written[DATASET_INFO] = {"sha256": _write(out, DATASET_INFO, [info])}
    for rel in set(previous) - set(written):
        (out / rel).unlink(missing_ok=True)
    sidecar = {
        "version": ref,
        "content_hash": content_hash,
        "format": fmt,
        "rows": {split: len(pairs) for split, pairs in splits.items()},
        "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "prefdata_version": __version__,
        **(extra or {}),
        "files": written,
    }
    _write(out, SIDECAR, [json.dumps(sidecar, indent=2, ensure_ascii=False) + "\n"])
    return sidecar
