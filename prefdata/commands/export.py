"""`prefdata export NAME@VERSION --format F --out DIR`: a validated version's pairs written for
another trainer (TRL, OpenRLHF, LLaMA-Factory), with a sidecar naming the version and its content
hash (prefdata.data.export).

The version is read by the very function `prefdata train` reads it with
(prefdata.trainers.data.load_validated): a draft, a rejected version or one that fails `verify` is
refused the same way, with the same one line and exit code. Only typer at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def export(
    ref: Annotated[str, typer.Argument(help="NAME@VERSION of a validated version (or NAME for the latest).")],
    format: Annotated[str, typer.Option("--format", "-f", help="trl (prompt, chosen, rejected text), trl-chat (TRL's "
                                                               "conversational rows), openrlhf or llama-factory.")],
    out: Annotated[Path, typer.Option(help="Folder for the split files (train.jsonl, test.jsonl or eval.jsonl) and "
                                           "prefdata_export.json; new, empty, or one a previous export wrote.")],
    store: Annotated[Optional[str], typer.Option("--store", help="Store root or fsspec URL (default: $PREFDATA_STORE "
                                                                 "or .prefdata/store)")] = None,
) -> int:
    """Write a validated version's pairs as JSON Lines for TRL, OpenRLHF or LLaMA-Factory, one file per split,
    from the stored text (no chat template applied), with a sidecar naming the version and its content hash."""
    from prefdata.base.outputs import writable_dir
    from prefdata.commands.console import terminal
    from prefdata.data.export import HELD_OUT, check_format, check_out_dir, write_export

    check_format(format)
    writable_dir(out, "--out")
    previous = check_out_dir(out)
    from prefdata.trainers.data import load_validated

    data = load_validated(ref, store)  # refuses what `prefdata train` refuses, as it does
    splits = data.manifest["counts"]["rows"].get("default", {})
    held = [s for s in HELD_OUT if s in splits]
    if held:  # the version's own held-out split, as train holds it out (test and eval together)
        parts = {"train": data.train, held[0]: data.eval}
    else:  # train would hold out a share of prompts; the export keeps every pair in train
        parts = {"train": data.train + data.eval}
    sidecar = write_export(out, format, parts, ref=data.ref, content_hash=data.content_hash, previous=previous,
                           extra={"held_out_splits": held} if len(held) > 1 else None)
    counts = ", ".join(f"{split} {n}" for split, n in sidecar["rows"].items())
    terminal().print(f"exported {data.ref} as {format} to {out}: {counts} (sidecar {out / 'prefdata_export.json'})")
    return 0
