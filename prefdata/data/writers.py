"""Write normalised rows and quarantine files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from prefdata.base.errors import UnusableInput
from prefdata.data.importer import ImportResult


def write_frame(frame: pl.DataFrame, path: Path) -> None:
    suffix = path.suffix.lower()
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix in (".parquet", ".pq"):
        frame.write_parquet(path)
    elif suffix in (".jsonl", ".ndjson"):
        frame.write_ndjson(path)
    else:
        raise UnusableInput(f"{path}: --out must end in .jsonl or .parquet")


def _beside(out: Path, kind: str) -> Path:
    return out.with_name(f"{out.stem}.{kind}{out.suffix}")


def write_rows(result: ImportResult, out: Path) -> dict[str, str]:
    """TRL standard rows to `out`; comparisons and votes, when there are any, beside it."""
    written = {"pairs": str(out)}
    write_frame(result.pairs, out)
    for kind, frame in (("comparisons", result.comparisons), ("votes", result.votes)):
        if frame is not None:
            path = _beside(out, kind)
            write_frame(frame, path)
            written[kind] = str(path)
    return written


def write_quarantine(quarantine: list[dict[str, Any]], out: Path) -> Path:
    path = out.with_name(f"{out.stem}.quarantine.jsonl")
    with path.open("w", encoding="utf-8", errors="surrogatepass") as handle:
        for entry in quarantine:
            handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return path
